"""What finished delegations leave in a served host: its RSS and CPU as delegations go by.

A host is served in a process of its own (pinned to core 0, as bench/wire_speed.py
pins it); `CallPeer` delegates to it over loopback from this process (core 1),
`--in-flight` at a time, `--delegations` in all, and the host's RSS and CPU are
read from /proc after every tenth. Three ways a finished delegation's session can
end, each a run of its own:

- kept: the caller leaves it (CallPeer's default); the host keeps at most
  `max_sessions_in_memory` in memory and the rest in its store
- deleted: the caller deletes it after the answer (``delete_sessions=True``)
- evicted: the host evicts it once idle (``session_idle_timeout=1``)

Memory is flat when the last tenths' RSS stops growing: the table gives RSS at
each tenth and the growth over the second half in bytes per delegation, and
CPU ms per delegation in the first and last tenths (a collector whose work grows
with what is kept shows there). ``--code DIR`` serves the host from another
checkout (the code before a change, extracted with ``git archive``) for a run
side by side.

    python bench/host_memory.py [--delegations 100000] [--in-flight 50] \\
        [--modes kept deleted evicted]

Every loop is bounded by a count and a time; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

CHUNKS = ("Checking the cluster. ", "All nodes answer. ", "Load is normal. ")
PROMPT = "How is the cluster doing?"
DEADLINE = 60.0  # seconds one call may take
TENTHS = 10

# The same /proc readings as the wire-speed bench (run as a script, bench/ is on sys.path).
from wire_speed import _cpu_of, _rss_mib  # noqa: E402


async def serve(mode: str) -> None:
    from coreagent_sdk.host import AgentHost, Turn

    async def agent(turn: Turn) -> None:
        for chunk in CHUNKS:
            await turn.chunk(chunk)
        await turn.say("done: " + turn.prompt)

    options: dict[str, Any] = {"session_rate_limit": None}
    if mode == "evicted":
        options["session_idle_timeout"] = 1.0
    host = AgentHost("bench", behavior=agent, **options)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        host.serve(on_ready=ready.set_result, handle_signals=False, grace=0)
    )
    print(json.dumps(await ready), flush=True)
    loop = asyncio.get_running_loop()
    for _ in range(1_000_000):  # bounded; a line asks for the numbers, EOF stops the host
        if not await loop.run_in_executor(None, sys.stdin.readline):
            break
        print(json.dumps({"gc_s": _GC[0], "collections": _GC[1], "in_memory": len(host.sessions),
                          "gc_by_generation": _GC_BY_GENERATION}),
              flush=True)  # fmt: skip
    host.stop()
    await serving


_GC = [0.0, 0, 0.0]  # seconds collecting, collections, when the current one started
_GC_BY_GENERATION = [0.0, 0.0, 0.0]  # seconds collecting, by the generation collected


def _time_gc(phase: str, info: dict[str, Any]) -> None:
    """A `gc.callbacks` entry: the collector's own time, each collection timed."""
    if phase == "start":
        _GC[2] = time.process_time()  # CPU time: a loaded machine does not inflate it
    else:
        took = time.process_time() - _GC[2]
        _GC[0] += took
        _GC[1] += 1
        _GC_BY_GENERATION[info["generation"]] += took


def _host_numbers(server: subprocess.Popen[str]) -> dict[str, Any]:
    """The host's GC time, collections and sessions in memory, asked over its stdin."""
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdin.write("numbers\n")
    server.stdin.flush()
    return dict(json.loads(server.stdout.readline()))


