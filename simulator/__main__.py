"""`python -m simulator demo` (a short tour of a fleet) and `python -m simulator serve`."""

from __future__ import annotations

import asyncio
import gc
import json
import shutil
import signal
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from typing import Any

from coreagent_sdk import AgentConfig, RuntimeCache
from coreagent_sdk.errors import CallPeerError, CoreAgentError
from coreagent_sdk.host import (
    DEFAULT_SESSION_IDLE_TIMEOUT,
    DEFAULT_TTL,
    MAX_TTL,
    QuietParser,
    SessionRateLimit,
    read_token,
    shown_url,
)

from . import behaviors
from ._fleet import Fleet, PortInUseError
from ._join import JoinError
from ._runtime import SimulatedBuilder, SimulatedConfigLoader

Row = tuple[str, str, str, float]
# The daemon's session rate limit: a burst of 5, then 10 a minute per caller.
DEFAULT_BURST = SessionRateLimit().burst
DEFAULT_PER_MINUTE = SessionRateLimit().per_minute


async def _timed(scenario: str, run: Callable[[], Awaitable[tuple[str, str]]]) -> Row:
    started = time.perf_counter()
    try:
        outcome, detail = await run()
    except CallPeerError as exc:
        outcome, detail = type(exc).__name__, str(exc)
    return scenario, outcome, detail, (time.perf_counter() - started) * 1000


def _print_table(rows: list[Row], columns: int | None = None) -> None:
    """The demo's table in the terminal's width: the detail column last, wrapped to fit.

    ``columns`` defaults to the terminal's width (``$COLUMNS``, else 100 when
    the output is not a terminal); every line fits it, down to 60 columns.
    """
    if columns is None:
        columns = shutil.get_terminal_size(fallback=(100, 24)).columns
    headers = ("scenario", "outcome", "ms", "detail")
    cells = [(s, o, f"{ms:.1f}", " ".join(d.split())) for s, o, d, ms in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers[:3])]
    lead = sum(widths) + 2 * len(widths)  # the three columns and their gaps
    room = max(max(columns, 60) - lead, 20)

    def line(values: tuple[str, str, str], detail: str) -> str:
        left = "  ".join(
            v.rjust(w) if i == 2 else v.ljust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        )
        return f"{left}  {detail}".rstrip()

    print(line(headers[:3], "detail"))
    print(line(tuple("-" * w for w in widths), "-" * min(room, max(len(c[3]) for c in cells))))
    for *values, detail in cells:
        wrapped = textwrap.wrap(detail, room, break_long_words=True) or [""]
        print(line((values[0], values[1], values[2]), wrapped[0]))
        for more in wrapped[1:]:
            print(line(("", "", ""), more))


async def demo() -> list[Row]:
    """A tour of the SDK against a simulated fleet; returns the summary rows."""
    fleet = Fleet()
    fleet.add_peer(
        "prod-1",
        behaviors.narrate(
            ["listing nodes in prod-1", "reading recent events"],
            "3 nodes ready; no alerts in the last hour.",
        ),
        labels={"cluster": "prod-1"},
    )
    fleet.add_peer("prod-2", behaviors.echo(), labels={"cluster": "prod-2"})
    fleet.add_peer("writer", behaviors.stream(40_000, 4_000))
    fleet.add_peer("flaky", behaviors.fail("rate_limited", "quota exhausted", retryable=True))
    fleet.add_peer("slowpoke", behaviors.slow(5.0))
    tool = fleet.call_peer(timeout=5.0, max_response_bytes=1024)
    rows: list[Row] = []

    async def delegation() -> tuple[str, str]:
        r = await tool.acall(peer="prod-1", prompt="How is the cluster doing?")
        return "answered", f"{r.response!r} (session {r.session_id})"

    async def unknown() -> tuple[str, str]:
        await tool.acall(peer="prod-9", prompt="hello?")
        return "answered", "unexpected"

    async def discovery() -> tuple[str, str]:
        await tool.acall(peer="", prompt="who is there?")
        return "answered", "unexpected"

    async def truncation() -> tuple[str, str]:
        r = await tool.acall(peer="writer", prompt="write me an essay")
        return "truncated" if r.truncated else "answered", (
            f"{len(r.response.encode())} of 40000 bytes kept; rest in session {r.session_id}"
        )

    async def turn_error() -> tuple[str, str]:
        await tool.acall(peer="flaky", prompt="work")
        return "answered", "unexpected"

    async def deadline() -> tuple[str, str]:
        quick = fleet.call_peer(timeout=0.2)
        await quick.acall(peer="slowpoke", prompt="take your time")
        return "answered", "unexpected"

    async def lease_expiry() -> tuple[str, str]:
        before = await tool.acall(peer="prod-2", prompt="ping")
        fleet.expire("prod-2")
        try:
            await tool.acall(peer="prod-2", prompt="ping")
        except CallPeerError as exc:
            return "gone", f"answered {before.response!r}, then after expiry: {exc}"
        return "answered", "unexpected"

    async def eviction() -> tuple[str, str]:
        loader = SimulatedConfigLoader(
            AgentConfig(id=a, slug=f"agent-{a}", persona=f"I am {a}") for a in "abc"
        )
        builder = SimulatedBuilder(latency=0.01)
        cache = RuntimeCache(loader, builder, max_instances=2)
        for agent in ("a", "b", "a", "c"):
            await cache.processor(agent)
        await asyncio.sleep(0)
        s = cache.stats
        closed = [r.cfg.id for r in builder.built if r.closed]
        await cache.aclose()
        return "evicted", (
            f"resident {cache.resident() or '[]'} after aclose; before: builds={s.builds} "
            f"hits={s.hits} evictions={s.evictions}, closed {closed}"
        )

    async def loopback() -> tuple[str, str]:
        async with await fleet.serve() as served:
            over = served.call_peer(timeout=5.0)
            try:
                r = await over.acall(peer="prod-1", prompt="Same question, over sockets.")
            finally:
                await over.aclose()
            return "answered", f"via {served.urls['prod-1']}: {r.response[:40]!r}..."

    for name, run in [
        ("delegation", delegation),
        ("unknown peer", unknown),
        ("discovery", discovery),
        ("truncation", truncation),
        ("turn error", turn_error),
        ("deadline", deadline),
        ("lease expiry", lease_expiry),
        ("runtime eviction", eviction),
        ("loopback sockets", loopback),
    ]:
        rows.append(await _timed(name, run))
    await tool.aclose()
    await fleet.aclose()
    return rows


