"""Running an experiment: trials in one event loop, or on any `concurrent.futures.Executor`.

The invariants:

- A trial's row reaches the store as soon as the trial ends, in the run's
  own thread (one writer, whatever ran the trial), and a rerun starts only
  the trials whose keys the store does not hold.
- Stopping (Ctrl-C, a kernel interrupt, a budget) never loses a row that
  arrived: the store is closed and the rows so far are returned as `Results`
  whose ``stopped`` says why.
- Every fleet a trial builds is closed before its row is returned: a run of
  10,000 trials holds the fleets of the trials in flight, not of the past.

Scale-out is the executor's, never a scheduler of ours: trials go in chunks
(`chunk_size`) to ``executor.submit``; each chunk runs its trials in an event
loop of its own in the worker and sends back rows. Before the first chunk a
probe task carries the scenario to a worker and back, so a scenario that
cannot be pickled, or whose functions the worker cannot import, fails before
any trial with the fix in the message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from coreagent_sdk import FakeClock
from coreagent_sdk.errors import CallPeerError, CoreAgentError, PeerTurnError

from ._budget import Budget, Tally
from ._meta import describe, order
from ._results import Results
from ._scenario import Experiment, Outcome, Scenario, Trial, params_text
from ._store import open_store

__all__ = ["ScenarioError", "arun", "run", "run_trial"]

_MAX_ANSWER = 4000  # characters of an answer kept in the table
_MAX_ERROR = 500


class ScenarioError(CoreAgentError):
    """A scenario's own code failed (its build or a scorer), or it cannot reach the workers.

    In IPython it shows as the cell's frames and the message, not the run's
    machinery (as every `CoreAgentError` does); the cause stays on ``__cause__``.
    """


_UNPRICED = "_unpriced"  # a row's note to the run: its trial used a model the table lacks
_HUB = "hub"  # the fleet's own hub daemon: no peer of a scenario's


def _cut(text: str | None, most: int) -> str | None:
    if text is None or len(text) <= most:
        return text
    return text[:most] + f"... (cut: {len(text)} characters)"


def _tokens(fleet: Any) -> dict[str, tuple[int, int]]:
    used: dict[str, tuple[int, int]] = {}
    for name, daemon in fleet.daemons.items():
        sessions = list(getattr(daemon, "sessions", {}).values())
        tin = sum(int(getattr(s, "tokens_in", 0) or 0) for s in sessions)
        tout = sum(int(getattr(s, "tokens_out", 0) or 0) for s in sessions)
        if tin or tout:
            used[name] = (tin, tout)
    return used


async def _built(scenario: Scenario, trial: Trial) -> Any:
    try:
        made = scenario.build(trial)
        if inspect.isawaitable(made):
            made = await made
    except Exception as exc:
        raise ScenarioError(
            f"experiments: {scenario.name!r}'s build raised {type(exc).__name__}: {exc} "
            f"(trial {trial.key!r}); fix build() and run again: the trials done are kept"
        ) from exc
    if not hasattr(made, "call_peer") or not hasattr(made, "calls"):
        raise ScenarioError(
            f"experiments: {scenario.name!r}'s build returned {made!r}, not a Fleet; "
            "return the fleet it built"
        )
    if trial.clock is not None and made.clock is not trial.clock:
        raise ScenarioError(
            f"experiments: {scenario.name!r} asks for a FakeClock (fake_clock=True) but its "
            "build made a fleet on another clock; build it with Fleet(clock=trial.clock)"
        )
    return made


def _check_peers(scenario: Scenario, fleet: Any) -> None:
    peers = sorted(n for n in fleet.daemons if n != _HUB)
    named = [("entry", scenario.entry)]
    for case in scenario.cases:
        if case.entry is not None:
            named.append((f"case {case.name!r}'s entry", case.entry))
        if case.expected_peer is not None:
            named.append((f"case {case.name!r}'s expected_peer", case.expected_peer))
    wrong = [(what, name) for what, name in named if name not in peers]
    if wrong:
        said = "; ".join(f"{what} {name!r}" for what, name in wrong)
        raise ScenarioError(
            f"experiments: {scenario.name!r} names peers its first trial's fleet does not have "
            f"({said}; the fleet has: {', '.join(map(repr, peers)) or 'no peers'}); fix the "
            "names in the Scenario or its Cases. No other trial was run."
        )


async def run_trial(scenario: Scenario, trial: Trial, *, check_peers: bool = False) -> Outcome:
    """Build the trial's fleet, ask its case, read the outcome, close the fleet.

    ``check_peers``: first check that the fleet has the scenario's entry peer and every
    case's ``entry`` and ``expected_peer`` (a run does so on its first trial), raising
    `ScenarioError` naming the missing ones instead of asking.
    """
    fleet = await _built(scenario, trial)
    try:
        if check_peers:
            _check_peers(scenario, fleet)
        options = dict(scenario.call_options(trial.params)) if scenario.call_options else {}
        options.setdefault("timeout", scenario.timeout)
        tool = fleet.call_peer(**options)
        entry = trial.case.entry or scenario.entry
        answer: str | None = None
        kind: str | None = None
        error: str | None = None
        truncated = False
        started = time.perf_counter()
        try:
            result = await tool.acall(peer=entry, prompt=trial.case.prompt)
        except PeerTurnError as exc:
            kind, error = exc.kind, str(exc)
        except CallPeerError as exc:
            kind, error = type(exc).__name__, str(exc)
        else:
            answer, truncated = result.response, result.truncated
        duration_ms = (time.perf_counter() - started) * 1000
        tree = fleet.calls.tree()
        used = _tokens(fleet)
    finally:
        await fleet.aclose()
    tokens_in = sum(i for i, _ in used.values())
    tokens_out = sum(o for _, o in used.values())
    # Priced per model round by the model that made it (the record's steps), as the call
    # records' own usage is: a peer that ran no model costs nothing. A model the table
    # lacks is said (the run stops on it), never a KeyError thrown through the run.
    cost: float | None = None
    unpriced: str | None = None
    if scenario.prices is not None:
        try:
            cost = tree.usage(scenario.prices).cost_usd
        except KeyError as exc:
            unpriced = str(exc.args[0]) if exc.args else str(exc)
    return Outcome(
        trial, answer, kind, _cut(error, _MAX_ERROR), tree, duration_ms,
        tokens_in, tokens_out, cost, truncated, unpriced,
    )  # fmt: skip


def _plain(value: Any) -> Any:
    # numpy's scalars (np.bool_, np.int64, np.float64) are what a scorer computing with
    # numpy returns; .item() gives the Python value, which JSON and the checks know.
    if not isinstance(value, (bool, int, float)) and hasattr(value, "item"):
        try:
            return value.item()
        except (TypeError, ValueError):
            return value
    return value


def _score(scenario: Scenario, outcome: Outcome) -> dict[str, Any]:
    scores: dict[str, Any] = {}
    for name, scorer in scenario.scorers.items():
        try:
            value = _plain(scorer(outcome))
        except Exception as exc:
            raise ScenarioError(
                f"experiments: scorer {name!r} raised {type(exc).__name__}: {exc} "
                f"(trial {outcome.trial.key!r}); fix the scorer and run again"
            ) from exc
        if value is not None and not isinstance(value, (bool, int, float)):
            raise ScenarioError(
                f"experiments: scorer {name!r} returned {value!r}; a scorer returns a bool "
                "(a check), a number (a metric) or None (does not apply)"
            )
        scores[name] = value
    return scores


def _steady(text: str | None, sessions: list[str]) -> str | None:
    # Session ids are random on every run (unguessable by design); an answer or an error that
    # quotes one (a failed delegation's message does) would differ between two runs of the
    # same trial. The table shows them as *, as a recording does; the tree keeps them.
    if text is None:
        return None
    for session in sessions:
        text = text.replace(session, "*")
    return text


def row_of(scenario: Scenario, outcome: Outcome) -> dict[str, Any]:
    """One row of the table: the key, the parameters, each score, and what the trial did."""
    trial = outcome.trial
    sessions = sorted({r.session_id for r in outcome.tree.records if r.session_id}, key=len)[::-1]
    scores = _score(scenario, outcome)
    checks = [v for v in scores.values() if isinstance(v, bool)]
    asked = outcome.asked
    return {
        "scenario": trial.scenario,
        "params": params_text(trial.params),
        **trial.params,
        "case": trial.case.name,
        "seed": trial.seed,
        "repetition": trial.repetition,
        "passed": all(checks),
        **scores,
        "answer": _cut(_steady(outcome.answer, sessions), _MAX_ANSWER),
        "error_kind": outcome.error_kind,
        "error": _steady(outcome.error, sessions),
        "duration_ms": round(outcome.duration_ms, 3),
        "tokens_in": outcome.tokens_in,
        "tokens_out": outcome.tokens_out,
        "cost": outcome.cost,
        "calls": len(outcome.tree.records),
        "depth": outcome.tree.depth(),
        "delegations": outcome.delegations,
        "truncations": outcome.truncations,
        "failed_calls": outcome.failed_calls,
        "asked": asked[0] if asked else None,
        "expected_peer": trial.case.expected_peer,
        "tree": json.dumps([attrs.asdict(r) for r in outcome.tree.records]),
        **({_UNPRICED: outcome.unpriced} if outcome.unpriced is not None else {}),
    }


def _trial(scenario: Scenario, spec: tuple[Any, ...], recordings: Path | None) -> Trial:
    params, case_name, repetition, seed = spec
    case = next(c for c in scenario.cases if c.name == case_name)
    clock = FakeClock() if scenario.fake_clock else None
    return Trial(scenario.name, params, case, repetition, seed, clock, recordings)


async def _row(scenario: Scenario, trial: Trial, first: bool = False) -> dict[str, Any]:
    return row_of(scenario, await run_trial(scenario, trial, check_peers=first))


async def _chunk_async(
    scenario: Scenario,
    specs: list[tuple[Any, ...]],
    concurrency: int,
    recordings: Path | None,
    first: bool,
) -> list[dict[str, Any]]:
    slots = asyncio.Semaphore(concurrency)

    async def one(spec: tuple[Any, ...]) -> dict[str, Any]:
        async with slots:
            return await _row(scenario, _trial(scenario, spec, recordings), first)

    return list(await asyncio.gather(*(one(s) for s in specs)))


def run_chunk(
    scenario: Scenario,
    specs: list[tuple[Any, ...]],
    concurrency: int,
    recordings: str | None,
    first: bool = False,
) -> list[dict[str, Any]]:
    """Run some trials in a worker (an event loop of its own) and return their rows."""
    where = Path(recordings) if recordings else None
    return asyncio.run(_chunk_async(scenario, specs, concurrency, where, first))


def probe(scenario: Scenario) -> str:
    """A worker's answer once the scenario reached it: its name."""
    return scenario.name


