"""Experiments over fleets: overhead per trial, trials per second, memory, and dask's table.

Three measurements, each a ratio against a baseline measured in the same run:

1. overhead: `Experiment.run` (SQLite rows, scoring, one trial at a time) against a bare
   loop that builds the same 3-agent fleet, makes the same call and closes the fleet;
   interleaved rounds, the median of each. Target: at most 1.2x.
2. scale: N trials (default 10,000) of the 3-agent scripted fleet in one process, then on a
   2-worker process pool: trials per second, the pool's speed-up, and the run's resident
   memory sampled as it goes (the rows go to disk, so it should stay flat).
3. dask: a LocalCluster on 127.0.0.1 (2 workers, no dashboard) runs a smaller experiment and
   gives the same table (timings aside) as one process.
4. compare: `Results.compare` over 100,000 rows (two settings paired by case, pass/fail and
   cost), against one plain pass over the same rows grouping them (the least any summary
   does). Target: under a second.

    python bench/experiments.py [--trials 10000] [--overhead 60] [--rounds 3] [--dask 120]
                                [--compare 100000] [--only overhead|scale|dask|compare]

Every loop is bounded by its trial count.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from coreagent_sdk.models import ScriptedModel, when
from simulator import Fleet, behaviors
from simulator.experiments import Case, Experiment, NoisyModel, Results, Scenario, Trial

CASES = (
    Case("disk", "Is the disk full?", expected="81%", expected_peer="storage"),
    Case("cpu", "How is the cpu?", expected="0.62", expected_peer="compute"),
)


def build(trial: Trial) -> Fleet:
    """Router + two specialists, all on scripted models; the router errs 20% of turns."""
    router = ScriptedModel(when("disk").ask("storage"), when().ask("compute"))
    fleet = Fleet(clock=trial.clock)
    fleet.add_peer("router", behaviors.model(NoisyModel(router, 0.2, trial.seed)))
    fleet.add_peer("storage", behaviors.model(ScriptedModel(when().answer("Disks 81% full."))))
    fleet.add_peer("compute", behaviors.model(ScriptedModel(when().answer("CPU 0.62."))))
    return fleet


SCENARIO = Scenario("bench", build, cases=CASES, entry="router")


def experiment(trials: int) -> Experiment:
    return Experiment(SCENARIO, grid={"variant": ["a"]}, k=max(1, trials // len(CASES)))


async def bare(trials: list[Trial]) -> None:
    for trial in trials:
        fleet = build(trial)
        try:
            await fleet.call_peer(timeout=30.0).acall(peer="router", prompt=trial.case.prompt)
        finally:
            await fleet.aclose()


def overhead(count: int, rounds: int) -> None:
    exp = experiment(count)
    trials = list(exp.trials())
    bare_times, run_times = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        asyncio.run(bare(trials))
        bare_times.append(time.perf_counter() - started)
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            exp.run(Path(folder) / "r.sqlite", concurrency=1, progress=False)
            run_times.append(time.perf_counter() - started)
    b, r = statistics.median(bare_times), statistics.median(run_times)
    print(
        f"overhead: {len(trials)} trials, one at a time, {rounds} interleaved rounds: "
        f"bare loop {1000 * b / len(trials):.1f} ms/trial, run() {1000 * r / len(trials):.1f} "
        f"ms/trial: ratio {r / b:.2f}x (target <= 1.2x); load {os.getloadavg()[0]:.1f}"
    )


def synthetic_rows(count: int) -> list[dict[str, Any]]:
    """`count` rows of two settings that asked the same cases: what a big run's file holds."""
    import json
    import random

    draw = random.Random(7)
    rows = []
    per_setting = count // 2
    for setting in ("a", "b"):
        params = json.dumps({"model": setting})
        for i in range(per_setting):
            rows.append({
                "scenario": "bench", "params": params, "model": setting,
                "case": f"c{i // 10}", "seed": i, "repetition": i % 10,
                "passed": draw.random() < (0.8 if setting == "a" else 0.78),
                "cost": 1e-6 * (1 + draw.random()), "duration_ms": 1.0,
                "tokens_in": 100, "tokens_out": 20, "error_kind": None,
            })  # fmt: skip
    return rows


