"""What a delegation costs as the fleet grows: 10 to 10,000 registered peers.

Every table is measured in this run and printed as ratios against a baseline
from the same run:

1. In-process delegations/s, 50 calls in flight, echo peers, each call to a
   peer chosen at random, measured by `bench/sim_inproc.py`'s own workers, so
   the two benches measure the same thing the same way: one process per size
   and directory, built, warmed for 0.5 s and frozen out of the collector's
   passes, then adjacent pairs of short windows, each N-peer window beside a
   10-peer one (``--pairs`` of ``--seconds``), one seeded sequence of peers per
   fleet that runs on from window to window. With
   the fleet's default directory (`fleet.call_peer()`, which resolves names in
   the hub's registry), `HubDirectory` over the in-process transport (`GET
   /peers` per lookup, shared by the calls in flight) and `HubDirectory(max_age=1)`
   (lookups from a roster at most 1 s old, refreshed in the background).
   Baseline: the 10-peer windows of the same directory, read pair by pair (the
   median of the pairs' ratios of the CPU per delegation, with its 95% interval,
   and of the rate; see `bench/sim_inproc.py`).
   Then the process time of one `GET /peers` refresh (hub listing plus
   decoding) with 3% of the leases renewed.
2. A 10,000-peer fleet idling (leases of `--idle-ttl` s, renewed lazily):
   CPU time over `--idle` s of wall time, memory per peer (tracemalloc), and
   a call to every peer afterwards.
3. Over loopback sockets (`fleet.serve()`): delegations/s at concurrency
   1, 10, 200 and 1,000, and the number of errors (must be 0).
4. 10,000 delegations in one fleet: memory per call (tracemalloc) over the
   first and the last thousand.

    python bench/fleet_scale.py [--pairs 100] [--seconds 0.15] [--idle 30] [--quick]

Every loop is bounded by a count and a time; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import random
import statistics
import time
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable

from coreagent_sdk import CallPeer, HubDirectory
from simulator import Fleet, behaviors

PROMPT = "ping"
IN_FLIGHT = 50
SEED = 38  # the peers' order in table 1, as bench/sim_inproc.py's


def build(size: int, *, ttl: float = 60) -> Fleet:
    fleet = Fleet()
    echo = behaviors.echo()
    for i in range(size):
        fleet.add_peer(f"p-{i}", echo, ttl=ttl)
    return fleet


async def rate(
    tool: CallPeer,
    size: int,
    seconds: float,
    in_flight: int,
    *,
    max_calls: int = 200_000,
    failures: Counter[str] | None = None,
    at_random: bool = False,
) -> tuple[float, int]:
    """Delegations/s with `in_flight` workers calling peers round-robin for ~`seconds`.

    `at_random`: each call to a peer chosen at random (seeded) instead. `failures`,
    when given, counts each failed call by its kind (`failure_kind`).
    """
    done = 0
    errors = 0
    stop_at = time.perf_counter() + seconds
    counter = iter(range(max_calls))
    pick = random.Random(SEED).randrange

    async def worker() -> None:
        nonlocal done, errors
        for n in counter:  # bounded by max_calls, shared by the workers
            if time.perf_counter() >= stop_at:
                return
            try:
                peer = pick(size) if at_random else n % size
                result = await tool.acall(peer=f"p-{peer}", prompt=PROMPT)
                assert result.response == PROMPT
                done += 1
            except Exception as exc:
                errors += 1
                if failures is not None:
                    failures[failure_kind(exc)] += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return done / (time.perf_counter() - started), errors


def failure_kind(exc: Exception) -> str:
    """What failed a call, without the peer's name or session: "deadline" is the caller's own."""
    text = str(exc)
    if "did not finish within" in text or ("waited" in text and "free connection" in text):
        return "deadline (the call's own timeout)"
    return f"{type(exc).__name__}: {text.split(':', 2)[-1].strip()[:120]}"


def in_process(sizes: list[int], pairs: int, seconds: float) -> None:
    """Table 1, measured by `bench/sim_inproc.py`'s own workers (one process per size and
    directory, adjacent pairs of short windows, ratios read pair by pair): the two benches
    measure the same thing the same way, by construction."""
    from pathlib import Path

    import sim_inproc

    print(f"1. in-process, {IN_FLIGHT} calls in flight, echo peers, each call to a random peer")
    here = Path(__file__).resolve().parent.parent
    python = sim_inproc._python_of(here)
    kinds = {"fleet": "fleet directory", "hub": "HubDirectory", "aged": "max_age=1"}
    workers = {
        (kind, size): sim_inproc.Worker(here, python, size, kind)
        for kind in kinds
        for size in sizes
    }
    comparisons = [((kind, sizes[0]), (kind, size)) for kind in kinds for size in sizes[1:]]
    try:
        for worker in workers.values():
            worker.ready()  # one build at a time
        got = sim_inproc.alternate(workers, comparisons, pairs, seconds, show=False)
    finally:
        for worker in workers.values():
            worker.close()
    windows = [w for pair in got.values() for both in pair for w in both]
    print(f"   {pairs} adjacent pairs of {seconds:g} s windows per size (bench/sim_inproc.py)")
    print(f"   {sim_inproc.machine(windows)}")
    print(
        f"   {'directory':<16} {'peers':>7} {'median/s':>9} {'median CPU ms':>14} "
        f"{'vs 10 peers: paired CPU':>24} {'(95%)':>13} {'rate':>6}"
    )
    for kind, name in kinds.items():
        for size in sizes[1:]:
            pairs_of = got[(kind, sizes[0]), (kind, size)]
            ratio = sim_inproc.ratios(pairs_of)
            rates = [b["rate"] for _, b in pairs_of]
            cpu = statistics.median(b["cpu_ms"] for _, b in pairs_of)
            print(
                f"   {name:<16} {size:>7,} {statistics.median(rates):>9.0f} {cpu:>14.3f} "
                f"{ratio['cpu']:>24.2f} {ratio['cpu_low']:>6.2f}-{ratio['cpu_high']:<6.2f} "
                f"{ratio['rate']:>6.2f}"
            )


async def refresh_table(sizes: list[int]) -> None:
    print("   CPU of one HubDirectory GET /peers (hub listing + decoding), 3% of leases renewed:")
    gc.collect()
    for size in sizes:
        fleet = build(size)
        print(f"   {size:>7,} peers: {1000 * await refresh_cpu(fleet, size):.1f} ms")
        await fleet.aclose()


async def refresh_cpu(fleet: Fleet, size: int, repeat: int = 5) -> float:
    """Process time of one roster refresh after 3% of the leases renewed (best of `repeat`).

    The machine's load moves the rates above by half; this is the refresh's own cost.
    """
    directory = HubDirectory(fleet.hub_url, transport=fleet.transport)
    await directory.peers()
    ids = [fleet.registry.get(f"p-{i}").registration_id for i in range(size)]  # type: ignore[union-attr]
    step = max(1, size * 3 // 100)
    best = float("inf")
    for r in range(repeat):
        for rid in ids[r * step : (r + 1) * step]:
            fleet.registry.heartbeat(rid)
        started = time.process_time()
        await directory.peers()
        best = min(best, time.process_time() - started)
    await directory.aclose()
    return best


async def idle(size: int, seconds: float, ttl: float) -> None:
    print(f"\n2. a {size:,}-peer fleet idling {seconds:g} s (leases of {ttl:g} s, renewed lazily)")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fleet = build(size, ttl=ttl)
    gc.collect()
    per_peer = (tracemalloc.get_traced_memory()[0] - before) / size
    tracemalloc.stop()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.sleep(seconds)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    tool = fleet.call_peer(timeout=60)
    failures = 0

    async def call(i: int) -> None:
        nonlocal failures
        try:
            await tool.acall(peer=f"p-{i}", prompt=PROMPT)
        except Exception:
            failures += 1

    sem = asyncio.Semaphore(IN_FLIGHT)

    async def bounded(i: int) -> None:
        async with sem:
            await call(i)

    await asyncio.gather(*(bounded(i) for i in range(size)))
    print(f"   CPU while idle: {cpu:.3f} s over {wall:.1f} s = {100 * cpu / wall:.2f}% of one core")
    print(f"   memory per peer: {per_peer / 1024:.1f} KiB (tracemalloc)")
    print(f"   afterwards, calls to each of the {size:,} peers: {size - failures:,} answered")
    await tool.aclose()
    await fleet.aclose()


async def loopback(levels: list[int], peers: int, seconds: float) -> None:
    print(f"\n3. over loopback sockets (fleet.serve(), {peers} echo peers)")
    fleet = build(peers)
    async with await fleet.serve() as served:
        head = f"{'concurrency':>11} {'delegations/s':>14} {'errors':>7} {'vs concurrency 1':>17}"
        print(f"   {head}")
        base = 0.0
        for level in levels:
            tool = served.call_peer(timeout=60)
            await rate(tool, peers, 0.2, min(level, 10))  # warm the pool
            got, errors = await rate(tool, peers, max(seconds, level / 100), level)
            base = base or got
            print(f"   {level:>11,} {got:>14.0f} {errors:>7} {got / base:>17.2f}")
            await tool.aclose()
    await fleet.aclose()


async def memory_per_call(total: int, window: int) -> None:
    print(f"\n4. {total:,} delegations in one fleet (10 echo peers), memory per call")
    fleet = build(10)
    tool = fleet.call_peer(timeout=60)

    async def batch(n: int, offset: int) -> None:
        sem = asyncio.Semaphore(IN_FLIGHT)

        async def one(i: int) -> None:
            async with sem:
                await tool.acall(peer=f"p-{i % 10}", prompt=PROMPT)

        await asyncio.gather(*(one(offset + i) for i in range(n)))

    await batch(200, 0)  # warm-up: pools, caches
    gc.collect()
    tracemalloc.start()
    marks: list[int] = []
    done = 0
    while done < total:
        gc.collect()
        marks.append(tracemalloc.get_traced_memory()[0])
        await batch(window, done)
        done += window
    gc.collect()
    marks.append(tracemalloc.get_traced_memory()[0])
    tracemalloc.stop()
    per = [(b - a) / window for a, b in itertools.pairwise(marks)]
    first, last = per[0], per[-1]
    print(f"   first {window:,}: {first / 1024:.2f} KiB/call")
    print(f"   last {window:,}: {last / 1024:.2f} KiB/call")
    print(f"   last/first = {last / first:.2f} (each call leaves a session on its peer)")
    await tool.aclose()
    await fleet.aclose()


async def main(args: argparse.Namespace) -> None:
    sizes = [10, 100, 1_000] if args.quick else [10, 100, 1_000, 10_000]
    steps: list[list[Callable[[], Awaitable[None]]]] = [
        [
            lambda: asyncio.to_thread(in_process, sizes, args.pairs, args.seconds),
            lambda: refresh_table(sizes),
        ],
        [lambda: idle(sizes[-1], args.idle, args.idle_ttl)],
        [lambda: loopback([1, 10, 200] if args.quick else [1, 10, 200, 1_000], 10, args.seconds)],
        [lambda: memory_per_call(10_000 if not args.quick else 2_000, 1_000)],
    ]
    for number, table in enumerate(steps, 1):
        if args.only in (None, number):
            for step in table:
                await step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100, help="table 1's pairs of windows")
    parser.add_argument("--seconds", type=float, default=0.15, help="table 1's window")
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--idle-ttl", type=float, default=3.0)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--only", type=int, choices=[1, 2, 3, 4], help="run only this table (default: all)"
    )
    asyncio.run(main(parser.parse_args()))