async def drive(
    mode: str, server: subprocess.Popen[str], url: str, total: int, in_flight: int
) -> dict[str, Any]:
    pid = server.pid
    from coreagent_sdk import CallPeer, Peer, StaticDirectory

    tool = CallPeer(
        StaticDirectory([Peer("bench", url)]),
        timeout=DEADLINE,
        max_connections=max(100, 2 * in_flight + 2),
        delete_sessions=mode == "deleted",
    )
    failed = 0
    tenth = max(1, total // TENTHS)
    # (done, rss MiB, cpu s, wall s, gc s, sessions in memory)
    points: list[tuple[int, float, float, float, float, int]] = []
    try:
        await tool.acall(peer="bench", prompt=PROMPT)  # warm: the pool's first connection
        started = time.perf_counter()
        numbers = _host_numbers(server)
        points.append((0, _rss_mib(pid), _cpu_of(pid), 0.0, numbers["gc_s"], numbers["in_memory"]))
        for _ in range(TENTHS):

            async def worker(queue: Iterator[int]) -> None:
                nonlocal failed
                for _ in queue:
                    try:
                        await tool.acall(peer="bench", prompt=PROMPT)
                    except Exception:
                        failed += 1

            queue = iter(range(tenth))
            await asyncio.wait_for(
                asyncio.gather(*(worker(queue) for _ in range(in_flight))), DEADLINE * tenth
            )
            done = points[-1][0] + tenth
            wall = time.perf_counter() - started
            numbers = _host_numbers(server)
            points.append(
                (done, _rss_mib(pid), _cpu_of(pid), wall, numbers["gc_s"], numbers["in_memory"])
            )
            print(f"  {mode}: {done:,} delegations, host RSS {points[-1][1]:.1f} MiB, GC "
                  f"{numbers['gc_s']:.2f} s (by generation "
                  f"{' / '.join(f'{g:.2f}' for g in numbers['gc_by_generation'])}), "
                  f"{numbers['in_memory']} sessions in memory, "
                  f"{done / wall:.0f}/s, load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    finally:
        await tool.aclose()
    return {"points": points, "failed": failed}


def run(mode: str, args: argparse.Namespace, code: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = code
    server = subprocess.Popen(
        ["taskset", "-c", "0", sys.executable, __file__, "--serve", mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        url = json.loads(server.stdout.readline())
        result = asyncio.run(drive(mode, server, url, args.delegations, args.in_flight))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return result


def report(label: str, result: dict[str, Any]) -> None:
    points = result["points"]
    rss = " ".join(f"{p[1]:.0f}" for p in points)
    half = points[len(points) // 2]
    last = points[-1]
    growth = (last[1] - half[1]) * 1024 * 1024 / max(1, last[0] - half[0])

    def cpu_ms(a: int, b: int) -> float:
        return (points[b][2] - points[a][2]) * 1000 / max(1, points[b][0] - points[a][0])

    def gc_ms(a: int, b: int) -> float:  # per 1,000 delegations
        return (points[b][4] - points[a][4]) * 1e6 / max(1, points[b][0] - points[a][0])

    rate = last[0] / last[3] if last[3] else 0.0
    end = len(points) - 1
    print(
        f"| {label} | {last[0]:,} | {rss} | {growth:+.0f} | {cpu_ms(0, 1):.2f} / "
        f"{cpu_ms(end - 1, end):.2f} | {gc_ms(0, 1):.0f} / {gc_ms(end - 1, end):.0f} "
        f"({last[4]:.1f} s) | {last[5]} | {rate:.0f}/s | {result['failed']} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--delegations", type=int, default=100_000)
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument("--modes", nargs="+", default=["kept", "deleted", "evicted"])
    parser.add_argument("--code", help="serve the host from this checkout too, side by side")
    args = parser.parse_args()
    if args.serve:
        gc.callbacks.append(_time_gc)
        asyncio.run(serve(args.serve))
        return
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average at start: {load}; {args.delegations:,} delegations, "
          f"{args.in_flight} in flight", flush=True)  # fmt: skip
    print(
        "| host, sessions | delegations | server RSS MiB at each tenth | growth, second half, "
        "B/delegation | server CPU ms/delegation, first / last tenth | server GC ms per "
        "1,000 delegations, first / last tenth (total) | sessions in memory | rate | failed |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for mode in args.modes:
        if args.code:
            report(f"before ({args.code}), {mode}", run(mode, args, args.code))
        report(f"this checkout, {mode}", run(mode, args, None))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average at end: {load}")


if __name__ == "__main__":
    main()