def compare_speed(count: int, rounds: int) -> None:
    rows = synthetic_rows(count)
    results = Results(rows)
    bare_times: list[float] = []
    timed: dict[str, list[float]] = {"passed": [], "cost": []}
    methods: dict[str, str] = {}
    for _ in range(rounds):
        started = time.perf_counter()
        groups: dict[Any, list[bool]] = {}
        for row in rows:
            groups.setdefault(row["model"], []).append(row["passed"])
        bare_times.append(time.perf_counter() - started)
        for metric in timed:
            started = time.perf_counter()
            compared = results.compare_rows("model", metric=metric)
            timed[metric].append(time.perf_counter() - started)
            methods[metric] = compared[1]["method"]
    bare_took = statistics.median(bare_times)
    for metric, times in timed.items():
        took = statistics.median(times)
        print(
            f"compare: {len(rows):,} rows, metric={metric!r} ({methods[metric]}): "
            f"{took:.3f} s (target < 1 s); one plain grouping pass {bare_took:.3f} s: "
            f"ratio {took / bare_took:.1f}x; load {os.getloadavg()[0]:.1f}"
        )


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Sampler:
    """The process's resident memory every `every` seconds while a run goes."""

    def __init__(self, every: float = 0.5) -> None:
        self.every = every
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append(rss_mib())

    def __enter__(self) -> Sampler:
        self.samples.append(rss_mib())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def report(self) -> str:
        s = self.samples
        if len(s) < 4:
            return f"rss {s[0]:.0f} -> {s[-1]:.0f} MiB"
        q = len(s) // 4
        return (
            f"rss MiB at 25/50/75/100% of the run: {s[q]:.0f} / {s[2 * q]:.0f} / "
            f"{s[3 * q]:.0f} / {s[-1]:.0f} (start {s[0]:.0f})"
        )


def scale(count: int, folder: Path) -> None:
    exp = experiment(count)
    with Sampler() as one:
        started = time.perf_counter()
        alone = exp.run(folder / "one.sqlite", progress=False)
        took_one = time.perf_counter() - started
    print(
        f"scale: {len(alone)} trials in one process: {len(alone) / took_one:.1f} trials/s "
        f"({took_one:.0f} s); {one.report()}"
    )
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context) as pool, Sampler() as two:
        pool.submit(int).result()  # workers started before the clock
        started = time.perf_counter()
        pooled = exp.run(folder / "pool.sqlite", executor=pool, progress=False, chunk_size=50)
        took_two = time.perf_counter() - started
    print(
        f"scale: {len(pooled)} trials on a 2-worker process pool: {len(pooled) / took_two:.1f} "
        f"trials/s ({took_two:.0f} s): speed-up {took_one / took_two:.2f}x; main process "
        f"{two.report()}"
    )
    print(f"scale: same outcomes in both: {outcomes(alone) == outcomes(pooled)}")


def outcomes(results: Results) -> list[dict[str, Any]]:
    rows = [{k: v for k, v in r.items() if k not in ("duration_ms", "tree")} for r in results]
    return sorted(rows, key=lambda r: (r["params"], r["case"], r["repetition"]))


def on_dask(count: int, folder: Path) -> None:
    try:
        import distributed
    except ImportError:
        print("dask: skipped (pip install 'coreagent-sdk[dask]')")
        return
    exp = experiment(count)
    alone = exp.run(folder / "d1.sqlite", progress=False)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        started = time.perf_counter()
        pooled = exp.run(folder / "d2.sqlite", executor=client.get_executor(), progress=False)
        took = time.perf_counter() - started
    same = outcomes(alone) == outcomes(pooled)
    print(
        f"dask: {len(pooled)} trials on a 2-worker LocalCluster (127.0.0.1): "
        f"{len(pooled) / took:.1f} trials/s; the same table as one process: {same}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--overhead", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dask", type=int, default=120)
    parser.add_argument("--compare", type=int, default=100_000)
    parser.add_argument("--only", choices=("overhead", "scale", "dask", "compare"), default=None)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}; cpus: {os.cpu_count()}")
    if args.only in (None, "compare"):
        compare_speed(args.compare, args.rounds)
    if args.only in (None, "overhead"):
        overhead(args.overhead, args.rounds)
    with tempfile.TemporaryDirectory() as folder:
        if args.only in (None, "scale"):
            scale(args.trials, Path(folder))
        if args.only in (None, "dask"):
            on_dask(args.dask, Path(folder))
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
