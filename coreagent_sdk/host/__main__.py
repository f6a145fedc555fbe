"""`python -m coreagent_sdk.host module:agent --port N [--store FILE --register-to URL ...]`.

Serves one agent: `module:agent` names an `AgentHost`, or an agent (an async
function of a `Turn`) that a host is made for under `--name` (default: the
attribute's name). Prints one JSON line `{"name", "url"}` once listening;
SIGTERM drains running turns, deregisters and exits 0 within 10 s.

Or many: `module:host` names a `MultiAgentHost`; each agent listens on its own
port (`--port` and the ports after it, or free ones), `--store` keeps every
agent's sessions in one file, `--register-to`,
`--token-env` and `--endpoint` (here `scheme://host`, each agent adding its
port) join every agent to the hub, and the line printed is
`{"agents": {name: url, ...}}`.

`--attach-token-env NAME` makes every agent require the shared token held in
the environment variable NAME, as a daemon's `--attach-token=<ENVVAR>` does.
The token itself is never an argument: a command line shows in `ps` and in
shell history, so `--attach-token VALUE` is refused without repeating it.

`--a2a` also answers the A2A JSON-RPC transport on the same port (the `a2a` extra):
each agent's card then declares it; see docs/guides/a2a.md. `--agent-card-external-url
URL` makes the card name URL instead of the one it was fetched from (one agent only).

`--store-sync full` makes every write to the store survive a power cut, not
only a killed process (the default, `normal`); see the host guide.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from .._http._endpoint import endpoint_problem
from ..errors import CoreAgentError
from ._agents_host import MultiAgentHost
from ._attach_auth import read_attach_token
from ._cli import QuietParser
from ._host import DEFAULT_GRACE, DEFAULT_SESSION_IDLE_TIMEOUT, AgentHost
from ._process import run
from ._store import SYNCHRONOUS


def _load(target: str) -> Any:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        # What was given is not repeated: a token typed where the target belongs would be.
        raise SystemExit(
            "coreagent_sdk.host: the target is not module:attribute (what was given is not "
            "repeated here: it may be a token); name what to serve, such as my_agents:triage"
        )
    sys.path.insert(0, os.getcwd())  # as `python -m` users expect: their modules are here
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"coreagent_sdk.host: cannot import {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SystemExit(
            f"coreagent_sdk.host: module {module_name!r} has no attribute {attr!r}"
        ) from None


_NO_STORE = (
    "coreagent_sdk.host: --store-sync applies to a store file: name one with --store (a host "
    "without one keeps a private temporary file, which syncs nothing)"
)


def build(args: argparse.Namespace) -> AgentHost | MultiAgentHost:
    """The host the command line describes."""
    target = _load(args.target)
    if isinstance(target, MultiAgentHost):
        if args.store is not None:
            if target.store.path is not None:
                raise SystemExit(
                    f"coreagent_sdk.host: {args.target!r} already keeps its sessions in "
                    f"{target.store.path!r}; drop --store, or store= in its module"
                )
            target._use_store(args.store)
        if args.store_sync != "normal":
            if target.store.path is None:
                raise SystemExit(_NO_STORE)
            target.store.synchronous = args.store_sync  # read when the file opens
        if args.session_idle_timeout != DEFAULT_SESSION_IDLE_TIMEOUT:
            if "session_idle_timeout" in target.host_options:
                raise SystemExit(
                    f"coreagent_sdk.host: {args.target!r} already sets session_idle_timeout="
                    f"{target.host_options['session_idle_timeout']!r}; drop "
                    "--session-idle-timeout, or the keyword in its module"
                )
            target.host_options["session_idle_timeout"] = args.session_idle_timeout
        if args.attach_token_env is not None:
            if target.host_options.get("attach_token_env"):
                raise SystemExit(
                    f"coreagent_sdk.host: {args.target!r} already sets attach_token_env; drop "
                    "--attach-token-env, or the keyword in its module"
                )
            read_attach_token(args.attach_token_env)  # unset: fail now, not per agent
            target.host_options["attach_token_env"] = args.attach_token_env
        if args.a2a:
            target.host_options["a2a"] = True
        if args.agent_card_external_url is not None:
            raise SystemExit(
                f"coreagent_sdk.host: {args.target!r} serves each agent on its own port, and "
                "--agent-card-external-url names one URL; serve an agent that needs one on "
                "its own (module:agent --agent-card-external-url URL)"
            )
        return _joined(target, args)
    joined = {
        "register_to": args.register_to,
        "token_env": args.token_env,
        "endpoint": args.endpoint,
    }
    configured = {**joined, "store": args.store, "attach_token_env": args.attach_token_env}
    if args.store_sync != "normal":
        configured["store_sync"] = args.store_sync
    if args.session_idle_timeout != DEFAULT_SESSION_IDLE_TIMEOUT:
        configured["session_idle_timeout"] = args.session_idle_timeout
    if args.a2a:
        configured["a2a"] = True
    if args.agent_card_external_url is not None:
        configured["agent_card_external_url"] = args.agent_card_external_url
    if isinstance(target, AgentHost):
        given = [f"--{k.replace('_', '-')}" for k, v in configured.items() if v is not None]
        if given:
            raise SystemExit(
                f"coreagent_sdk.host: {args.target!r} is an AgentHost, configured in its module; "
                f"pass {', '.join(given)} to AgentHost(...) there, or name an agent function"
            )
        return target
    if not callable(target):
        raise SystemExit(
            f"coreagent_sdk.host: {args.target!r} is {type(target).__name__}, neither an "
            "AgentHost nor an agent (an async function of a Turn)"
        )
    if args.store_sync != "normal" and args.store is None:
        raise SystemExit(_NO_STORE)
    name = args.name or args.target.partition(":")[2]
    external = args.agent_card_external_url
    if external is not None and endpoint_problem(external) is not None:
        raise SystemExit(  # the value is not repeated: command lines never repeat a refusal
            "coreagent_sdk.host: --agent-card-external-url takes an absolute http(s) URL with "
            "a host, such as https://agents.example.com"
        )
    return AgentHost(
        name,
        behavior=target,
        description=args.description or "",
        store=args.store,
        store_sync=args.store_sync,
        session_idle_timeout=args.session_idle_timeout,
        attach_token_env=args.attach_token_env,
        a2a=args.a2a,
        external_url=external,
        **joined,
    )


def _joined(host: MultiAgentHost, args: argparse.Namespace) -> MultiAgentHost:
    """A multi-agent host joined to the hub the command line names (its own unless given)."""
    if args.register_to is not None and host.register_to is not None:
        raise SystemExit(
            f"coreagent_sdk.host: {args.target!r} already joins {host.register_to!r}; "
            "drop --register-to, or register_to= in its module"
        )
    if args.register_to is not None or args.endpoint is not None or args.token_env is not None:
        host.join(args.register_to, token_env=args.token_env, endpoint_host=args.endpoint)
    return host


class _TokenOnCommandLine(argparse.Action):
    """`--attach-token VALUE`: refused, and the value is never repeated."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        parser.error(
            "--attach-token takes no token on the command line (ps and shell history show "
            "it); put the token in an environment variable and pass --attach-token-env NAME"
        )


