"""What the byte cap saves: a peer streaming 1 MB, 10 MB and 100 MB answers, capped at 16 KiB.

A simulated peer in a child process, served on 127.0.0.1, answers with that
many bytes of narration (64 KiB text events, each with a tool call, so none
ends the turn), then a one-word final answer. Two readers in this process:

- bare: the protocol by hand with raw httpx, reading the whole answer (every
  event until turn-complete), as a client without a cap must;
- CallPeer with the default cap (`max_response_bytes=16384`).

For each size: the fastest of `--repeat` calls (no tracing; a warm-up call
first), then the peak of Python allocations during one more call
(tracemalloc). Ratios are CallPeer over bare in the same run. The peer runs in
its own process so that only the reader's memory is traced; the bench pauses a
second between calls, and a turn a capped call walked away from may still run
in the peer meanwhile, which is why the fastest of several calls is reported.

    python bench/truncation.py [--sizes 1,10,100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable

import httpx

from coreagent_sdk import CallPeer, Peer, StaticDirectory

JSON = {"Content-Type": "application/json"}
EVENT_BYTES = 64 * 1024
MB = 1_000_000


def serve_peer(sizes: list[int]) -> None:
    """The child: one peer per size (`mb-N`), on loopback, until stdin closes."""
    from simulator import Fleet, behaviors

    def answer(total: int) -> behaviors.Behavior:
        piece = "x" * EVENT_BYTES

        async def run(turn: behaviors.Turn) -> str:
            for _ in range(total // EVENT_BYTES):
                await turn.narrate(piece, tool="write")
            return "done"

        return behaviors.custom(run)

    async def main() -> None:
        fleet = Fleet()
        for size in sizes:
            fleet.add_peer(f"mb-{size}", answer(size * MB))
        async with await fleet.serve() as served:
            print(json.dumps(served.urls), flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await fleet.aclose()

    asyncio.run(main())


async def bare_read_all(http: httpx.AsyncClient, base: str) -> int:
    """The whole answer, read with the bare protocol; returns its size in bytes."""
    created = (await http.post(f"{base}/sessions", headers=JSON)).json()
    path = f"{base}/sessions/{created['app']}/{created['sessionID']}"
    texts: list[str] = []
    async with http.stream("GET", f"{path}/events") as stream:
        await http.post(f"{path}/inject", headers=JSON, json={"message": "write it all"})
        event = ""
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                if event == "turn-complete":
                    break
                if event != "agent":
                    continue
                ev = json.loads(line[6:])["event"]
                if ev.get("Partial") or ev.get("Author") in ("", "user", None):
                    continue
                texts.append("".join(p.get("text", "") for p in ev["Content"]["parts"]))
    return len("\n\n".join(texts).encode())


async def idle(http: httpx.AsyncClient, base: str) -> None:
    """A pause between calls (the simulated daemon's session list no longer says when a
    turn has ended, so a turn a capped call walked away from may still be running)."""
    await asyncio.sleep(1.0)


async def measure(
    run: Callable[[], Awaitable[int]], settle: Callable[[], Awaitable[None]], repeat: int
) -> tuple[float, float, int]:
    """(seconds, peak MiB, answer bytes): the fastest of `repeat` timed calls, then a traced one."""
    seconds = float("inf")
    for _ in range(repeat):
        await settle()
        started = time.perf_counter()
        size = await run()
        seconds = min(seconds, time.perf_counter() - started)
    await settle()
    tracemalloc.start()
    tracemalloc.reset_peak()
    await run()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak, size


async def main(urls: dict[str, str], sizes: list[int], repeat: int) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        print(f"{'answer':>7}  {'reader':<8} {'wall s':>8} {'peak MiB':>9} {'kept bytes':>11}")
        for size in sizes:
            base = urls[f"mb-{size}"]
            tool = CallPeer(StaticDirectory([Peer("big", base)]), timeout=600)

            async def capped(tool: CallPeer = tool) -> int:
                result = await tool.acall(peer="big", prompt="write it all")
                assert result.truncated
                return len(result.response.encode())

            async def bare(base: str = base) -> int:
                return await bare_read_all(http, base)

            async def settle(base: str = base) -> None:
                await idle(http, base)

            await capped()  # warm-up: the connection pool
            rows = []
            for name, run in (("bare", bare), ("CallPeer", capped)):
                seconds, peak, kept = await measure(run, settle, repeat)
                rows.append((name, seconds, peak, kept))
                print(f"{size:>5} MB  {name:<8} {seconds:>8.3f} {peak:>9.2f} {kept:>11,}")
            (_, bs, bp, _), (_, cs, cp, _) = rows
            print(f"{'':>7}  ratio    {cs / bs:>8.4f} {cp / bp:>9.4f}   (CallPeer / bare)")
            await tool.aclose()


def run(sizes: list[int], repeat: int) -> None:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", ",".join(map(str, sizes))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        urls = json.loads(child.stdout.readline())
        asyncio.run(main(urls, sizes, repeat))
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,100", help="answer sizes in MB")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per reader and size")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_peer([int(s) for s in args.serve.split(",")])
    else:
        run([int(s) for s in args.sizes.split(",")], args.repeat)
