"""`python -m coreagent_sdk.mcp module:target [--http --port N --token-env VAR]`: serve over MCP.

``module:target`` names what to serve: an agent (an async function of a
`Turn`, such as a `ModelAgent`) or an `AgentHost`, served as one tool; a
`CallPeer`, or a simulated `Fleet`, whose peers are served one tool each; or
a ready `AgentMCPServer` / `FleetMCPServer`. ``--hub URL`` serves the fleet
registered on a hub instead (``--hub-token-env VAR`` holds its token, also
presented to the peers).

By default it serves one client on stdin and stdout, as an MCP host (Claude
Desktop, an IDE) starts a server: nothing else is written to stdout, logs go
to stderr, and the process exits when its stdin closes (its host went away),
or on SIGTERM, cleanly. ``--http`` serves Streamable HTTP at
``http://HOST:PORT/mcp`` instead, prints one JSON line ``{"url": ...}`` once
listening and runs until SIGTERM or SIGINT; ``--token-env VAR`` makes every
request present the bearer token held in the environment variable VAR (never
an argument: a command line shows in `ps`), and without it only a loopback
``--host`` is accepted.

``--print-config`` prints, instead of serving, the JSON an MCP host's config
(Claude Desktop's ``claude_desktop_config.json``, an IDE's ``mcp.json``) takes
to start this very command: this Python, these arguments, and this directory
on its ``PYTHONPATH``, so ``module:target`` imports wherever the host starts it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from .._peer._call_peer import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, CallPeer
from .._peer._directory import HubDirectory
from ..errors import CoreAgentError
from ..host._cli import QuietParser
from ..host._host import AgentHost
from ..host._process import run  # uvloop's loop where installed, as the host's command
from ._serve_agent import AgentMCPServer
from ._serve_fleet import DEFAULT_POLL_INTERVAL, FleetMCPServer
from ._serve_server import ServedTools

_PROG = "coreagent_sdk.mcp"


def _load(target: str) -> Any:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        # What was given is not repeated: a token typed where the target belongs would be.
        raise SystemExit(
            f"{_PROG}: the target is not module:attribute (what was given is not repeated "
            "here: it may be a token); name what to serve, such as my_agents:triage"
        )
    sys.path.insert(0, os.getcwd())  # as `python -m` users expect: their modules are here
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"{_PROG}: cannot import {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SystemExit(f"{_PROG}: module {module_name!r} has no attribute {attr!r}") from None


def build(args: argparse.Namespace) -> ServedTools:
    """The server the command line describes."""
    calls = {"timeout": args.timeout, "max_response_bytes": args.max_response_bytes}
    if args.hub is not None:
        if args.target is not None:
            raise SystemExit(f"{_PROG}: name a target or --hub, not both")
        directory = HubDirectory(args.hub, token_env=args.hub_token_env)
        tool = CallPeer(directory, token_env=args.hub_token_env, **calls)
        return FleetMCPServer(
            tool, name=args.name or "coreagent-fleet", poll_interval=args.poll_interval
        )
    if args.target is None:
        raise SystemExit(f"{_PROG}: name what to serve (module:attribute), or pass --hub URL")
    target = _load(args.target)
    if isinstance(target, ServedTools):
        return target
    if isinstance(target, CallPeer):
        return FleetMCPServer(
            target, name=args.name or "coreagent-fleet", poll_interval=args.poll_interval
        )
    if callable(getattr(target, "call_peer", None)) and hasattr(target, "registry"):
        # A simulated fleet (the SDK never imports the simulator): its own recorded tool,
        # and its in-process transport for the peers' cards.
        return FleetMCPServer(
            target.call_peer(**calls),
            name=args.name or "coreagent-fleet",
            poll_interval=args.poll_interval,
            card_transport=getattr(target, "transport", None),
        )
    if isinstance(target, AgentHost) or callable(target):
        return AgentMCPServer(target, name=args.name, **calls)
    raise SystemExit(
        f"{_PROG}: {args.target!r} is {type(target).__name__}; serve an agent, an AgentHost, "
        "a CallPeer, a simulated Fleet, or an AgentMCPServer / FleetMCPServer"
    )


async def _serve_http(served: ServedTools, args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with served.serve_http(host=args.host, port=args.port, token_env=args.token_env) as url:
        print(json.dumps({"name": served.server.name, "url": url}), flush=True)
        await stop.wait()


def host_config(argv: Sequence[str], server: str) -> dict[str, Any]:
    """The `mcpServers` entry that starts `python -m coreagent_sdk.mcp argv` from here."""
    return {
        "mcpServers": {
            server: {
                "command": sys.executable,
                "args": ["-m", _PROG, *argv],
                # A host starts servers from a directory of its own: the modules named
                # here are found on the path instead (every host passes `env`).
                "env": {"PYTHONPATH": os.getcwd()},
            }
        }
    }


def main(argv: Sequence[str] | None = None) -> int:
    # Quiet: a refused value is never repeated (it may be a token), and no abbreviations
    # (`--hub-token X` must never be read as `--hub-token-env X`).
    parser = QuietParser(prog=f"python -m {_PROG}", description=__doc__.split("\n")[0])
    parser.add_argument("target", nargs="?", help="module:attribute to serve")
    parser.add_argument("--name", help="the tool's name (one agent) or the server's (a fleet)")
    parser.add_argument("--hub", help="serve the fleet registered on this hub URL")
    parser.add_argument("--hub-token-env", help="environment variable holding the hub's token")
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP, not stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: where to listen")
    parser.add_argument("--port", type=int, default=0, help="HTTP: port (0: a free one)")
    parser.add_argument("--token-env", help="HTTP: environment variable holding the bearer token")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds one call may take"
    )
    parser.add_argument(
        "--max-response-bytes",
        type=int,
        default=DEFAULT_MAX_RESPONSE_BYTES,
        help="an answer's cap in UTF-8 bytes",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=DEFAULT_POLL_INTERVAL,
        help="a fleet: seconds between two reads of its roster",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print an MCP host's config entry for this command, and exit",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.token_env is not None and not args.http:
        raise SystemExit(f"{_PROG}: --token-env guards HTTP; stdio has no token (add --http)")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    try:
        served = build(args)
        if args.print_config:
            kept = [a for a in argv if a != "--print-config"]
            print(json.dumps(host_config(kept, served.server.name), indent=2))
            return 0
        if args.http:
            run(_serve_http(served, args))
        else:
            run(served.run_stdio(handle_signals=True))
    except (CoreAgentError, ValueError, TypeError) as exc:
        raise SystemExit(str(exc)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
