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
- with ``--contenders``, two more for like against like on the garbage collector, which
  `AgentHost.serve()` tunes while it serves: coreagent-a2a-untuned (``tune_gc=False``,
  CPython's defaults) and a2a-sdk-tuned (the SDK's server under the host's tuning)

Each server runs in its own process pinned to core 0; the caller runs pinned to core 1
with N calls in flight. Two callers (``--callers``):

- light: the bench's own, one kept HTTP/1.1 connection per call in flight, every event
  decoded and the answer checked, each caller getting ``--answers / N`` answers (a count,
  not a time: at 200 in flight answers come in waves of 200). It costs about a tenth of
  what a server does per answer, so the server's core is the one that is full: this is
  the servers' throughput.
- sdk: the A2A SDK's own client (``SendStreamingMessage``, or ``SendMessage`` with
  ``--send``) for ``--seconds``. At 200 in flight it costs about 16 ms of its core per
  answer (its connection pool's bookkeeping grows with the connections it holds), more
  than either server, so its own core sets the pace: what a caller using that client sees.

Rounds interleave the servers (their order rotated each round), so drift on a shared
machine hits all alike; the ratio is each contender's throughput over a2a-sdk's, best and
median of the rounds, measured in the same run, beside the server CPU per answer.

    pip install -e '.[host,a2a]'
    python bench/a2a_serve.py [--levels 1 200] [--rounds 3] [--callers light sdk] \\
        [--answers 1000] [--seconds 10] [--send] [--contenders ...]

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
    count_failure,
    drive_summary,
    stop_servers,
)

CONTENDERS = ("coreagent-a2a", "coreagent-a2a-stored", "a2a-sdk")
# Optional rows, each a contender with the other's collector: the host with its collector
# left at CPython's defaults (`serve(tune_gc=False)`), and the SDK's server under the
# collector a host tunes for serving. Like against like, with and without the tuning.
COLLECTOR_ROWS = ("coreagent-a2a-untuned", "a2a-sdk-tuned")
BASELINE = "a2a-sdk"
CHUNKS = ("Checking the cluster. ", "All nodes answer. ", "Load is normal. ")
PROMPT = "How is the cluster doing?"
ANSWER = "done: " + PROMPT
DEADLINE = 60.0  # seconds a call may take
MAX_CALLS = 1_000_000  # a bound on any one drive, whatever the time says
SERVER_CORE, CLIENT_CORE = "0", "1"


async def serve_coreagent(stored: bool, tune_gc: bool = True) -> None:
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
        host.serve(on_ready=ready.set_result, handle_signals=False, grace=0, tune_gc=tune_gc)
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


async def serve_sdk(tune_gc: bool = False) -> None:
    from coreagent_sdk.host._collector import serving_collector

    sock = _listen()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    app = _sdk_app(url)
    with serving_collector(tune_gc, in_kernel=False):  # as `AgentHost.serve()` tunes it
        await _serve_app(app, sock, url)