def parser() -> argparse.ArgumentParser:
    """The command line's parser."""
    # Quiet: a refused value is never repeated, and no abbreviations (`--attach-token X`
    # must never be read as `--attach-token-env X`).
    parser = QuietParser(
        prog="python -m coreagent_sdk.host", description="Serve an agent on the attach wire."
    )
    parser.add_argument(
        "target", help="module:attribute, an AgentHost, a MultiAgentHost or an agent function"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free one)")
    parser.add_argument("--name", help="the agent's name (default: the attribute's)")
    parser.add_argument("--description", help="serve an A2A agent card with this description")
    parser.add_argument(
        "--a2a",
        action="store_true",
        help="also answer the A2A JSON-RPC transport on the same port (the 'a2a' extra)",
    )
    parser.add_argument(
        "--agent-card-external-url",
        metavar="URL",
        help="the URL the agent card names instead of the one it was fetched from (behind a "
        "proxy that forwards neither Host nor X-Forwarded-Host)",
    )
    parser.add_argument("--register-to", help="join this hub (its http(s) URL)")
    parser.add_argument("--token-env", help="environment variable holding the host's token")
    parser.add_argument("--endpoint", help="the URL the hub should give callers")
    parser.add_argument(
        "--attach-token-env",
        metavar="NAME",
        help="environment variable holding the shared token every caller must present "
        "(a daemon's --attach-token)",
    )
    parser.add_argument("--attach-token", action=_TokenOnCommandLine, help=argparse.SUPPRESS)
    parser.add_argument(
        "--store", help="SQLite file of the sessions, kept for the next start (default: none)"
    )
    parser.add_argument(
        "--store-sync",
        choices=SYNCHRONOUS,
        default="normal",
        help="what each write to --store survives: normal, a killed process (the default); "
        "full, a power cut too (a disk sync per write)",
    )
    parser.add_argument(
        "--session-idle-timeout",
        type=float,
        default=DEFAULT_SESSION_IDLE_TIMEOUT,
        help="seconds before an idle session leaves memory for the store (0: never)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE,
        help="seconds running turns get to finish on SIGTERM (at most 5, the default)",
    )
    parser.add_argument(
        "--no-tune-gc",
        dest="tune_gc",
        action="store_false",
        help="leave the garbage collector at its settings (by default it is tuned for "
        "serving: the heap frozen at start, a larger young generation)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        host = build(args)
    except CoreAgentError as exc:  # the token variable unset or unusable (never shown)
        print(f"coreagent_sdk.host: {exc}", file=sys.stderr)
        return 1

    def ready(url: str) -> None:
        assert isinstance(host, AgentHost)
        print(json.dumps({"name": host.name, "url": url}), flush=True)

    def ready_all(urls: dict[str, str]) -> None:
        print(json.dumps({"agents": urls}), flush=True)

    try:
        # On uvloop where installed (the `uvloop` extra): the same code, its loop in C.
        if isinstance(host, MultiAgentHost):
            run(
                host.serve(
                    args.host, args.port, grace=args.grace, on_ready=ready_all, tune_gc=args.tune_gc
                )
            )
        else:
            run(
                host.serve(
                    args.host, args.port, grace=args.grace, on_ready=ready, tune_gc=args.tune_gc
                )
            )
    except (OSError, ValueError, RuntimeError, CoreAgentError) as exc:
        print(f"coreagent_sdk.host: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised as a subprocess
    raise SystemExit(main())
