"""Soak: does a simulated fleet's memory level off under steady delegation?

Every delegation opens a session on its peer. A daemon bounds what sessions
keep (the newest 5,000 events each, eviction after an idle timeout), and so
does the simulator; this runs calls for minutes and prints, every interval,
the process's resident memory, its asyncio task count and the live sessions,
so that growth with the number of calls shows at once.

Peers: echo, failing, slow (0.2 s), dropped-stream and a 200 KB streamed
answer (cut at CallPeer's 16 KiB cap), all in-process, with a short session
idle timeout. `--concurrency` calls are always in flight. The loop stops by
itself after `--duration` seconds (and after `--max-calls`, if given).

    python bench/soak.py [--duration 300] [--every 30] [--concurrency 40] [--idle 2]

The last lines compare the last sample with the first one (ratios): a run
whose memory and tasks level off shows ratios near 1 while calls grow.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import resource
import time
from collections import Counter

from coreagent_sdk import CallPeer
from coreagent_sdk.errors import CallPeerError
from simulator import Fleet, behaviors

PEERS = {
    "echo": behaviors.echo(),
    "failing": behaviors.fail("transient_network", "simulated outage", retryable=True),
    "slow": behaviors.slow(0.2),
    "dropped": behaviors.drop_stream(after_frames=2),
    "big": behaviors.stream(200 * 1024, chunk_bytes=4096),
}


def rss_mib() -> float:
    """Current resident memory of this process (VmRSS), in MiB; peak RSS where /proc is absent."""
    try:
        with open(f"/proc/{os.getpid()}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Soak:
    def __init__(self, fleet: Fleet, tool: CallPeer, concurrency: int, max_calls: int) -> None:
        self.fleet = fleet
        self.tool = tool
        self.concurrency = concurrency
        self.max_calls = max_calls
        self.outcomes: Counter[str] = Counter()
        self.calls = 0
        self._names = itertools.cycle(PEERS)

    async def worker(self, stop_at: float) -> None:
        while time.monotonic() < stop_at and self.calls < self.max_calls:
            self.calls += 1
            peer = next(self._names)
            try:
                result = await self.tool.acall(peer=peer, prompt=f"call {self.calls} to {peer}")
                self.outcomes["truncated" if result.truncated else "answered"] += 1
            except CallPeerError as exc:
                self.outcomes[type(exc).__name__] += 1

    def sample(self, started: float) -> tuple[float, int, float, int, int]:
        gc.collect()
        sessions = sum(len(d.sessions) for d in self.fleet.daemons.values())
        tasks = len(asyncio.all_tasks())
        return (time.monotonic() - started, self.calls, rss_mib(), tasks, sessions)


def show(row: tuple[float, int, float, int, int]) -> None:
    elapsed, calls, rss, tasks, sessions = row
    print(f"| {elapsed:9.0f} | {calls:8d} | {rss:8.1f} | {tasks:6d} | {sessions:8d} |", flush=True)


async def main(
    duration: float, every: float, concurrency: int, idle: float, max_calls: int
) -> None:
    fleet = Fleet(session_idle_timeout=idle)
    for name, behavior in PEERS.items():
        fleet.add_peer(name, behavior)
    tool = fleet.call_peer(timeout=10)
    soak = Soak(fleet, tool, concurrency, max_calls)
    print(
        f"soak: {concurrency} calls in flight over {', '.join(PEERS)} for {duration:g} s, "
        f"session idle timeout {idle:g} s"
    )
    print("| elapsed s |    calls |  RSS MiB |  tasks | sessions |")
    print("|----------:|---------:|---------:|-------:|---------:|")
    started = time.monotonic()
    stop_at = started + duration
    samples = [soak.sample(started)]
    show(samples[-1])
    workers = [asyncio.create_task(soak.worker(stop_at)) for _ in range(concurrency)]
    try:
        while not all(w.done() for w in workers):
            await asyncio.wait(workers, timeout=max(0.0, min(every, stop_at - time.monotonic())))
            if time.monotonic() >= started + every * len(samples) - 0.05:
                samples.append(soak.sample(started))
                show(samples[-1])
    finally:
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await tool.aclose()
        await fleet.aclose()
    print(f"outcomes: {dict(sorted(soak.outcomes.items()))}")
    end = soak.sample(started)
    print(f"after the run: RSS {end[2]:.1f} MiB, {end[3]} task(s), {end[4]} session(s) left")
    if len(samples) >= 3:
        # Compare with the first sample taken under load (the one at t=0 is idle).
        first, last = samples[1], samples[-1]
        print(
            f"last / first loaded sample: calls x{last[1] / max(first[1], 1):.1f}, "
            f"RSS x{last[2] / first[2]:.2f}, tasks x{last[3] / max(first[3], 1):.2f}, "
            f"sessions x{last[4] / max(first[4], 1):.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=300.0, help="seconds (default 300)")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--concurrency", type=int, default=40, help="calls in flight")
    parser.add_argument("--idle", type=float, default=2.0, help="session idle timeout, seconds")
    parser.add_argument("--max-calls", type=int, default=10_000_000, help="stop after this many")
    args = parser.parse_args()
    asyncio.run(main(args.duration, args.every, args.concurrency, args.idle, args.max_calls))