async def drive_light(url: str, level: int, per_caller: int, server_pid: int) -> dict[str, Any]:
    """`level` light callers, `per_caller` answers each: the servers' throughput, not a client's.

    The A2A SDK's client costs about 16 ms of its core per answer at 200 in flight (its
    connection pool's bookkeeping grows with the connections it holds), so with it the
    caller's core, not the server's, sets the pace and the servers are barely told apart.
    This caller does what a client of ``SendStreamingMessage`` must and little more: one
    kept HTTP/1.1 connection per caller, a JSON-RPC request with a fresh message id, the
    chunked SSE read whole (bounded), every event decoded, and the answer checked: the
    final artifact chunk holds it and the last event says the task completed. After one
    warm-up answer each, every caller gets exactly `per_caller` answers: at 200 in flight
    the callers move in waves (a server answers a wave of 200 together), so a window of
    fixed time would count whole waves or none. The rate is the answers over the time the
    last one took to come; the server's CPU (``/proc``) is read over that time.
    """
    import uuid

    parsed = url.split("//", 1)[1].split("/", 1)
    address, _, port_text = parsed[0].rpartition(":")
    port, path = int(port_text), "/" + (parsed[1] if len(parsed) > 1 else "")
    if address != "127.0.0.1":
        raise SystemExit(f"a2a_serve: the caller dials 127.0.0.1 only, not {address!r}")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Accept: text/event-stream\r\nA2A-Version: 1.0\r\nContent-Length: "
    ).encode()
    failures: dict[str, int] = {}
    latencies: list[float] = []

    async def call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                                   "parts": [{"text": PROMPT}]}},
        }).encode()  # fmt: skip
        writer.write(b"%s%d\r\n\r\n%s" % (head, len(body), body))
        status = await reader.readuntil(b"\r\n\r\n")
        if not status.startswith(b"HTTP/1.1 200") or b"chunked" not in status.lower():
            raise AssertionError(f"answered {status[:200]!r}")
        data, total = [], 0
        for _ in range(10_000):  # bounded: a stream of at most 10,000 chunks and 1 MiB
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            total += size
            if total > 1 << 20:
                raise AssertionError("answered more than 1 MiB")
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            data.append(chunk[:-2])
        events = [json.loads(line[6:]) for line in b"".join(data).split(b"\n")
                  if line.startswith(b"data: ")]  # fmt: skip
        results = [event["result"] for event in events]
        last = [
            r["artifactUpdate"] for r in results if r.get("artifactUpdate", {}).get("lastChunk")
        ]
        answer = "".join(p["text"] for p in last[-1]["artifact"]["parts"]) if last else None
        state = (
            results[-1].get("statusUpdate", {}).get("status", {}).get("state") if results else None
        )
        if answer != ANSWER or state != "TASK_STATE_COMPLETED":
            raise AssertionError(
                f"answered {answer!r} in state {state} after {len(results)} events"
            )

    async def calls(connection: list[Any], count: int, timed: bool) -> None:
        for _ in range(count):
            started = time.perf_counter()
            try:
                await asyncio.wait_for(call(*connection), DEADLINE)
            except Exception as exc:
                count_failure(failures, exc)
                connection[1].close()
                connection[:] = await asyncio.open_connection("127.0.0.1", port)
            else:
                if timed:
                    latencies.append(time.perf_counter() - started)

    connections = [list(await asyncio.open_connection("127.0.0.1", port)) for _ in range(level)]
    try:
        await asyncio.gather(*(calls(c, 1, False) for c in connections))  # warm: one call each
        failures.clear()
        cpu, server_cpu, started = _cpu_self(), _cpu_of(server_pid), time.perf_counter()
        await asyncio.gather(*(calls(c, per_caller, True) for c in connections))
        took = time.perf_counter() - started
        cpu, server_cpu = _cpu_self() - cpu, _cpu_of(server_pid) - server_cpu
    finally:
        for connection in connections:
            connection[1].close()
    return drive_summary(latencies, took, cpu, failures, server_cpu=server_cpu)


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
                count_failure(failures, exc)
            else:
                latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(level)))
    took = time.perf_counter() - started
    cpu = _cpu_self() - cpu0
    await client.close()
    await http.aclose()
    return drive_summary(latencies, took, cpu, failures)


def _pinned(core: str, *args: str) -> list[str]:
    return ["taskset", "-c", core, sys.executable, __file__, *args]


