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
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until closed
    host.stop()
    await serving


async def drive(mode: str, pid: int, url: str, total: int, in_flight: int) -> dict[str, Any]:
    from coreagent_sdk import CallPeer, Peer, StaticDirectory

    tool = CallPeer(
        StaticDirectory([Peer("bench", url)]),
        timeout=DEADLINE,
        max_connections=max(100, 2 * in_flight + 2),
        delete_sessions=mode == "deleted",
    )
    failed = 0
    tenth = max(1, total // TENTHS)
    points: list[tuple[int, float, float, float]] = []  # (done, rss MiB, cpu s, wall s)
    try:
        await tool.acall(peer="bench", prompt=PROMPT)  # warm: the pool's first connection
        started = time.perf_counter()
        points.append((0, _rss_mib(pid), _cpu_of(pid), 0.0))
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
            points.append((done, _rss_mib(pid), _cpu_of(pid), time.perf_counter() - started))
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
        result = asyncio.run(drive(mode, server.pid, url, args.delegations, args.in_flight))
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

    rate = last[0] / last[3] if last[3] else 0.0
    print(
        f"| {label} | {last[0]:,} | {rss} | {growth:+.0f} | {cpu_ms(0, 1):.2f} / "
        f"{cpu_ms(len(points) - 2, len(points) - 1):.2f} | {rate:.0f}/s | {result['failed']} |",
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
        asyncio.run(serve(args.serve))
        return
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average at start: {load}; {args.delegations:,} delegations, "
          f"{args.in_flight} in flight", flush=True)  # fmt: skip
    print(
        "| host, sessions | delegations | server RSS MiB at each tenth | growth, second half, "
        "B/delegation | server CPU ms/delegation, first / last tenth | rate | failed |"
    )
    print("|---|---:|---|---:|---:|---:|---:|")
    for mode in args.modes:
        if args.code:
            report(f"before ({args.code}), {mode}", run(mode, args, args.code))
        report(f"this checkout, {mode}", run(mode, args, None))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average at end: {load}")


if __name__ == "__main__":
    main()
