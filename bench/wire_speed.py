"""A delegation over the network against the protocols a Python user would pick instead.

Each contender is its own SDK's server and its own SDK's client, the server
in one process pinned to core 0 and the caller in another pinned to core 1
(`taskset`), doing the same work: an agent that answers a prompt with three
short streamed chunks and a final answer, the caller reading all of it.

- coreagent: `CallPeer` -> `AgentHost` (served as `AgentHost.serve()` serves it)
- coreagent-httpx: the same, the caller over httpx's own transport and pool (the SDK's
  network path before `NetworkTransport`), a baseline for the caller's side
- coreagent-before: the same `CallPeer` imported from another checkout (`--before DIR`,
  say `git archive <commit> | tar -x -C DIR`), against the same server: a change to the
  caller measured against the code before it, in the same run
- a2a-stream / a2a-send: the A2A SDK's JSON-RPC server and client, the
  answer streamed (`SendStreamingMessage`) or returned whole (`SendMessage`)
- mcp-kept / mcp-fresh: the MCP SDK's streamable-HTTP server, a tool
  reporting the chunks as progress; one kept session, or a session per call

Rounds are interleaved (every contender at one level, then the next level,
then the next round) so drift on a shared machine hits all alike; each cell
is best and median of the rounds. CPU is each process's own (user + system)
over the timed part, per delegation; RSS is the server's at the end.

    pip install -e '.[host,contenders]'
    python bench/wire_speed.py [--levels 1 10 200] [--rounds 3] [--seconds 10] [--before DIR]

Every loop is bounded by a count and a time; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

CONTENDERS = ("coreagent", "coreagent-httpx", "coreagent-before", "a2a-stream", "a2a-send",
              "mcp-kept", "mcp-fresh")  # fmt: skip
SERVERS = {"coreagent": "coreagent", "coreagent-httpx": "coreagent",
           "coreagent-before": "coreagent", "a2a-stream": "a2a", "a2a-send": "a2a",
           "mcp-kept": "mcp", "mcp-fresh": "mcp"}  # fmt: skip
CHUNKS = ("Checking the cluster. ", "All nodes answer. ", "Load is normal. ")
PROMPT = "How is the cluster doing?"
ANSWER = "done: " + PROMPT
DEADLINE = 60.0  # seconds a call may take
MAX_CALLS = 1_000_000  # a bound on any one drive, whatever the time says
SERVER_CORE, CLIENT_CORE = "0", "1"


def _listen() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    return sock


async def _serve_app(app: Any, sock: socket.socket, url: str, **options: Any) -> None:
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", **options)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(500):  # bounded: 5 s
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    print(json.dumps(url), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until closed
    server.should_exit = True
    await task


# --- servers ------------------------------------------------------------------


async def serve_coreagent() -> None:
    from coreagent_sdk.host import AgentHost, Turn

    async def agent(turn: Turn) -> None:
        for chunk in CHUNKS:
            await turn.chunk(chunk)
        await turn.say("done: " + turn.prompt)

    host = AgentHost("bench", behavior=agent, session_rate_limit=None)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        host.serve(on_ready=ready.set_result, handle_signals=False, grace=0)
    )
    print(json.dumps(await ready), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    host.stop()
    await serving


def _a2a_app(url: str) -> Any:
    from a2a.helpers.proto_helpers import (
        new_task_from_user_message,
        new_text_message,
        new_text_part,
    )
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandlerV2
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
    from starlette.applications import Starlette

    class Answer(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            if context.current_task is None:
                assert context.message is not None
                await event_queue.enqueue_event(new_task_from_user_message(context.message))
            assert context.task_id is not None
            assert context.context_id is not None
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            for i, chunk in enumerate(CHUNKS):
                await updater.add_artifact([new_text_part(chunk)], artifact_id="a", append=i > 0)
            await updater.complete(new_text_message("done: " + context.get_user_input()))

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            return None

    card = AgentCard(
        name="bench",
        description="answers with three chunks",
        version="1",
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="answer", name="answer", description="answers", tags=["bench"])],
    )
    handler = DefaultRequestHandlerV2(Answer(), InMemoryTaskStore(), card)
    return Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))


async def serve_a2a() -> None:
    sock = _listen()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    await _serve_app(_a2a_app(url), sock, url)


async def serve_mcp() -> None:
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("bench")
    # This module's annotations are strings (PEP 563): the SDK resolves them in its globals.
    globals()["Context"] = Context

    @server.tool()
    async def answer(prompt: str, ctx: Context) -> str:
        for i, chunk in enumerate(CHUNKS):
            await ctx.report_progress(i + 1, len(CHUNKS), message=chunk)
        return "done: " + prompt

    sock = _listen()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    await _serve_app(server.streamable_http_app(), sock, url, lifespan="on")


# --- callers ------------------------------------------------------------------

Call = Callable[[], Awaitable[None]]


async def coreagent_caller(
    url: str, level: int, httpx_pool: bool = False
) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import httpx

    from coreagent_sdk import CallPeer, Peer, StaticDirectory

    # Every call in flight runs at once, as the contenders' clients run them.
    cap = max(100, 2 * level + 2)
    # httpx's own pool as the SDK configured it before its own transport: 32 kept idle.
    limits = httpx.Limits(max_connections=cap, max_keepalive_connections=32, keepalive_expiry=4)
    tool = CallPeer(
        StaticDirectory([Peer("bench", url)]),
        timeout=DEADLINE,
        max_connections=cap,
        transport=httpx.AsyncHTTPTransport(limits=limits) if httpx_pool else None,
    )

    async def call() -> None:
        result = await tool.acall(peer="bench", prompt=PROMPT)
        if result.response != ANSWER:
            raise AssertionError(f"coreagent answered {result.response!r}")

    return call, tool.aclose


async def a2a_caller(
    url: str, level: int, streaming: bool
) -> tuple[Call, Callable[[], Awaitable[None]]]:
    from a2a.client import ClientConfig, ClientFactory
    from a2a.helpers.proto_helpers import get_message_text, new_text_message
    from a2a.types import Role, SendMessageRequest

    client = await ClientFactory(ClientConfig(streaming=streaming)).create_from_url(url)

    async def call() -> None:
        request = SendMessageRequest(message=new_text_message(PROMPT, role=Role.ROLE_USER))
        final = ""
        chunks = 0
        async for event in client.send_message(request):
            if event.HasField("artifact_update"):
                chunks += 1
            task = event.task if event.HasField("task") else None
            status = event.status_update.status if event.HasField("status_update") else None
            if task is not None:
                status = task.status
                chunks += sum(len(a.parts) for a in task.artifacts)
            if status is not None and status.HasField("message"):
                final = get_message_text(status.message)
        if final != ANSWER or chunks < len(CHUNKS):
            raise AssertionError(f"a2a answered {final!r} after {chunks} chunks")

    return call, client.close


async def mcp_caller(url: str, kept: bool) -> tuple[Call, Callable[[], Awaitable[None]]]:
    from mcp import Client

    async def one(client: Any) -> None:
        seen: list[str] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            seen.append(message or "")

        result = await client.call_tool("answer", {"prompt": PROMPT}, progress_callback=progress)
        text = result.content[0].text if result.content else ""
        if text != ANSWER or len(seen) != len(CHUNKS):
            raise AssertionError(f"mcp answered {text!r} after {len(seen)} chunks")

    if not kept:

        async def fresh() -> None:
            async with Client(url, read_timeout_seconds=DEADLINE) as client:
                await one(client)

        async def nothing() -> None:
            return None

        return fresh, nothing
    session = Client(url, read_timeout_seconds=DEADLINE)
    await session.__aenter__()

    async def kept_call() -> None:
        await one(session)

    async def close() -> None:
        await session.__aexit__(None, None, None)

    return kept_call, close


async def drive(contender: str, url: str, level: int, seconds: float) -> dict[str, Any]:
    """`level` callers in a loop for `seconds`; what they did and what it cost this process."""
    logging.disable(logging.WARNING)  # the contenders' clients log every request at INFO
    if contender.startswith("coreagent"):
        call, close = await coreagent_caller(url, level, contender == "coreagent-httpx")
    elif contender.startswith("a2a"):
        call, close = await a2a_caller(url, level, contender == "a2a-stream")
    else:
        call, close = await mcp_caller(url, contender == "mcp-kept")
    return await measure(call, close, level, seconds)


async def measure(
    call: Call, close: Callable[[], Awaitable[None]], level: int, seconds: float
) -> dict[str, Any]:
    """`level` loops of `call` for `seconds` (and at most MAX_CALLS), then `close`; the counts."""
    await asyncio.wait_for(call(), DEADLINE)  # warm: a session, the pool's first connection
    latencies: list[float] = []
    failures: dict[str, int] = {}
    counter = iter(range(MAX_CALLS))
    cpu0 = _cpu_self()
    started = time.perf_counter()
    stop_at = started + seconds

    async def worker() -> None:
        for _ in counter:
            if time.perf_counter() >= stop_at:
                return
            t0 = time.perf_counter()
            try:
                await asyncio.wait_for(call(), DEADLINE)
            except Exception as exc:
                count_failure(failures, exc)
            else:
                latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(level)))
    took = time.perf_counter() - started
    cpu = _cpu_self() - cpu0
    await close()
    return drive_summary(latencies, took, cpu, failures)


def count_failure(failures: dict[str, int], exc: BaseException) -> None:
    """Count `exc` among a drive's failures, by its type and the start of its message."""
    kind = f"{type(exc).__name__}: {str(exc)[:100]}"
    failures[kind] = failures.get(kind, 0) + 1