class _Stop:
    """Why the run stops (None: it does not), settable from any thread."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind(self) -> asyncio.Event:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        if self.reason is not None:
            self._event.set()
        return self._event

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        loop, event = self._loop, self._event
        if loop is not None and event is not None:
            # A loop already closed means the run is over anyway.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)


class _Pace:
    """At most `rate` starts a second (None: no limit), spaced evenly."""

    def __init__(self, rate: float | None) -> None:
        if rate is not None and (isinstance(rate, bool) or not rate > 0 or math.isinf(rate)):
            raise ValueError(f"experiments: rate must be starts per second > 0, got {rate!r}")
        self.gap = 1.0 / rate if rate else 0.0
        self.next = 0.0

    async def wait(self) -> None:
        if not self.gap:
            return
        now = time.monotonic()
        if self.next > now:
            await asyncio.sleep(self.next - now)
        self.next = max(now, self.next) + self.gap


class _SavedLine:
    """A file tqdm writes its bar to, shown in a notebook as one display updated in place.

    tqdm's notebook widget is saved with the text it had when it was first shown
    ("0% 0/300"): a saved notebook, nbconvert and the docs site never see it move.
    A display with an id, updated in place, is saved as it was last updated: the
    final count.
    """

    def __init__(self, display: Any) -> None:
        self._display = display
        self._handle: Any = None

    def write(self, text: str) -> None:
        line = text.strip("\r\n").rstrip()
        if not line:
            return
        shown = {"text/plain": line}
        if self._handle is None:
            self._handle = self._display.display(shown, raw=True, display_id=True)
        else:
            self._handle.update(shown, raw=True)

    def flush(self) -> None:
        pass


def _in_kernel() -> Any:
    import sys

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def _progress(progress: bool | None, total: int, initial: int, desc: str) -> Any:
    if progress is False:
        return None
    try:
        from tqdm.std import tqdm
    except ImportError:
        if progress:
            raise ImportError(
                "experiments: progress=True needs tqdm: pip install 'coreagent-sdk[experiments]'"
            ) from None
        return None
    if _in_kernel():
        import IPython.display

        return tqdm(total=total, initial=initial, desc=desc, unit="trial", ncols=100,
                    file=_SavedLine(IPython.display), mininterval=0.5)  # fmt: skip
    return tqdm(total=total, initial=initial, desc=desc, unit="trial", dynamic_ncols=True)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"experiments: {name} must be a whole number >= 1, got {value!r}")
    return value


@attrs.frozen
class _Options:
    executor: concurrent.futures.Executor | None
    concurrency: int
    budget: Budget
    progress: bool | None
    rate: float | None
    recordings: Path | None
    chunk_size: int


async def _run(
    experiment: Experiment, path: str | os.PathLike[str] | None, opts: _Options, stop: _Stop
) -> Results:
    scenario = experiment.scenario
    if opts.budget.cost is not None and scenario.prices is None:
        raise ValueError(
            "experiments: Budget(cost=...) needs the scenario's prices "
            "(Scenario(..., prices=PriceTable({...}))) to count dollars"
        )
    # The file first: one that is not this experiment's is refused before a worker is
    # asked or a trial paid for.
    store = open_store(path, describe(experiment))
    try:
        if opts.executor is not None:
            await _probe(opts.executor, scenario)
    except BaseException:
        store.close()
        raise
    event = stop.bind()
    unpriced: list[str] = []
    tally = Tally(opts.budget)
    done = store.keys()
    skipped = sum(1 for t in experiment.trials() if t.key in done)
    todo = (t for t in experiment.trials() if t.key not in done)
    bar = _progress(opts.progress, len(experiment), skipped, scenario.name)
    deadline = (
        time.monotonic() + opts.budget.wall_time if opts.budget.wall_time is not None else None
    )

    def arrived(row: dict[str, Any]) -> None:
        missing = row.pop(_UNPRICED, None)
        if missing is not None:
            # Not stored: a row without its cost would be skipped, wrong, by every rerun.
            # The run stops as a budget does (the trials running finish and are kept).
            unpriced.append(f"{missing} (trial {row_key_text(row)})")
            stop.stop("unpriced model")
            return
        store.add(row)
        tally.add(row)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(failed=tally.failures, refresh=False)
        reached = tally.reached()
        if reached is not None:
            stop.stop(reached)

    try:
        if opts.executor is None:
            await _in_process(scenario, todo, opts, stop, event, deadline, arrived)
        else:
            await _on_executor(scenario, todo, opts, stop, event, deadline, arrived)
    finally:
        if bar is not None:
            if stop.reason:
                bar.set_postfix(failed=tally.failures, stopped=stop.reason, refresh=False)
            bar.close()
        rows = order(store.record, store.rows())
        where, record = store.path, store.record
        store.close()
    if unpriced:
        raise ScenarioError(
            f"experiments: {scenario.name!r}'s price table lacks a model its trials used: "
            f"{unpriced[0]}. The run stopped; the {len(rows)} trials done are kept"
            + (f" in {str(where)!r}" if where else "")
            + ": add the model to Scenario(prices=...) and run again"
        )
    return Results(rows, stopped=stop.reason, skipped=skipped, path=where, experiment=record)


def row_key_text(row: dict[str, Any]) -> str:
    return f"{row['params']}, case {row['case']!r}, repetition {row['repetition']}"


def _wait_timeout(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


async def _drive(
    starts: Iterator[Callable[[], asyncio.Future[Any]]],
    most: int,
    pace: _Pace,
    stop: _Stop,
    event: asyncio.Event,
    deadline: float | None,
    deliver: Callable[[Any], None],
) -> None:
    """Keep up to `most` units (trials, or chunks on an executor) in flight until done or stopped.

    On an interrupt or the wall-time deadline the units in flight are cancelled and not
    recorded (a chunk an executor has not started never runs: cancelling the asyncio side
    cancels the executor's future); on a spent budget no unit starts and those in flight
    finish.
    """
    inflight: set[asyncio.Future[Any]] = set()
    stopped: asyncio.Future[Any] = asyncio.ensure_future(event.wait())
    exhausted = False
    # The first unit runs alone: it checks the scenario's peers against a real fleet and
    # prices a real trial, so a typo or a missing price stops the run after one trial.
    piloted = False
    try:
        while True:
            while (
                not exhausted and stop.reason is None and len(inflight) < (most if piloted else 1)
            ):
                start = next(starts, None)
                if start is None:
                    exhausted = True
                    break
                await pace.wait()
                inflight.add(start())
            if not inflight:
                return
            finished, _ = await asyncio.wait(
                {*inflight, *([] if stopped.done() else [stopped])},
                timeout=_wait_timeout(deadline),
                return_when=asyncio.FIRST_COMPLETED,
            )
            for done in finished:
                if done is stopped:
                    continue
                inflight.discard(done)
                piloted = True
                deliver(done.result())  # a ScenarioError propagates: the run stops
            if deadline is not None and time.monotonic() >= deadline:
                stop.stop("budget: wall time")
            if stop.reason is not None and stop.reason.startswith(("interrupted", "budget: wall")):
                return
    finally:
        stopped.cancel()
        for unit in inflight:
            unit.cancel()
        if inflight:
            await asyncio.gather(*inflight, return_exceptions=True)


async def _in_process(
    scenario: Scenario,
    todo: Iterator[Trial],
    opts: _Options,
    stop: _Stop,
    event: asyncio.Event,
    deadline: float | None,
    arrived: Callable[[dict[str, Any]], None],
) -> None:
    def starts() -> Iterator[Callable[[], asyncio.Future[Any]]]:
        first = True
        for trial in todo:
            if scenario.fake_clock:
                trial = attrs.evolve(trial, clock=FakeClock())
            if opts.recordings is not None:
                trial = attrs.evolve(trial, recordings=opts.recordings)
            yield functools.partial(asyncio.ensure_future, _row(scenario, trial, first))
            first = False

    await _drive(starts(), opts.concurrency, _Pace(opts.rate), stop, event, deadline, arrived)


def _chunks(todo: Iterator[Trial], size: int) -> Iterator[list[tuple[Any, ...]]]:
    chunk: list[tuple[Any, ...]] = []
    for trial in todo:
        chunk.append((dict(trial.params), trial.case.name, trial.repetition, trial.seed))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _unpicklable(scenario: Scenario, exc: BaseException) -> ScenarioError:
    return ScenarioError(
        f"experiments: the scenario {scenario.name!r} cannot reach the executor's workers "
        f"({type(exc).__name__}: {_cut(str(exc), 300)}). Everything a scenario holds (build, "
        "scorers, call_options) is pickled to each worker: define those functions at the top "
        "level of an importable module (a .py file beside the notebook, imported), not as "
        "lambdas, closures or functions of a notebook cell; or run it on dask "
        "(executor=client.get_executor()), which sends a notebook's functions by value; or "
        "run it without executor=. No trial was run."
    )


async def _probe(executor: concurrent.futures.Executor, scenario: Scenario) -> None:
    try:
        future = executor.submit(probe, scenario)
        await asyncio.wrap_future(future)
    except Exception as exc:
        raise _unpicklable(scenario, exc) from exc


async def _on_executor(
    scenario: Scenario,
    todo: Iterator[Trial],
    opts: _Options,
    stop: _Stop,
    event: asyncio.Event,
    deadline: float | None,
    arrived: Callable[[dict[str, Any]], None],
) -> None:
    executor = opts.executor
    assert executor is not None
    workers = getattr(executor, "_max_workers", None) or 4
    per_chunk = min(opts.concurrency, opts.chunk_size)
    recordings = str(opts.recordings) if opts.recordings is not None else None

    def submit(chunk: list[tuple[Any, ...]], first: bool) -> asyncio.Future[Any]:
        return asyncio.wrap_future(
            executor.submit(run_chunk, scenario, chunk, per_chunk, recordings, first)
        )

    def starts() -> Iterator[Callable[[], asyncio.Future[Any]]]:
        # The first trial goes alone (see _drive), the rest in chunks.
        pilot = next(_chunks(todo, 1), None)
        if pilot is None:
            return
        yield functools.partial(submit, pilot, True)
        for chunk in _chunks(todo, opts.chunk_size):
            yield functools.partial(submit, chunk, False)

    def deliver(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            arrived(row)

    pace = _Pace(opts.rate / opts.chunk_size if opts.rate else None)
    await _drive(starts(), max(2, 2 * int(workers)), pace, stop, event, deadline, deliver)


def _options(
    executor: concurrent.futures.Executor | None = None,
    concurrency: int = 8,
    budget: Budget | None = None,
    progress: bool | None = None,
    rate: float | None = None,
    recordings: str | os.PathLike[str] | None = None,
    chunk_size: int = 25,
) -> _Options:
    if executor is not None and not isinstance(executor, concurrent.futures.Executor):
        raise TypeError(
            f"experiments: executor must be a concurrent.futures.Executor (a "
            f"ProcessPoolExecutor, or a dask Client's client.get_executor()), got {executor!r}"
        )
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"experiments: budget must be a Budget(...), got {budget!r}")
    _Pace(rate)  # checks it
    return _Options(
        executor,
        _positive_int("concurrency", concurrency),
        budget or Budget(),
        progress,
        rate,
        Path(recordings) if recordings is not None else None,
        _positive_int("chunk_size", chunk_size),
    )


async def arun(
    experiment: Experiment, path: str | os.PathLike[str] | None = None, **options: Any
) -> Results:
    """`run` from async code: ``await arun(experiment, path, ...)``.

    Cancelling the awaiting task stops the run as an interrupt does; prefer
    the sync `run` in a notebook, where the kernel's interrupt reaches it.
    """
    stop = _Stop()
    try:
        return await _run(experiment, path, _options(**options), stop)
    except asyncio.CancelledError:
        raise


def run(
    experiment: Experiment, path: str | os.PathLike[str] | None = None, **options: Any
) -> Results:
    """Run the trials of `experiment` that `path` does not hold yet; return every row as `Results`.

    Args:
        experiment: The `Experiment`.
        path: A SQLite file the rows go to as they arrive (created if missing).
            Run again with the same path and only the trials not in it run.
            None: rows in memory only.

    Other Parameters:
        executor (concurrent.futures.Executor | None): Any `concurrent.futures.Executor`
            (a `ProcessPoolExecutor`, a dask ``client.get_executor()``); None (default):
            this process, one event loop.
        concurrency (int): Trials in flight at once in this process (default 8); on an
            executor, trials at once inside each chunk.
        budget (Budget | None): A `Budget` (tokens, cost, wall time) that stops the run
            cleanly.
        progress (bool | None): A tqdm progress bar (in Jupyter a line updated in place,
            which a saved notebook keeps at its final count; text in a terminal);
            None (default): shown when tqdm is installed.
        rate (float | None): Trials started per second at most (real models' rate limits);
            None: no limit.
        recordings (str | os.PathLike[str] | None): A folder where each trial's
            `Trial.recorded` models record their exchanges on the first run and replay
            them on later ones.
        chunk_size (int): Trials per task sent to an executor (default 25).

    Ctrl-C (a kernel interrupt) stops the run: the trials done are kept and
    returned, ``results.stopped == "interrupted"``; a second Ctrl-C leaves at once.
    """
    opts = _options(**options)
    stop = _Stop()
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def target() -> None:
        try:
            outcome["results"] = asyncio.run(_run(experiment, path, opts, stop))
        except BaseException as exc:  # carried to the caller's thread
            outcome["error"] = exc
        finally:
            finished.set()

    # The run has a thread and a loop of its own, so a notebook's running loop is no
    # obstacle and the caller's thread is free to receive Ctrl-C while it waits.
    worker = threading.Thread(target=target, name="experiment-run", daemon=True)
    worker.start()
    # An Event, not worker.join(): a KeyboardInterrupt inside join() can leave the thread
    # looking finished while it still runs (CPython issue 90882).
    while not finished.is_set():
        try:
            finished.wait(0.2)
        except KeyboardInterrupt:
            if stop.reason == "interrupted":
                raise  # the second one: leave now
            stop.stop("interrupted")
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    results: Results = outcome["results"]
    return results
