"""What a results file says about the experiment that made it, and the order of its rows.

The invariant: a file holds the rows of one experiment, and says which.
Its record (`describe`) names the scenario, its entry, cases and scorers,
the grid, k and the seeds, the package versions, and a fingerprint of the
scenario's code where Python can read it. A run on a file whose record
names another experiment (another scenario, other cases or scorers, code
that changed) is refused before any trial runs (`merged`); growing the grid,
k or the seeds is the same experiment, and the record grows with it.

The record also fixes the order of the rows (`order`): settings in the
order the grid gives them, then cases in the scenario's order, then the
experiment's seeds in the order they were run, then repetitions. Arrival
order (which trial finished first) differs between runs; this order does
not, so the first setting is the baseline and row 37 is the same trial
on every run and every reload.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import platform
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coreagent_sdk.errors import CoreAgentError

if TYPE_CHECKING:
    from ._scenario import Experiment, Scenario

__all__ = ["ExperimentFileError", "describe", "fingerprint", "merged", "order"]

FORMAT = 1


class ExperimentFileError(CoreAgentError, ValueError):
    """A file that is not this experiment's results: refused before anything runs."""


def _source(thing: object) -> str:
    # A function's source where Python can read it (a module, a notebook cell IPython kept);
    # a callable value (MaxDepth(2)) by its repr; else its qualified name.
    target = thing if inspect.isroutine(thing) or inspect.isclass(thing) else None
    if target is not None:
        try:
            return inspect.getsource(target)
        except (OSError, TypeError):
            return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
    return repr(thing)


def fingerprint(scenario: Scenario) -> str:
    """SHA-256 (16 hex digits) of the source of the scenario's build, scorers and call options."""
    parts = [_source(scenario.build), _source(scenario.call_options)]
    parts += [f"{name}={_source(s)}" for name, s in scenario.scorers.items()]
    return hashlib.sha256("\n\0".join(parts).encode()).hexdigest()[:16]


def _versions() -> dict[str, str]:
    from importlib import metadata

    found = {"python": platform.python_version()}
    for package in ("coreagent-sdk",):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def describe(experiment: Experiment) -> dict[str, Any]:
    """The record of `experiment` a results file keeps beside its rows."""
    scenario = experiment.scenario
    return {
        "format": FORMAT,
        "scenario": scenario.name,
        "entry": scenario.entry,
        "cases": [
            {
                "name": c.name,
                "prompt": c.prompt,
                "expected": c.expected,
                "expected_peer": c.expected_peer,
                "entry": c.entry,
            }
            for c in scenario.cases
        ],
        "scorers": list(scenario.scorers),
        "fingerprint": fingerprint(scenario),
        "grid": {name: list(values) for name, values in experiment.grid.items()},
        "k": experiment.k,
        "seeds": [experiment.seed],
        "versions": _versions(),
    }


def _differs(held: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    if held.get("format") != FORMAT:
        return f"was written in format {held.get('format')!r}, not {FORMAT}"
    if held["scenario"] != new["scenario"]:
        return f"holds scenario {held['scenario']!r}, not {new['scenario']!r}"
    if held["cases"] != new["cases"]:
        old = ", ".join(c["name"] for c in held["cases"])
        return f"was run on other cases ({old}) or cases that have changed since"
    if held["scorers"] != new["scorers"]:
        return f"was scored by {', '.join(held['scorers']) or 'nothing'}, not " + (
            ", ".join(new["scorers"]) or "nothing"
        )
    if held["entry"] != new["entry"]:
        return f"asked entry peer {held['entry']!r}, not {new['entry']!r}"
    if list(held["grid"]) != list(new["grid"]):
        return (
            f"has the parameters {', '.join(held['grid']) or 'none'}, not "
            f"{', '.join(new['grid']) or 'none'} (grow a parameter's values, k or the seeds; "
            "a new parameter is a new experiment)"
        )
    if held["fingerprint"] != new["fingerprint"]:
        return (
            "was made by other code (the scenario's build, scorers or call_options changed "
            f"since: fingerprint {held['fingerprint']} then, {new['fingerprint']} now)"
        )
    return None


def merged(
    path: Path, held: dict[str, Any] | None, new: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The file's record grown by this run's, or `ExperimentFileError` if they differ."""
    if new is None:
        return held
    if held is None:
        return dict(new)
    why = _differs(held, new)
    if why is not None:
        raise ExperimentFileError(
            f"experiments: {str(path)!r} {why}: it holds another experiment's results; "
            "give this experiment a new path (Results.load reads the old one)"
        )
    grid = {
        name: [*values, *(v for v in new["grid"][name] if v not in values)]
        for name, values in held["grid"].items()
    }
    seeds = [*held["seeds"], *(s for s in new["seeds"] if s not in held["seeds"])]
    return {**held, "grid": grid, "seeds": seeds, "k": max(held["k"], new["k"]),
            "versions": new["versions"]}  # fmt: skip


def _position(values: list[Any]) -> Callable[[Any], int]:
    texts = {json.dumps(v, sort_keys=True): i for i, v in enumerate(values)}
    return lambda value: texts.get(json.dumps(value, sort_keys=True), len(texts))


def order(record: Mapping[str, Any] | None, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` in the experiment's order (see the module's docstring); as given without a record."""
    rows = list(rows)
    if record is None:
        return rows
    from ._scenario import trial_seed

    grid = record["grid"]
    places = {name: _position(values) for name, values in grid.items()}
    cases = {c["name"]: i for i, c in enumerate(record["cases"])}
    seeds = list(record["seeds"])
    name = record["scenario"]

    def seed_place(row: dict[str, Any]) -> int:
        if len(seeds) == 1:
            return 0
        for i, s in enumerate(seeds):
            if trial_seed(s, name, row["params"], row["case"], row["repetition"]) == row["seed"]:
                return i
        return len(seeds)

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return (
            *(places[n](row.get(n)) for n in grid),
            cases.get(row["case"], len(cases)),
            seed_place(row),
            row["repetition"],
        )

    return sorted(rows, key=key)


def trial_keys(record: Mapping[str, Any]) -> list[tuple[str, str, str, int, int]]:
    """Every trial key the record's experiment has, in its order."""
    import itertools

    from ._scenario import params_text, trial_seed

    grid = record["grid"]
    name = record["scenario"]
    keys = []
    for values in itertools.product(*(grid[n] for n in grid)):
        text = params_text(dict(zip(grid, values, strict=True)))
        for case in record["cases"]:
            for seed in record["seeds"]:
                for repetition in range(record["k"]):
                    trial = trial_seed(seed, name, text, case["name"], repetition)
                    keys.append((name, text, case["name"], trial, repetition))
    return keys
