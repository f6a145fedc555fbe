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

What is measured, here and in ``bench/fleet_scale.py`` table 1 alike (it runs
these same workers): echo peers, 50 calls in flight, each call to a peer chosen
at random (seeded, one sequence per fleet that runs on from window to window,
the same for every size), so a large fleet's calls go to peers it has not
called yet or not lately, as a real caller's do; round-robin over the roster
hid that (it met each peer's state in the order it was made).

How it is measured (round eight; what is measured is as before): every
configuration (checkout, size, directory) is a **worker process of its own**
that stays up for the whole run (`python bench/sim_inproc.py --serve SIZE KIND`,
run with the checkout's own interpreter and with the checkout as its working
directory, so it imports that checkout's code). It builds its fleet, warms up for
half a second and then waits, idle, for the next window; before each window it
freezes what it holds so far out of the collector's passes (gc.collect();
gc.freeze(): the fleet, and the sessions and call records earlier windows left),
so every window starts from the heap the first one met. One worker runs at a
time. Each comparison (N peers against 10 of the same checkout and directory;
today against the baseline) is read from **adjacent pairs** of short windows
(``--pairs`` of ``--seconds``, 100 of 0.15 s by default): the two workers of a
pair run one right after the other, which goes first alternating pair by pair,
the comparisons taking turns. Each window reports delegations/s, the worker's
own CPU ms per delegation, the collector's ms per delegation (`gc.callbacks`),
and a **control**: the CPU time of a fixed pure-Python loop run just before and
just after it.

Why: the machine's own speed swings. The control loop, which touches no memory to
speak of, takes 1.0 ms in some moments and 1.6 to 1.9 ms in others on an idle VM
with nothing of ours running, in spells of tens of milliseconds to seconds (the
VM's core is shared with work outside it); a worker's CPU per delegation swung
1.0 to 2.1 ms between half-second windows alike. Windows of 0.5 s taking turns
among five workers put up to 2 s between the two windows of a ratio, and the
machine changed state between them; two windows side by side mostly meet one
state, and many pairs make a median with an interval. A window counts its steady
state only: from LEAD_IN after its 50 calls start to its end mark, the calls then
in flight finishing uncounted, so neither the first wave nor the drain (fewer than
50 in flight) is in it, whatever the window's length.

Ratios: the **paired CPU** (the median over pairs of the 10-peer window's CPU per
delegation over the N-peer one's, with a 95% interval for the median by order
statistics), the **paired rate** (the median of the N-peer window's rate over the
10-peer one's) and the **pooled** ratios (every window's calls, CPU and time
summed). The control is printed, not used to choose windows: its spread over the
run, and how each worker's CPU per delegation moved with it (r); a pair's four
controls seldom agree within 5%, as the machine changes state within a window.
Two checkouts of the same code (``--baseline``) read 0.99 to 1.08 of each other
at 60 pairs: read one comparison to about 0.07. For the part of the cost that is
instructions, count them instead: callgrind over a reduced run is deterministic
(docs/benchmarks.md, "Round seven" and "Round eight").

``--processes K`` builds each configuration K times, each a worker process of its own
(its own heap layout, hash seed and addresses), and pairs the i-th 10-peer worker with
the i-th N-peer worker: each comparison is then read K times, and the mean of the K
medians (with the spread between them) is what one run says. Pairing within one process
cannot remove what differs between two fresh builds of the same fleet; averaging over
several can (docs/benchmarks.md, "Round nine").

    python bench/sim_inproc.py [--baseline /tmp/sim-46adac7] [--pairs 100] \\
        [--seconds 0.15] [--sizes 10 10000 100000] [--aged-sizes 10 10000] [--processes 1]

Every loop is bounded by a count and a time; nothing leaves the process (the
fleet's in-process transport).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import random
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

IN_FLIGHT = 50
PROMPT = "ping"
SEED = 38  # the peers' order: the same for every size and checkout
MAX_CALLS = 1_000_000  # a bound on one window, whatever the time says
BUILD_TIMEOUT = 600.0  # seconds a worker may take to build and warm its fleet
WINDOW_TIMEOUT = 120.0  # seconds past its length one window may take
WARM_UP = 0.5  # seconds of calls before the fleet is frozen
PAIRS = 100  # adjacent pairs of windows per comparison
LEAD_IN = 0.05  # seconds of a window before it is counted: the first wave of 50 calls
WINDOW = 0.15  # seconds: shorter than most of the machine's slow and fast spells
CONTROL_LOOPS = 30_000  # the control loop's length: 1.5 to 3 ms of CPU here
KINDS = {
    "fleet": "the fleet's directory (fleet.call_peer())",
    "hub": "HubDirectory (GET /peers per lookup)",
    "aged": "HubDirectory(max_age=1)",
}


class _Fleet:
    """One configuration's fleet and tool, in this (worker) process."""

    def __init__(self, size: int, kind: str) -> None:
        from coreagent_sdk import HubDirectory
        from simulator import Fleet, behaviors

        self.size = size
        self.fleet = fleet = Fleet()
        echo = behaviors.echo()
        for i in range(size):
            fleet.add_peer(f"p-{i}", echo, ttl=60)
        if kind == "aged":
            directory = HubDirectory(fleet.hub_url, transport=fleet.transport, max_age=1)
            self.tool = fleet.call_peer(timeout=60, directory=directory)
        elif kind == "hub":
            self.tool = fleet.call_peer(timeout=60, directory=fleet.directory())
        else:
            self.tool = fleet.call_peer(timeout=60)
        # One sequence for the whole run: a window goes on where the last stopped, so no
        # window meets again the peers an earlier one warmed.
        self.pick = random.Random(SEED).randrange
        self.gc_seconds = 0.0
        self._gc_start = 0.0

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_seconds += time.perf_counter() - self._gc_start

    async def window(self, secs: float) -> dict[str, float]:
        """Delegations/s, CPU ms and collector ms per delegation over `secs` seconds of
        steady state: counted from LEAD_IN after the 50 calls start, when the first wave
        has gone through, to `secs` later; the calls then in flight finish uncounted (the
        drain, when fewer than 50 are in flight, is no part of the measure either)."""
        done = 0
        began = time.perf_counter()
        start, stop = began + LEAD_IN, began + LEAD_IN + secs
        marks: list[tuple[int, float, float, float]] = []  # (done, wall, cpu, gc) at both ends
        counter = iter(range(MAX_CALLS))
        tool, pick, size = self.tool, self.pick, self.size

        async def worker() -> None:
            nonlocal done
            for _ in counter:  # shared by the workers: bounded by MAX_CALLS in all
                result = await tool.acall(peer=f"p-{pick(size)}", prompt=PROMPT)
                assert result.response == PROMPT, result
                done += 1
                now = time.perf_counter()
                if len(marks) < 2 and now >= (start if not marks else stop):
                    marks.append((done, now, time.process_time(), self.gc_seconds))
                if len(marks) == 2:
                    return

        self.gc_seconds = 0.0
        gc.callbacks.append(self._on_gc)
        try:
            await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        finally:
            gc.callbacks.remove(self._on_gc)
        if len(marks) < 2:  # MAX_CALLS reached first
            raise RuntimeError(f"a window of {secs:g} s did not reach its end mark")
        (d0, w0, c0, g0), (d1, w1, c1, g1) = marks
        calls = max(d1 - d0, 1)
        return {
            "rate": (d1 - d0) / (w1 - w0),
            "cpu_ms": 1000 * (c1 - c0) / calls,
            "gc_ms": 1000 * (g1 - g0) / calls,
            "calls": d1 - d0,
        }

    async def aclose(self) -> None:
        await self.tool.aclose()
        await self.fleet.aclose()


def serve(size: int, kind: str) -> None:
    """The worker: build, warm up, freeze; then one window per `run SECONDS` line on stdin."""
    loop = asyncio.new_event_loop()
    try:
        fleet = loop.run_until_complete(_build(size, kind))
        print("ready", flush=True)
        for line in sys.stdin:  # bounded by the coordinator's rounds; EOF ends it
            words = line.split()
            if words[:1] != ["run"]:
                break
            # What the calls so far left (a session per call, the fleet's call log) joins
            # the frozen heap: every window starts from the heap the first one met, and the
            # full passes' growing cost over a long run stays out of the later windows.
            gc.collect()
            gc.freeze()
            before = control()
            got = loop.run_until_complete(fleet.window(float(words[1])))
            got["control_before"], got["control_after"] = before, control()
            got["control_ms"] = (before + got["control_after"]) / 2
            print(json.dumps(got), flush=True)
        loop.run_until_complete(fleet.aclose())
    finally:
        loop.close()


async def _build(size: int, kind: str) -> _Fleet:
    fleet = _Fleet(size, kind)
    await fleet.window(WARM_UP)
    return fleet


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class Worker:
    """A worker process of checkout `code` (its own interpreter and its own code)."""

    def __init__(self, code: Path, python: str, size: int, kind: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = str(code)
        self.code, self.size, self.kind = code, size, kind
        self.built = False
        self.proc = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--serve", str(size), kind],
            cwd=code,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _line(self, timeout: float) -> str:
        out: IO[str] = self.proc.stdout  # type: ignore[assignment]
        ready, _, _ = select.select([out], [], [], timeout)
        line = out.readline() if ready else ""
        if not line:
            self.close()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise SystemExit(
                f"sim_inproc: the worker of {self.code} ({self.size} peers, {self.kind}) "
                f"stopped or took over {timeout:g} s:\n{err[-2000:]}"
            )
        return line

    def ready(self) -> None:
        """Wait for the worker's fleet to be built (once)."""
        if not self.built:
            self._line(BUILD_TIMEOUT)
            self.built = True

    def window(self, seconds: float) -> dict[str, float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {seconds}\n")
        self.proc.stdin.flush()
        got: dict[str, float] = json.loads(self._line(seconds + WINDOW_TIMEOUT))
        return got

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.write("quit\n")
                    self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def control() -> float:
    """CPU ms of a fixed pure-Python loop: the machine's speed just now, whatever we run.

    The loop touches no memory to speak of (one small int), so what moves its time is the
    core it runs on: on this VM it takes 1.0 ms in some moments and 1.6 to 1.9 ms in others,
    an idle machine and no other process of ours running (docs/benchmarks.md, "Round eight").
    """
    started = time.process_time()
    x = 0
    for i in range(CONTROL_LOOPS):
        x = (x * 31 + i) & 0xFFFF
    return 1000 * (time.process_time() - started)


def alternate(
    workers: dict[Any, Worker],
    comparisons: list[tuple[Any, Any]],
    pairs: int,
    seconds: float,
    show: bool = True,
) -> dict[tuple[Any, Any], list[tuple[dict[str, float], dict[str, float]]]]:
    """`pairs` adjacent pairs of windows of `seconds` for each (small, large) comparison:
    the two workers of a pair run one right after the other, so both meet the machine in
    the same state; which goes first alternates pair by pair, and the comparisons take
    turns, their order rotated each pair. Every worker is built (one at a time, so none
    builds while another measures) before the first window."""
    for worker in workers.values():
        worker.ready()
    got: dict[tuple[Any, Any], list[tuple[dict[str, float], dict[str, float]]]] = {
        c: [] for c in comparisons
    }
    for p in range(pairs):
        turn = comparisons[p % len(comparisons) :] + comparisons[: p % len(comparisons)]
        line = []
        for small, large in turn:
            if p % 2:
                b = workers[large].window(seconds)
                a = workers[small].window(seconds)
            else:
                a = workers[small].window(seconds)
                b = workers[large].window(seconds)
            got[small, large].append((a, b))
            line.append(f"{a['cpu_ms'] / b['cpu_ms']:5.2f}")
        if show and (p % 10 == 9 or p == pairs - 1):
            print(
                f"  pair {p + 1:>3}: CPU ratios {' '.join(line)} "
                f"(control {a['control_ms']:.2f} ms; load {_load()})",
                flush=True,
            )
    return got


def _label(key: tuple[Any, ...]) -> str:
    name, kind, size = key[:3]
    replica = f" #{key[3] + 1}" if len(key) > 3 and key[3] is not None else ""
    return f"{name}, {'max_age=1' if kind == 'aged' else kind} {size:,}{replica}"


def _median_ci(values: list[float]) -> tuple[float, float, float]:
    """The median and a 95% interval for it (order statistics: ranks n/2 -+ 0.98 sqrt(n))."""
    s = sorted(values)
    n = len(s)
    half = 0.98 * math.sqrt(n)
    low, high = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
    return statistics.median(s), s[low], s[high]


def ratios(pairs: list[tuple[dict[str, float], dict[str, float]]]) -> dict[str, float]:
    """Large against small over adjacent pairs: the median of the pairs' CPU ratios (small's
    CPU per delegation over large's) with its 95% interval, of their rate ratios (large's
    over small's), the **pooled** ratios (every window's calls, CPU and time summed: what
    a median leaves out, such as a `max_age=1` refresh landing in one window of three, is
    in them)."""
    cpu = [a["cpu_ms"] / b["cpu_ms"] for a, b in pairs]
    rate = [b["rate"] / a["rate"] for a, b in pairs]
    median, low, high = _median_ci(cpu)
    calls_a, calls_b = sum(a["calls"] for a, _ in pairs), sum(b["calls"] for _, b in pairs)
    cpu_a = sum(a["cpu_ms"] * a["calls"] for a, _ in pairs) / calls_a
    cpu_b = sum(b["cpu_ms"] * b["calls"] for _, b in pairs) / calls_b
    wall_a = sum(a["calls"] / a["rate"] for a, _ in pairs)
    wall_b = sum(b["calls"] / b["rate"] for _, b in pairs)
    return {
        "pooled_rate": (calls_b / wall_b) / (calls_a / wall_a),
        "pooled_cpu": cpu_a / cpu_b,
        "n": len(pairs),
        "cpu": median,
        "cpu_low": low,
        "cpu_high": high,
        "rate": statistics.median(rate),
    }


def _python_of(code: Path) -> str:
    venv = code / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def machine(windows: list[dict[str, float]]) -> str:
    """What the control loop said over `windows`: its spread, and how the windows' CPU per
    delegation moved with it (within each worker)."""
    ctl = sorted(statistics.fmean((w["control_before"], w["control_after"])) for w in windows)
    q = [ctl[int(f * (len(ctl) - 1))] for f in (0, 0.1, 0.5, 0.9, 1)]
    return (
        f"control loop (CPU ms, before and after each window): min {q[0]:.2f}, 10% {q[1]:.2f}, "
        f"median {q[2]:.2f}, 90% {q[3]:.2f}, max {q[4]:.2f}"
    )


def compare(args: argparse.Namespace) -> None:
    here = Path(__file__).resolve().parent.parent
    checkouts = [("today", here, _python_of(here))]
    if args.baseline:
        base = Path(args.baseline).resolve()
        checkouts.insert(0, ("baseline", base, _python_of(base)))
    plan = [("fleet", size) for size in args.sizes] + [("aged", size) for size in args.aged_sizes]
    replicas = range(args.processes)
    comparisons: list[tuple[Any, Any]] = []
    for r in replicas:
        for name, _, _ in checkouts:
            for kind, sizes in (("fleet", args.sizes), ("aged", args.aged_sizes)):
                comparisons += [
                    ((name, kind, sizes[0], r), (name, kind, large, r)) for large in sizes[1:]
                ]
        if args.baseline:
            comparisons += [
                (("baseline", kind, size, r), ("today", kind, size, r)) for kind, size in plan
            ]
    print(f"load average before: {_load()}", flush=True)
    started = time.perf_counter()
    workers: dict[Any, Worker] = {}
    try:
        for r in replicas:
            for name, code, python in checkouts:
                for kind, size in plan:
                    workers[name, kind, size, r] = Worker(code, python, size, kind)
                    workers[name, kind, size, r].ready()  # one build at a time
        print(f"built in {time.perf_counter() - started:.0f} s (load {_load()})", flush=True)
        got = alternate(workers, comparisons, args.pairs, args.seconds)
    finally:
        for worker in workers.values():
            worker.close()
    print(f"load average after: {_load()} ({time.perf_counter() - started:.0f} s)")
    for name, code, _ in checkouts:
        print(f"{name}: {code}")
    windows: dict[Any, list[dict[str, float]]] = {key: [] for key in workers}
    for (small, large), pairs in got.items():
        for a, b in pairs:
            windows[small].append(a)
            windows[large].append(b)
    every = [w for ws in windows.values() for w in ws]
    print(f"\n{args.pairs} adjacent pairs of {args.seconds:g} s windows, {IN_FLIGHT} in flight")
    print(machine(every))
    print(
        f"{'configuration':<28} {'windows':>8} {'median/s':>9} {'median CPU ms':>14} "
        f"{'median gc ms':>13} {'CPU ~ control (r)':>18}"
    )
    for key, ws in windows.items():
        ctl = [statistics.fmean((w["control_before"], w["control_after"])) for w in ws]
        r = statistics.correlation(ctl, [w["cpu_ms"] for w in ws]) if len(ws) > 2 else math.nan
        print(
            f"{_label(key):<28} {len(ws):>8} {statistics.median(w['rate'] for w in ws):>9.1f} "
            f"{statistics.median(w['cpu_ms'] for w in ws):>14.3f} "
            f"{statistics.median(w['gc_ms'] for w in ws):>13.3f} {r:>18.2f}"
        )
    print()
    across: dict[tuple[Any, Any], list[dict[str, float]]] = {}
    for (small, large), pairs in got.items():
        r = ratios(pairs)
        against = f"{small[2]:,} peers" if small[0] == large[0] else "baseline"
        name = _label(large) if small[0] == large[0] else f"today / baseline, {_label(large)[7:]}"
        print(
            f"{name} / {against}: paired CPU {r['cpu']:.3f} (95% {r['cpu_low']:.3f} to "
            f"{r['cpu_high']:.3f}), paired rate {r['rate']:.3f}; pooled rate "
            f"{r['pooled_rate']:.3f}, CPU {r['pooled_cpu']:.3f} ({r['n']:.0f} pairs)"
        )
        across.setdefault((small[:3], large[:3]), []).append(r)
    if args.processes > 1:
        print(f"\nacross {args.processes} processes per configuration (each read as above):")
        for (small, large), rs in across.items():
            against = f"{small[2]:,} peers" if small[0] == large[0] else "baseline"
            name = _label(large) if small[0] == large[0] else f"today / baseline, {large[1]}"
            cpu = [r["cpu"] for r in rs]
            rate = [r["rate"] for r in rs]
            pooled = [r["pooled_rate"] for r in rs]
            print(
                f"{name} / {against}: mean paired CPU {statistics.fmean(cpu):.3f} "
                f"(the processes' {min(cpu):.3f} to {max(cpu):.3f}), "
                f"mean paired rate {statistics.fmean(rate):.3f}, mean pooled rate "
                f"{statistics.fmean(pooled):.3f} ({min(pooled):.3f} to {max(pooled):.3f})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="another checkout (with its own .venv) to compare")
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--seconds", type=float, default=WINDOW)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 10_000, 100_000])
    parser.add_argument(
        "--aged-sizes",
        type=int,
        nargs="*",
        default=[10, 10_000],
        help="sizes measured through HubDirectory(max_age=1) too (none: --aged-sizes)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="worker processes per configuration, each read on its own, then averaged",
    )
    parser.add_argument("--serve", nargs=2, metavar=("SIZE", "KIND"), help="run as a worker")
    args = parser.parse_args()
    if args.serve:
        if args.serve[1] not in KINDS:
            raise SystemExit(f"sim_inproc: KIND must be one of {', '.join(KINDS)}")
        serve(int(args.serve[0]), args.serve[1])
    else:
        compare(args)


if __name__ == "__main__":
    main()
