"""An experiment is data: a `Scenario` (how to build a fleet, what to ask, how to score), a grid.

The invariant this module serves: a trial is fully named by its key,
(scenario, parameters, case, seed, repetition), and everything a trial does
follows from that key. The seed is derived from the experiment's seed and the
rest of the key with SHA-256 (never Python's `hash`, which differs between
processes), so the same trial gets the same seed in a notebook, in a process
pool and on a dask worker, and a rerun can tell what is already done.

Parameters are JSON values (names, numbers, strings, lists of them): they go
into keys, files and tables. A setting that needs an object (a model, a
behaviour) is named by a parameter and made by the scenario's `build`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from coreagent_sdk import CallTree, FakeClock, PriceTable, quote_name
from coreagent_sdk.models import Model, RecordingModel, ReplayModel

if TYPE_CHECKING:
    from simulator._fleet import Fleet

__all__ = ["Case", "Experiment", "Outcome", "Scenario", "Scorer", "Trial"]

# The table's own columns: a parameter may not take one of these names.
RESERVED = frozenset(
    {
        "scenario", "params", "case", "seed", "repetition", "passed", "answer", "error_kind",
        "error", "duration_ms", "tokens_in", "tokens_out", "cost", "calls", "depth",
        "delegations", "truncations", "failed_calls", "asked", "expected_peer", "tree",
        "started", "index",
    }
)  # fmt: skip


def params_text(params: Mapping[str, Any]) -> str:
    """The canonical JSON of a setting: its part of a trial's key."""
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _frozen(value: Mapping[str, Any]) -> Mapping[str, Any]:
    # A copy, so the caller's later edits do not reach a value already used in keys; a
    # dict (not a mappingproxy, which pickle refuses) so the value can go to a worker.
    return dict(value)


@attrs.frozen
class Case:
    """One question a trial asks, and what a right outcome looks like.

    Attributes:
        name: The case's name, unique in its scenario (part of each trial's key).
        prompt: What the entry peer is asked.
        expected: Text the answer must contain (case-insensitive), or None: not scored.
        expected_peer: The peer the entry should delegate to first, or None: not scored.
        entry: The peer asked; None: the scenario's `entry`.
        metadata: Anything else a scorer wants to read (JSON values).
    """

    name: str
    prompt: str
    expected: str | None = None
    expected_peer: str | None = None
    entry: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen, hash=False)


@attrs.frozen(eq=False)
class Trial:
    """One run of one case in one setting: what `Scenario.build` is given.

    Attributes:
        scenario: The scenario's name.
        params: The setting (parameter name -> JSON value).
        case: The case asked.
        repetition: Which of the k repetitions (0-based).
        seed: This trial's seed, derived from the experiment's seed and the rest of the key.
        rng: A `random.Random(seed)` for the builder's own draws (a fault this time or not).
        clock: A fresh `FakeClock` when the scenario asks for one (``fake_clock=True``),
            else None; pass it on: ``Fleet(clock=trial.clock)``.
        recordings: The folder of this run's model recordings, or None (see `recorded`).
    """

    scenario: str
    params: Mapping[str, Any] = attrs.field(converter=_frozen)
    case: Case
    repetition: int
    seed: int
    clock: FakeClock | None = None
    recordings: Path | None = None
    rng: random.Random = attrs.field(init=False)

    @rng.default
    def _rng(self) -> random.Random:
        return random.Random(self.seed)

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        """(scenario, parameters as JSON, case name, seed, repetition)."""
        return (self.scenario, params_text(self.params), self.case.name, self.seed, self.repetition)

    def recorded(self, name: str, model: Model | Callable[[], Model]) -> Model:
        """`model` recorded on the first run of this trial, replayed offline on every later one.

        ``name`` tells the trial's models apart (one per peer, say). Without
        ``run(recordings=...)`` this is `model` itself. `model` may be a
        function making the model, so a replayed run never constructs it (no
        API key needed offline).
        """
        made = model if not callable(model) or hasattr(model, "complete") else None
        if self.recordings is None:
            return made if made is not None else model()  # type: ignore[operator]
        digest = hashlib.sha256(repr(self.key).encode()).hexdigest()[:24]
        path = self.recordings / f"{digest}-{_safe(name)}.json"
        if path.exists():
            return ReplayModel(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        real = made if made is not None else model()  # type: ignore[operator]
        return RecordingModel(real, path)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:64] or "model"