def drive_summary(
    latencies: list[float], took: float, cpu: float, failures: dict[str, int], **more: float
) -> dict[str, Any]:
    """What a drive reports: answers, their rate over `took`, p50 and p99, the caller's CPU."""
    latencies.sort()
    return {
        "done": len(latencies),
        "rate": len(latencies) / took,
        "p50": latencies[len(latencies) // 2] if latencies else 0.0,
        "p99": latencies[int(len(latencies) * 0.99)] if latencies else 0.0,
        "cpu": cpu,
        "failures": failures,
        **more,
    }


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# --- the comparison -----------------------------------------------------------


def _pinned(core: str, *args: str) -> list[str]:
    return ["taskset", "-c", core, sys.executable, __file__, *args]


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def compare(args: argparse.Namespace) -> None:
    contenders = [c for c in CONTENDERS if c in args.only] if args.only else list(CONTENDERS)
    if args.before is None:
        contenders = [c for c in contenders if c != "coreagent-before"]
    elif "coreagent-before" not in contenders:
        contenders.insert(contenders.index("coreagent") + 1 if "coreagent" in contenders else 0,
                          "coreagent-before")  # fmt: skip
    servers: dict[str, tuple[subprocess.Popen[str], str, float]] = {}
    for kind in dict.fromkeys(SERVERS[c] for c in contenders):
        proc = subprocess.Popen(
            _pinned(SERVER_CORE, "serve", kind),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())
        servers[kind] = (proc, url, _rss_mib(proc.pid))
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    print(f"load average at the start: {_load()}; {args.rounds} rounds of {args.seconds:g} s")
    try:
        for round_ in range(args.rounds):
            for level in args.levels:
                for contender in contenders:
                    proc, url, _ = servers[SERVERS[contender]]
                    before = _cpu_of(proc.pid)
                    env = dict(os.environ)
                    if contender == "coreagent-before":  # that checkout's SDK, not this one's
                        env["PYTHONPATH"] = os.path.abspath(args.before)
                    out = subprocess.run(
                        _pinned(
                            CLIENT_CORE, "drive", contender, url, str(level), str(args.seconds)
                        ),
                        capture_output=True,
                        text=True,
                        timeout=args.seconds + 4 * DEADLINE,
                        check=True,
                        env=env,
                    ).stdout
                    got = json.loads(out.strip().splitlines()[-1])
                    got["server_cpu"] = _cpu_of(proc.pid) - before
                    results.setdefault((contender, level), []).append(got)
                    print(
                        f"  round {round_ + 1} {contender:>10} @{level:<4} {got['rate']:7.0f}/s"
                        f"  failed {sum(got['failures'].values())}  load {_load()}",
                        flush=True,
                    )
        rss = {kind: (start, _rss_mib(proc.pid)) for kind, (proc, _, start) in servers.items()}
    finally:
        stop_servers(proc for proc, _, _ in servers.values())
    print(f"\nload average at the end: {_load()}")
    _table(contenders, args.levels, results, rss)


def stop_servers(procs: Iterable[subprocess.Popen[str]]) -> None:
    """Close each server's stdin (its signal to stop), wait for it, kill it if it hangs."""
    for proc in procs:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _table(
    contenders: list[str],
    levels: list[int],
    results: dict[tuple[str, int], list[dict[str, Any]]],
    rss: dict[str, tuple[float, float]],
) -> None:
    head = " | ".join(f"{level} in flight: best / median" for level in levels)
    print(f"\n| contender | {head} | p99 ms at {levels[-1]} | CPU ms per delegation, server / "
          f"client (at {levels[-1]}) | server RSS MiB, start -> end | failed |")  # fmt: skip
    print("|---|" + "---:|" * (len(levels) + 4))
    for contender in contenders:
        cells = []
        for level in levels:
            rates = [r["rate"] for r in results[contender, level]]
            cells.append(f"{max(rates):.0f} / {statistics.median(rates):.0f}")
        last = results[contender, levels[-1]]
        best = max(last, key=lambda r: r["rate"])
        done = sum(r["done"] for r in last) or 1
        server_ms = 1000 * sum(r["server_cpu"] for r in last) / done
        client_ms = 1000 * sum(r["cpu"] for r in last) / done
        failed = sum(
            sum(r["failures"].values()) for level in levels for r in results[contender, level]
        )
        start, end = rss[SERVERS[contender]]
        print(
            f"| {contender} | " + " | ".join(cells) + f" | {best['p99'] * 1000:.0f} | "
            f"{server_ms:.2f} / {client_ms:.2f} | {start:.0f} -> {end:.0f} | {failed} |"
        )
    for (contender, level), rows in results.items():
        for r in rows:
            for kind, n in r["failures"].items():
                print(f"  {contender} @{level} failed {n}: {kind}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="(internal) serve one contender's server")
    serve.add_argument("kind", choices=sorted(set(SERVERS.values())))
    drive_ = sub.add_parser("drive", help="(internal) drive one contender's client")
    drive_.add_argument("contender", choices=CONTENDERS)
    drive_.add_argument("url")
    drive_.add_argument("level", type=int)
    drive_.add_argument("seconds", type=float)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 10, 200])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--only", nargs="+", choices=CONTENDERS)
    parser.add_argument(
        "--before", metavar="DIR", help="a checkout whose CallPeer runs as coreagent-before"
    )
    args = parser.parse_args()
    if args.command == "serve":
        serve_fn = {"coreagent": serve_coreagent, "a2a": serve_a2a, "mcp": serve_mcp}[args.kind]
        asyncio.run(serve_fn())
    elif args.command == "drive":
        got = asyncio.run(drive(args.contender, args.url, args.level, args.seconds))
        print(json.dumps(got))
    else:
        compare(args)


if __name__ == "__main__":
    main()