def _drive(args: argparse.Namespace, caller: str, url: str, level: int, pid: int) -> Any:
    if caller == "light":
        per_caller = max(1, args.answers // level)
        drive_args = ["drive-light", url, str(level), str(per_caller), str(pid)]
        budget = 4 * DEADLINE * per_caller
    else:
        drive_args = ["drive", url, str(level), str(args.seconds)]
        if args.send:
            drive_args.append("--send")
        budget = args.seconds + 4 * DEADLINE
    before = _cpu_of(pid)
    out = subprocess.run(
        _pinned(CLIENT_CORE, *drive_args),
        capture_output=True,
        text=True,
        timeout=budget,
        check=True,
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    if caller != "light":  # the light caller reads the server's CPU over its timed part
        got["server_cpu"] = _cpu_of(pid) - before
    got["busy"] = got["cpu"] / (got["done"] / got["rate"]) if got["done"] else 0.0
    return got


def compare(args: argparse.Namespace) -> None:
    contenders = args.contenders
    if BASELINE not in contenders:
        raise SystemExit(f"a2a_serve: --contenders must include {BASELINE!r}, the baseline")
    servers: dict[str, tuple[subprocess.Popen[str], str]] = {}
    for contender in contenders:
        proc = subprocess.Popen(
            _pinned(SERVER_CORE, "serve", contender),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        servers[contender] = (proc, json.loads(proc.stdout.readline()))
    mode = "SendMessage" if args.send else "SendStreamingMessage"
    print(f"load average at the start: {_load()}; {args.rounds} rounds; callers "
          f"{', '.join(args.callers)} (light: {args.answers} answers a drive; sdk: "
          f"{args.seconds:g} s, {mode})")  # fmt: skip
    results: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    try:
        for round_ in range(args.rounds):
            for caller in args.callers:
                for level in args.levels:
                    # Rotated every round: no contender always runs right after another.
                    shift = round_ % len(contenders)
                    for contender in contenders[shift:] + contenders[:shift]:
                        proc, url = servers[contender]
                        got = _drive(args, caller, url, level, proc.pid)
                        results.setdefault((caller, contender, level), []).append(got)
                        per_answer = 1000 * got["server_cpu"] / max(1, got["done"])
                        print(
                            f"  round {round_ + 1} {caller:>5} {contender:>20} @{level:<4} "
                            f"{got['rate']:7.0f}/s  server {per_answer:.2f} ms"
                            f"  failed {sum(got['failures'].values())}  load {_load()}"
                            + (f"  {got['failures']}" if got["failures"] else ""),
                            flush=True,
                        )  # fmt: skip
    finally:
        stop_servers(proc for proc, _ in servers.values())
    print(f"\nload average at the end: {_load()}\n")
    print("| caller | in flight | contender | /s, best / median | a2a-sdk /s, best / median | "
          "ratio, best / median | server CPU ms per answer, it / a2a-sdk (ratio) | p99 ms, it / "
          "a2a-sdk | caller's core busy, it / a2a-sdk | failed, it / a2a-sdk |")  # fmt: skip
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for caller in args.callers:
        for level in args.levels:
            theirs = results[caller, BASELINE, level]
            for contender in [c for c in contenders if c != BASELINE]:
                ours = results[caller, contender, level]
                best = [max(r["rate"] for r in rs) for rs in (ours, theirs)]
                median = [statistics.median(r["rate"] for r in rs) for rs in (ours, theirs)]
                cpu = [1000 * sum(r["server_cpu"] for r in rs) / max(1, sum(r["done"] for r in rs))
                       for rs in (ours, theirs)]  # fmt: skip
                p99 = [1000 * statistics.median(r["p99"] for r in rs) for rs in (ours, theirs)]
                # The caller's CPU over its drive's time: near 100% (the SDK's client at 200
                # in flight) the caller, not the server, sets the pace; the light caller
                # leaves the server's core the one that is full.
                busy = [100 * statistics.median(r["busy"] for r in rs) for rs in (ours, theirs)]
                failed = [sum(sum(r["failures"].values()) for r in rs) for rs in (ours, theirs)]
                ratio = f"{best[0] / best[1]:.2f}x / {median[0] / median[1]:.2f}x"
                print(f"| {caller} | {level} | {contender} | {best[0]:.0f} / {median[0]:.0f} | "
                      f"{best[1]:.0f} / {median[1]:.0f} | {ratio} | {cpu[0]:.2f} / {cpu[1]:.2f} "
                      f"({cpu[0] / cpu[1]:.2f}x) | {p99[0]:.0f} / {p99[1]:.0f} "
                      f"| {busy[0]:.0f}% / {busy[1]:.0f}% | {failed[0]} / {failed[1]} |"
                      )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="(internal) serve one contender")
    serve.add_argument("contender", choices=CONTENDERS + COLLECTOR_ROWS)
    drive_ = sub.add_parser("drive", help="(internal) drive the A2A client")
    drive_.add_argument("url")
    drive_.add_argument("level", type=int)
    drive_.add_argument("seconds", type=float)
    drive_.add_argument("--send", action="store_true")
    light = sub.add_parser("drive-light", help="(internal) drive the light caller")
    light.add_argument("url")
    light.add_argument("level", type=int)
    light.add_argument("per_caller", type=int)
    light.add_argument("server_pid", type=int)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 200])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--send", action="store_true", help="SendMessage instead of streaming")
    parser.add_argument(
        "--callers",
        nargs="+",
        choices=("light", "sdk"),
        default=["light", "sdk"],
        help="light: the bench's own caller (the servers set the pace); sdk: the A2A SDK's",
    )
    parser.add_argument("--answers", type=int, default=1000, help="answers a light drive gets")
    parser.add_argument(
        "--contenders",
        nargs="+",
        choices=CONTENDERS + COLLECTOR_ROWS,
        default=list(CONTENDERS),
        help=f"the servers to compare (with {BASELINE!r}, the baseline); add "
        f"{' and '.join(COLLECTOR_ROWS)} for like against like on the collector",
    )
    args = parser.parse_args()
    if args.command == "serve":
        if args.contender.startswith("a2a-sdk"):
            asyncio.run(serve_sdk(tune_gc=args.contender == "a2a-sdk-tuned"))
        else:
            stored = args.contender == "coreagent-a2a-stored"
            asyncio.run(serve_coreagent(stored, tune_gc=args.contender != "coreagent-a2a-untuned"))
    elif args.command == "drive-light":
        print(json.dumps(asyncio.run(drive_light(args.url, args.level, args.per_caller,
                                                 args.server_pid))))  # fmt: skip
    elif args.command == "drive":
        print(json.dumps(asyncio.run(drive(args.url, args.level, args.seconds, not args.send))))
    else:
        compare(args)


if __name__ == "__main__":
    main()