@attrs.frozen
class Outcome:
    """What one trial did: the answer or the error, the call tree, tokens, cost, time.

    Scorers read it. The tree holds every call the trial's fleet carried: the
    entry call is its root and the entry's delegations its children.

    Attributes:
        trial: The trial.
        answer: The entry peer's answer, or None when the call failed.
        error_kind: How the call failed (a turn error's kind, or the error's class name).
        error: The error's message (bounded), or None.
        tree: The fleet's calls as a `CallTree`.
        duration_ms: The entry call's wall time, in milliseconds.
        tokens_in: Input tokens every peer of the fleet reported, together.
        tokens_out: Output tokens, together.
        cost: Dollars by the scenario's price table, or None without one.
        truncated: Whether the entry's answer was cut at the caller's byte cap.
        unpriced: The price table's message when a model the trial used has no price
            (then ``cost`` is None and the run stops), else None.
    """

    trial: Trial
    answer: str | None
    error_kind: str | None
    error: str | None
    tree: CallTree
    duration_ms: float
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None
    truncated: bool = False
    unpriced: str | None = None

    @property
    def case(self) -> Case:
        """The trial's case."""
        return self.trial.case

    @property
    def asked(self) -> list[str]:
        """The peers the entry peer's turn called, in the order it called them."""
        roots = self.tree.roots()
        if not roots:
            return []
        return [r.peer for r in self.tree.children(roots[0].call_id)]

    @property
    def delegations(self) -> int:
        """Calls made by a peer's turn (every call but the entry's own)."""
        return sum(1 for r in self.tree.records if r.parent is not None)

    @property
    def truncations(self) -> int:
        """Calls whose answer was cut at their caller's byte cap."""
        return sum(1 for r in self.tree.records if r.truncated)

    @property
    def failed_calls(self) -> int:
        """Calls that failed, anywhere in the tree."""
        return sum(1 for r in self.tree.records if r.state == "failed")


Scorer = Callable[[Outcome], "bool | float | None"]
"""A function of an `Outcome`: a bool (a check), a number (a metric) or None (not applicable)."""

Builder = Callable[[Trial], "Fleet | Awaitable[Fleet]"]


def _default_scorers() -> Mapping[str, Scorer]:
    from ._scorers import answer_contains, no_error, routed

    return {"right_answer": answer_contains, "right_peer": routed, "no_error": no_error}


def _cases(value: Sequence[Case] | Case) -> tuple[Case, ...]:
    cases = (value,) if isinstance(value, Case) else tuple(value)
    for case in cases:
        if not isinstance(case, Case):
            raise TypeError(f"Scenario: cases must be Case values, got {case!r}")
    names = [c.name for c in cases]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(
            f"Scenario: case names are part of each trial's key and must be unique; "
            f"repeated: {', '.join(map(quote_name, repeated))}"
        )
    if not cases:
        raise ValueError("Scenario: give at least one Case(name, prompt, ...)")
    return cases


@attrs.frozen
class Scenario:
    """How to build the fleet of one trial, what to ask it, and how to score the outcome.

    ```python
    def build(trial):
        fleet = Fleet(clock=trial.clock)
        fleet.add_peer("router", behaviors.model(router_model(trial.params["persona"])))
        ...
        return fleet

    scenario = Scenario("routing", build, cases=[Case("disk", "Is the disk full?",
                        expected="81%", expected_peer="storage")], entry="router")
    ```

    To run on a process pool or a dask cluster, `build`, the scorers and
    `call_options` must be picklable: functions defined at the top level of
    an importable module (a notebook's functions work with dask, whose
    cloudpickle sends them by value, and with a process pool only where it
    forks). `Experiment.run` checks this before the first trial.

    Attributes:
        name: The scenario's name (part of each trial's key).
        build: ``build(trial) -> Fleet`` (or an awaitable of one): a fresh fleet per trial.
        cases: The cases every setting is asked.
        entry: The peer each case asks (a case's own ``entry`` wins).
        scorers: Name -> `Scorer`; each is a column of the table. The default scores
            the answer (`Case.expected`), the routing (`Case.expected_peer`) and errors.
        fake_clock: Give each trial a fresh `FakeClock` (`Trial.clock`).
        timeout: Seconds the entry call may take.
        call_options: ``call_options(params) -> dict`` of `CallPeer` options for the entry
            call (``max_response_bytes``, ``timeout``...), or None.
        prices: A `PriceTable` for the cost column, or None (no cost). Each model round
            is priced by the model that made it (`ModelReply.model`: a `ScriptedModel`'s
            ``name``, a vendor's model id), as `CallTree.usage` prices them.
    """

    name: str
    build: Builder
    cases: tuple[Case, ...] = attrs.field(converter=_cases)
    entry: str
    scorers: Mapping[str, Scorer] = attrs.field(
        factory=_default_scorers, converter=_frozen, hash=False
    )
    fake_clock: bool = False
    timeout: float = 30.0
    call_options: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    prices: PriceTable | None = None

    def __attrs_post_init__(self) -> None:
        if not callable(self.build):
            raise TypeError(f"Scenario: build must be a function of a Trial, got {self.build!r}")
        for name, scorer in self.scorers.items():
            if not callable(scorer):
                raise TypeError(f"Scenario: scorer {name!r} is not callable: {scorer!r}")
            if name in RESERVED:
                raise ValueError(
                    f"Scenario: scorer name {name!r} is one of the table's own columns; rename it"
                )