async def serve(
    peers: int,
    port: int,
    host: str,
    ttl: float = DEFAULT_TTL,
    join: str | None = None,
    prefix: str = "peer-",
    session_rate_limit: SessionRateLimit | None = None,
    session_idle_timeout: float | None = None,
    token_env: str | None = None,
) -> int:
    """A fleet on loopback until SIGINT or SIGTERM; 2 (one line on stderr) if it cannot serve.

    Its peers heartbeat at a third of `ttl`, so they stay listed for as long as it runs;
    with `join`, they register on that existing hub instead of one of our own.
    ``session_rate_limit`` (a `SessionRateLimit`, None: off) and
    ``session_idle_timeout`` (seconds, None: the daemon's 24 h) make the peers
    behave as a production daemon's do. With `token_env`, the token in that
    variable is what the peers require from callers and present to the hub, as a
    daemon's `--attach-token` (`cmd/core-agent/main.go`); the peers take it as the
    per-caller token of one user, `operator`, so a wrong one gets a per-caller daemon's
    401 (docs/differences.md). A stop signal stops it
    at any time, also while it is still joining a stalled hub.
    """
    options: dict[str, Any] = {"session_rate_limit": session_rate_limit}
    if session_idle_timeout is not None:
        options["session_idle_timeout"] = session_idle_timeout
    try:
        token = read_token(token_env, None, "simulator") if token_env else None
        fleet = Fleet(hub=join, tokens={token: "operator"} if token else None, **options)
    except (ValueError, CoreAgentError) as exc:  # a bad hub URL, an unset token variable
        print(str(exc), file=sys.stderr)
        return 2
    for i in range(1, peers + 1):
        fleet.add_peer(
            f"{prefix}{i}", behaviors.echo(), labels={"index": str(i)}, ttl=ttl, token=token
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # A blocked signal mask is inherited from whoever started us (seen under a test
    # runner): unblock the two that stop us, or SIGTERM would wait forever.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # Served as a task, so that a stop signal need not wait for a stalled hub to answer:
    # it cancels the join, and the fleet deregisters what the hub had registered.
    serving = loop.create_task(fleet.serve(host=host, port=port))
    stopping = loop.create_task(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not serving.done():
        serving.cancel()
        await asyncio.wait({serving})
        await fleet.aclose()
        print("simulator: stopped while starting", file=sys.stderr, flush=True)
        return 0
    stopping.cancel()
    try:
        served = serving.result()
    except PortInUseError as exc:
        await fleet.aclose()
        print(
            f"simulator: port {exc.port} is already in use (another fleet or program holds "
            "it); stop that, pick another --port, or pass --port 0 for free ports",
            file=sys.stderr,
        )
        return 2
    except (ValueError, JoinError) as exc:  # a bad host, or the joined hub refused us
        await fleet.aclose()
        print(str(exc).replace("serve()", "serve"), file=sys.stderr)
        return 2
    hub = shown_url(served.hub_url)  # a password in --join URL is never printed
    print(json.dumps({"ready": True, "hub": hub, "urls": served.urls}), flush=True)
    where = "joined the hub" if join else "hub"
    print(
        f"simulator: {where} at {hub} with {peers} peer(s); Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await fleet.aclose()
        print("simulator: stopped", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    # Quiet: a refused value is never repeated (`--port $TOKEN`, `--token-envVALUE`: it may
    # be a token), and no abbreviations (`--token VALUE` is never `--token-env VALUE`).
    parser = QuietParser(prog="python -m simulator", description="A simulated core-agent fleet.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run a short tour of a simulated fleet and print a summary")
    serve_cmd = commands.add_parser("serve", help="serve a fleet on 127.0.0.1 until interrupted")
    serve_cmd.add_argument("--peers", type=int, default=2, help="number of echo peers (default 2)")
    serve_cmd.add_argument(
        "--port",
        type=int,
        default=0,
        help="hub port; peers take the next ones (default: any free ports)",
    )
    serve_cmd.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    serve_cmd.add_argument(
        "--ttl",
        type=float,
        default=DEFAULT_TTL,
        help=f"each peer's lease in seconds (default {DEFAULT_TTL:g}; the hub clamps it to "
        f"{MAX_TTL:g}); peers heartbeat at a third of it, so they stay listed while it runs",
    )
    serve_cmd.add_argument(
        "--join",
        metavar="URL",
        help="register the peers on this existing hub (leases and heartbeats over HTTP) "
        "instead of serving a hub of our own",
    )
    serve_cmd.add_argument(
        "--prefix", default="peer-", help="peer names are PREFIX1, PREFIX2, ... (default peer-)"
    )
    limits = serve_cmd.add_argument_group(
        "production behaviour",
        "a real daemon limits how fast each caller opens sessions and evicts idle ones; "
        "a load test against a fleet without them passes where the real fleet refuses",
    )
    limits.add_argument(
        "--session-rate-limit",
        action="store_true",
        help="limit POST /sessions per caller identity as a daemon does: a burst of "
        f"{DEFAULT_BURST}, then {DEFAULT_PER_MINUTE} a minute (429 with Retry-After past it); "
        "every anonymous caller shares one bucket",
    )
    limits.add_argument(
        "--rate-limit-burst",
        type=int,
        metavar="N",
        help=f"sessions a caller may open at once (default {DEFAULT_BURST}; implies "
        "--session-rate-limit)",
    )
    limits.add_argument(
        "--rate-limit-per-minute",
        type=float,
        metavar="R",
        help=f"sessions a minute after the burst (default {DEFAULT_PER_MINUTE}; implies "
        "--session-rate-limit)",
    )
    limits.add_argument(
        "--session-idle-timeout",
        type=float,
        metavar="SECONDS",
        help=f"evict sessions idle this long (default {DEFAULT_SESSION_IDLE_TIMEOUT:g}, the "
        "daemon's 24 h; 0 never evicts)",
    )
    serve_cmd.add_argument(
        "--token-env",
        metavar="VAR",
        help="the environment variable holding the peers' bearer token: callers must present "
        "it, and the peers register on the --join hub with it (as a daemon's --attach-token)",
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        started = time.perf_counter()
        rows = asyncio.run(demo())
        _print_table(rows)
        print(f"\n{len(rows)} scenarios in {time.perf_counter() - started:.2f} s")
        return 0
    if args.peers < 0:
        parser.error("--peers must be >= 0")
    if not args.ttl > 0 or args.ttl == float("inf"):
        parser.error(f"--ttl must be a positive number of seconds, got {args.ttl:g}")
    rate_limit = None
    if (
        args.session_rate_limit
        or args.rate_limit_burst is not None
        or (args.rate_limit_per_minute is not None)
    ):
        burst = DEFAULT_BURST if args.rate_limit_burst is None else args.rate_limit_burst
        per_minute = (
            DEFAULT_PER_MINUTE if args.rate_limit_per_minute is None else args.rate_limit_per_minute
        )
        if burst < 1:
            parser.error(f"--rate-limit-burst must be >= 1, got {burst}")
        if not 0 < per_minute < float("inf"):
            parser.error(f"--rate-limit-per-minute must be a positive number, got {per_minute:g}")
        rate_limit = SessionRateLimit(per_minute=per_minute, burst=burst)
    idle = args.session_idle_timeout
    if idle is not None and not 0 <= idle < float("inf"):
        parser.error(f"--session-idle-timeout must be seconds >= 0 (0 never evicts), got {idle:g}")
    code = asyncio.run(
        serve(
            args.peers,
            args.port,
            args.host,
            args.ttl,
            args.join,
            args.prefix,
            session_rate_limit=rate_limit,
            session_idle_timeout=idle,
            token_env=args.token_env,
        )
    )
    # Everything is closed and deregistered by now. What is left is the interpreter's final
    # collection of every server and daemon object: about a second for 300 peers on a busy
    # machine, which a supervisor's stop timeout counts. Frozen objects are not collected.
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(main())
