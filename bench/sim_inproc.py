"""The simulator in process against another checkout of it, and its 10,000 and 100,000-peer ratios.

One command for the simulator's in-process figures, all measured in this run:

- **today against a baseline checkout** (``--baseline DIR``, such as the code
  before the daemons moved onto the agent host: ``git archive 46adac7 | tar -x
  -C /tmp/sim-46adac7``, with a venv of its own): 10 echo peers; the ratio of
  the two rates.
- **10,000 and 100,000 peers against 10** with the fleet's default directory
  (``fleet.call_peer()``), for each checkout: the ratio of the rates and of
  the CPU per delegation.
- **10,000 peers against 10 through `HubDirectory(max_age=1)`** (``--aged-sizes``,
  the hub's HTTP roster in process, refreshed in the background): the same
  ratios, so one run gives every figure of the random-peers goal.

What is measured, here and in ``bench/fleet_scale.py`` table 1 alike: echo
peers, 50 calls in flight, each call to a peer chosen at random (seeded, the
same sequence for every size), so a large fleet's calls go to peers it has not
called yet or not lately, as a real caller's do; round-robin over the roster
hid that (it met each peer's state in the order it was made). Each measurement
is a fresh process (`python bench/sim_inproc.py --one SIZE SECONDS`, run with
the checkout's own interpreter and with the checkout as its working
directory, so it imports that checkout's code): it builds the fleet, warms up
for half a second, freezes the fleet out of the collector's full passes and
runs for SECONDS, printing delegations/s and process CPU ms per delegation.
Checkouts and sizes alternate round by round, so drift on a shared machine hits
every one alike; best and median of the rounds are printed, with the load
average before and after. On a loaded machine the rates move with the other
processes' demand; the CPU per delegation moves far less.

    python bench/sim_inproc.py [--baseline /tmp/sim-46adac7] [--rounds 3] \\
        [--seconds 4] [--sizes 10 10000 100000] [--aged-sizes 10 10000]

Every loop is bounded by a count and a time; nothing leaves the process (the
fleet's in-process transport).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

IN_FLIGHT = 50
PROMPT = "ping"
SEED = 38  # the peers' order: the same for every size and checkout
MAX_CALLS = 1_000_000  # a bound on one run, whatever the time says
RUN_TIMEOUT = 900.0  # seconds one measuring process may take, building included


async def one(size: int, seconds: float, aged: bool = False) -> dict[str, float]:
    """Delegations/s and CPU ms per delegation of a `size`-peer fleet, in this process
    (`aged`: through `HubDirectory(max_age=1)` instead of the fleet's own directory)."""
    from coreagent_sdk import HubDirectory
    from simulator import Fleet, behaviors

    fleet = Fleet()
    echo = behaviors.echo()
    for i in range(size):
        fleet.add_peer(f"p-{i}", echo, ttl=60)
    if aged:
        directory = HubDirectory(fleet.hub_url, transport=fleet.transport, max_age=1)
        tool = fleet.call_peer(timeout=60, directory=directory)
    else:
        tool = fleet.call_peer(timeout=60)
    pick = random.Random(SEED).randrange

    async def run(secs: float) -> tuple[float, float, int]:
        done = 0
        stop = time.perf_counter() + secs
        counter = iter(range(MAX_CALLS))

        async def worker() -> None:
            nonlocal done
            for _ in counter:  # shared by the workers: bounded by MAX_CALLS in all
                if time.perf_counter() >= stop:
                    return
                result = await tool.acall(peer=f"p-{pick(size)}", prompt=PROMPT)
                assert result.response == PROMPT, result
                done += 1

        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return done / wall, 1000 * cpu / max(done, 1), done

    await run(0.5)
    gc.collect()
    gc.freeze()
    rate, cpu_ms, done = await run(seconds)
    await tool.aclose()
    await fleet.aclose()
    return {"rate": rate, "cpu_ms": cpu_ms, "calls": done}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(
    code: Path, python: str, size: int, seconds: float, aged: bool = False
) -> dict[str, float]:
    """One run in a fresh process of checkout `code` (its own interpreter and its own code)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(code)
    where = ["--aged"] if aged else []
    out = subprocess.run(
        [python, str(Path(__file__).resolve()), "--one", str(size), str(seconds), *where],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"sim_inproc: a run of {code} failed:\n{out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _python_of(code: Path) -> str:
    venv = code / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def compare(args: argparse.Namespace) -> None:
    here = Path(__file__).resolve().parent.parent
    checkouts = [("today", here, _python_of(here))]
    if args.baseline:
        base = Path(args.baseline).resolve()
        checkouts.insert(0, ("baseline", base, _python_of(base)))
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    plan = [(size, False) for size in args.sizes] + [(size, True) for size in args.aged_sizes]
    print(f"load average before: {_load()}", flush=True)
    started = time.perf_counter()
    for r in range(args.rounds):
        for name, code, python in checkouts:
            for size, aged in plan:
                got = measure(code, python, size, args.seconds, aged)
                label = f"{name}, max_age=1" if aged else name
                runs.setdefault((label, size), []).append(got)
                print(
                    f"  round {r + 1} {label:<19} {size:>6} peers: {got['rate']:7.1f}/s "
                    f"{got['cpu_ms']:6.2f} CPU ms/delegation (load {_load()})",
                    flush=True,
                )
    print(f"load average after: {_load()} ({time.perf_counter() - started:.0f} s)")
    for name, code, _ in checkouts:
        print(f"{name}: {code}")
    print(f"\nbest / median of {args.rounds} rounds of {args.seconds:g} s, {IN_FLIGHT} in flight")
    print(f"{'code':<20} {'peers':>7} {'best/s':>8} {'median/s':>9} {'least CPU ms':>13}")
    for (name, size), got in runs.items():
        rates = [g["rate"] for g in got]
        least = min(g["cpu_ms"] for g in got)
        print(
            f"{name:<20} {size:>7,} {max(rates):>8.1f} {statistics.median(rates):>9.1f} "
            f"{least:>13.2f}"
        )
    print()
    series = [(name, args.sizes) for name, _, _ in checkouts]
    if args.aged_sizes:
        series += [(f"{name}, max_age=1", args.aged_sizes) for name, _, _ in checkouts]
    for name, sizes in series:
        small = sizes[0]
        for large in sizes[1:]:
            best = max(g["rate"] for g in runs[name, large]) / max(
                g["rate"] for g in runs[name, small]
            )
            med = statistics.median(g["rate"] for g in runs[name, large]) / statistics.median(
                g["rate"] for g in runs[name, small]
            )
            cpu = min(g["cpu_ms"] for g in runs[name, small]) / min(
                g["cpu_ms"] for g in runs[name, large]
            )
            print(
                f"{name}: {large:,} peers / {small} peers: best {best:.2f}, median {med:.2f}, "
                f"least CPU per delegation {cpu:.2f}"
            )
    if args.baseline:
        for size in args.sizes:
            today, base = runs["today", size], runs["baseline", size]
            best = max(g["rate"] for g in today) / max(g["rate"] for g in base)
            med = statistics.median(g["rate"] for g in today) / statistics.median(
                g["rate"] for g in base
            )
            cpu = min(g["cpu_ms"] for g in base) / min(g["cpu_ms"] for g in today)
            print(
                f"today / baseline, {size:,} peers: best {best:.2f}, median {med:.2f}, "
                f"least CPU per delegation {cpu:.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="another checkout (with its own .venv) to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 10_000, 100_000])
    parser.add_argument(
        "--aged-sizes",
        type=int,
        nargs="*",
        default=[10, 10_000],
        help="sizes measured through HubDirectory(max_age=1) too (none: --aged-sizes)",
    )
    parser.add_argument("--one", type=float, nargs=2, metavar=("SIZE", "SECONDS"))
    parser.add_argument("--aged", action="store_true", help="with --one: HubDirectory(max_age=1)")
    args = parser.parse_args()
    if args.one:
        got = asyncio.run(one(int(args.one[0]), args.one[1], args.aged))
        print(json.dumps(got), flush=True)
    else:
        compare(args)


if __name__ == "__main__":
    main()