def _grid(value: Mapping[str, Sequence[Any]]) -> Mapping[str, tuple[Any, ...]]:
    grid: dict[str, tuple[Any, ...]] = {}
    for name, values in dict(value).items():
        if not isinstance(name, str) or not name or name in RESERVED:
            raise ValueError(
                f"Experiment: parameter name {name!r} is empty or one of the table's own "
                f"columns ({', '.join(sorted(RESERVED))}); rename it"
            )
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise TypeError(
                f"Experiment: grid[{name!r}] must be a list of values, got {values!r}; "
                f"for one value write [{values!r}]"
            )
        if not values:
            raise ValueError(f"Experiment: grid[{name!r}] is empty; give at least one value")
        for v in values:
            try:
                text = json.dumps(v, allow_nan=False)
            except (TypeError, ValueError):
                raise TypeError(
                    f"Experiment: grid[{name!r}] holds {v!r}, which is not a JSON value; "
                    "parameters go into keys and tables: name the setting (a string, a "
                    "number) and make the object from it in build()"
                ) from None
            if json.loads(text) != v:
                raise TypeError(
                    f"Experiment: grid[{name!r}] holds {v!r}, which JSON would read back as "
                    f"{json.loads(text)!r}; use a list for a sequence, string keys for a mapping"
                )
        grid[name] = tuple(values)
    return grid


def trial_seed(seed: int, scenario: str, params: str, case: str, repetition: int) -> int:
    """A trial's seed: 63 bits of SHA-256 over the experiment's seed and the trial's key."""
    text = json.dumps([seed, scenario, params, case, repetition], ensure_ascii=False)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


@attrs.frozen
class Experiment:
    """A scenario, a grid of parameters and k repetitions: the trials, and how to run them.

    The trials are every setting of the grid (its product) times every case
    times ``k`` repetitions, each with its own seed. `run` (or `arun`) runs
    them and returns `Results`.

    Attributes:
        scenario: The scenario.
        grid: Parameter name -> the values to try (JSON values).
        k: Repetitions of each (setting, case).
        seed: The experiment's seed; every trial's seed derives from it.
    """

    scenario: Scenario
    grid: Mapping[str, tuple[Any, ...]] = attrs.field(factory=dict, converter=_grid, hash=False)
    k: int = 1
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"Experiment: k must be a whole number >= 1, got {self.k!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"Experiment: seed must be an int, got {self.seed!r}")

    def settings(self) -> Iterator[dict[str, Any]]:
        """Every setting of the grid, in the grid's order (one empty setting for no grid)."""
        names = list(self.grid)
        for values in itertools.product(*(self.grid[n] for n in names)):
            yield dict(zip(names, values, strict=True))

    def __len__(self) -> int:
        return math.prod(len(v) for v in self.grid.values()) * len(self.scenario.cases) * self.k

    def trials(self) -> Iterator[Trial]:
        """Every trial, lazily: settings, then cases, then repetitions."""
        name = self.scenario.name
        for params in self.settings():
            text = params_text(params)
            for case in self.scenario.cases:
                for repetition in range(self.k):
                    seed = trial_seed(self.seed, name, text, case.name, repetition)
                    yield Trial(name, params, case, repetition, seed)

    def plan(self, path: str | os.PathLike[str] | None = None) -> Any:
        """What `run(path)` would do, without running anything: see `Plan`.

        The file is checked as a run checks it (another experiment's file is refused).
        """
        from ._plan import plan

        return plan(self, path)

    def run(self, path: str | os.PathLike[str] | None = None, **options: Any) -> Any:
        """Run the trials not yet in `path`; see `simulator.experiments.run` for the options."""
        from ._runner import run

        return run(self, path, **options)

    async def arun(self, path: str | os.PathLike[str] | None = None, **options: Any) -> Any:
        """`run` for async code (``await experiment.arun(...)``)."""
        from ._runner import arun

        return await arun(self, path, **options)
