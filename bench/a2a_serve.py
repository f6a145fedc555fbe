"""An `AgentHost` answering A2A against the A2A SDK's own server running the same behaviour.

Both servers answer one prompt with the same A2A events: the task, working, three
streamed chunks as appended parts of the artifact "answer", the whole answer replacing
them, completed. Both are the SDK's JSON-RPC stack (`DefaultRequestHandler`,
`create_jsonrpc_routes`) under uvicorn; what differs is behind the executor:

- coreagent-a2a: `AgentHost(a2a=True)`, its agent an async function of a `Turn`
  (three `turn.chunk`, one `turn.say`), each message a turn in a fresh session, every
  event written to the host's store before it is sent
- coreagent-a2a-stored: the same host given a named store file (`store=`), so each A2A
  task's every save is committed to it too before it is sent (what survives a `kill -9`;
  a host without `store=` keeps its tasks in memory, its temporary store read by no
  restart)
- a2a-sdk: an `AgentExecutor` writing those events itself, an `InMemoryTaskStore`

Each server runs in its own process pinned to core 0; the caller, the A2A SDK's own
client (``SendStreamingMessage``, or ``SendMessage`` with ``--send``), runs pinned to
core 1 with N calls in flight. Rounds interleave the two servers, so drift on a shared
machine hits both alike; the ratio is coreagent-a2a's throughput over a2a-sdk's, best
and median of the rounds, measured in the same run.

    pip install -e '.[host,a2a]'
    python bench/a2a_serve.py [--levels 1 200] [--rounds 3] [--seconds 10] [--send]

Every loop is bounded by a count and a time; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from wire_speed import (  # the bench's own helpers, beside this file
    _cpu_of,
    _cpu_self,
    _listen,
    _load,
    _serve_app,
    stop_servers,
)

CONTENDERS = ("coreagent-a2a", "coreagent-a2a-stored", "a2a-sdk")
CHUNKS = ("Checking the cluster. ", "All nodes answer. ", "Load is normal. ")
PROMPT = "How is the cluster doing?"
ANSWER = "done: " + PROMPT
DEADLINE = 60.0  # seconds a call may take
MAX_CALLS = 1_000_000  # a bound on any one drive, whatever the time says
SERVER_CORE, CLIENT_CORE = "0", "1"


async def serve_coreagent(stored: bool) -> None:
    import tempfile

    from coreagent_sdk.host import AgentHost, Turn

    async def agent(turn: Turn) -> None:
        for chunk in CHUNKS:
            await turn.chunk(chunk)
        await turn.say("done: " + turn.prompt)

    folder = tempfile.TemporaryDirectory(prefix="a2a-serve-")
    store = os.path.join(folder.name, "sessions.sqlite3") if stored else None
    host = AgentHost("bench", behavior=agent, a2a=True, session_rate_limit=None, store=store)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        host.serve(on_ready=ready.set_result, handle_signals=False, grace=0)
    )
    print(json.dumps(await ready), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    host.stop()
    await serving
    folder.cleanup()


def _sdk_app(url: str) -> Any:
    from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
    from starlette.applications import Starlette

    class Answer(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            assert context.message is not None
            assert context.task_id
            assert context.context_id
            if context.current_task is None:
                await event_queue.enqueue_event(new_task_from_user_message(context.message))
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            await updater.start_work()
            for i, chunk in enumerate(CHUNKS):
                await updater.add_artifact(
                    [new_text_part(chunk)], artifact_id="answer", name="answer", append=i > 0
                )
            await updater.add_artifact(
                [new_text_part("done: " + context.get_user_input())],
                artifact_id="answer",
                name="answer",
                append=False,
                last_chunk=True,
            )
            await updater.complete()

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
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="answer", name="answer", description="answers", tags=["bench"])],
    )
    handler = DefaultRequestHandler(Answer(), InMemoryTaskStore(), card)
    return Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))


async def serve_sdk() -> None:
    sock = _listen()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    await _serve_app(_sdk_app(url), sock, url)


async def drive(url: str, level: int, seconds: float, streaming: bool) -> dict[str, Any]:
    """`level` callers in a loop for `seconds`: how many answers, how fast, at what CPU."""
    import httpx
    from a2a.client import ClientConfig, ClientFactory
    from a2a.helpers.proto_helpers import new_text_message
    from a2a.types import Role, SendMessageRequest, TaskState

    logging.disable(logging.WARNING)  # the SDK's client logs every request at INFO
    limits = httpx.Limits(max_connections=level, max_keepalive_connections=level)
    http = httpx.AsyncClient(timeout=DEADLINE, limits=limits)
    factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
    client = await factory.create_from_url(url)

    async def call() -> None:
        request = SendMessageRequest(message=new_text_message(PROMPT, role=Role.ROLE_USER))
        answer, state, chunks = "", None, 0
        async for event in client.send_message(request):
            if event.HasField("artifact_update"):
                update = event.artifact_update
                chunks += 1
                if update.last_chunk:
                    answer = "".join(p.text for p in update.artifact.parts)
            elif event.HasField("status_update"):
                state = event.status_update.status.state
            elif event.HasField("task"):
                state = event.task.status.state
                for artifact in event.task.artifacts:
                    answer = "".join(p.text for p in artifact.parts)
        if answer != ANSWER or state != TaskState.TASK_STATE_COMPLETED:
            raise AssertionError(f"answered {answer!r} in state {state} after {chunks} updates")

    await asyncio.wait_for(call(), DEADLINE)  # warm: the pool's first connection
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
                kind = f"{type(exc).__name__}: {str(exc)[:100]}"
                failures[kind] = failures.get(kind, 0) + 1
            else:
                latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(level)))
    took = time.perf_counter() - started
    cpu = _cpu_self() - cpu0
    await client.close()
    await http.aclose()
    latencies.sort()
    return {
        "done": len(latencies),
        "rate": len(latencies) / took,
        "p50": latencies[len(latencies) // 2] if latencies else 0.0,
        "p99": latencies[int(len(latencies) * 0.99)] if latencies else 0.0,
        "cpu": cpu,
        "failures": failures,
    }


def _pinned(core: str, *args: str) -> list[str]:
    return ["taskset", "-c", core, sys.executable, __file__, *args]


def compare(args: argparse.Namespace) -> None:
    servers: dict[str, tuple[subprocess.Popen[str], str]] = {}
    for contender in CONTENDERS:
        proc = subprocess.Popen(
            _pinned(SERVER_CORE, "serve", contender),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        servers[contender] = (proc, json.loads(proc.stdout.readline()))
    mode = "SendMessage" if args.send else "SendStreamingMessage"
    rounds = f"{args.rounds} rounds of {args.seconds:g} s"
    print(f"load average at the start: {_load()}; {rounds}, {mode}")
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        for round_ in range(args.rounds):
            for level in args.levels:
                for contender in CONTENDERS:
                    proc, url = servers[contender]
                    before = _cpu_of(proc.pid)
                    drive_args = ["drive", url, str(level), str(args.seconds)]
                    if args.send:
                        drive_args.append("--send")
                    out = subprocess.run(
                        _pinned(CLIENT_CORE, *drive_args),
                        capture_output=True,
                        text=True,
                        timeout=args.seconds + 4 * DEADLINE,
                        check=True,
                    ).stdout
                    got = json.loads(out.strip().splitlines()[-1])
                    got["server_cpu"] = _cpu_of(proc.pid) - before
                    results.setdefault((contender, level), []).append(got)
                    print(
                        f"  round {round_ + 1} {contender:>20} @{level:<4} {got['rate']:7.0f}/s"
                        f"  failed {sum(got['failures'].values())}  load {_load()}",
                        flush=True,
                    )
    finally:
        stop_servers(proc for proc, _ in servers.values())
    print(f"\nload average at the end: {_load()}\n")
    print("| in flight | contender | /s, best / median | a2a-sdk /s, best / median | ratio, best / "
          "median | server CPU ms per answer, it / a2a-sdk (ratio) | p99 ms, it / a2a-sdk | "
          "client's core busy, it / a2a-sdk | failed, it / a2a-sdk |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for level in args.levels:
        theirs = results["a2a-sdk", level]
        for contender in CONTENDERS[:-1]:
            ours = results[contender, level]
            best = [max(r["rate"] for r in rs) for rs in (ours, theirs)]
            median = [statistics.median(r["rate"] for r in rs) for rs in (ours, theirs)]
            cpu = [1000 * sum(r["server_cpu"] for r in rs) / max(1, sum(r["done"] for r in rs))
                   for rs in (ours, theirs)]  # fmt: skip
            p99 = [1000 * statistics.median(r["p99"] for r in rs) for rs in (ours, theirs)]
            # The caller's CPU over its drive's time: near 100% the SDK's client, not the
            # server, sets the pace (its pool grows costly with connections), and the
            # server CPU per answer is then the comparison that tells the servers apart.
            busy = [100 * statistics.median(r["cpu"] / args.seconds for r in rs)
                    for rs in (ours, theirs)]  # fmt: skip
            failed = [sum(sum(r["failures"].values()) for r in rs) for rs in (ours, theirs)]
            ratio = f"{best[0] / best[1]:.2f}x / {median[0] / median[1]:.2f}x"
            print(f"| {level} | {contender} | {best[0]:.0f} / {median[0]:.0f} | {best[1]:.0f} / "
                  f"{median[1]:.0f} | {ratio} | {cpu[0]:.2f} / {cpu[1]:.2f} "
                  f"({cpu[0] / cpu[1]:.2f}x) | {p99[0]:.0f} / {p99[1]:.0f} "
                  f"| {busy[0]:.0f}% / {busy[1]:.0f}% | {failed[0]} / {failed[1]} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="(internal) serve one contender")
    serve.add_argument("contender", choices=CONTENDERS)
    drive_ = sub.add_parser("drive", help="(internal) drive the A2A client")
    drive_.add_argument("url")
    drive_.add_argument("level", type=int)
    drive_.add_argument("seconds", type=float)
    drive_.add_argument("--send", action="store_true")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 200])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--send", action="store_true", help="SendMessage instead of streaming")
    args = parser.parse_args()
    if args.command == "serve":
        if args.contender == "a2a-sdk":
            asyncio.run(serve_sdk())
        else:
            asyncio.run(serve_coreagent(stored=args.contender == "coreagent-a2a-stored"))
    elif args.command == "drive":
        print(json.dumps(asyncio.run(drive(args.url, args.level, args.seconds, not args.send))))
    else:
        compare(args)


if __name__ == "__main__":
    main()
