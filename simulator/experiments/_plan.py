"""What a run would do before it does it: `Experiment.plan(path)` and `Results.missing()`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import attrs

from ._meta import describe, trial_keys
from ._store import open_store

if TYPE_CHECKING:
    from ._scenario import Experiment

__all__ = ["Plan", "plan"]


@attrs.frozen
class Plan:
    """What `Experiment.run(path)` would do now.

    Attributes:
        path: The results file (None: in memory: everything runs).
        trials: The experiment's trials, all told.
        done: Of those, the ones the file holds (a run skips them).
        to_run: The keys of the trials a run would start, in the order it would.
        other_rows: Rows the file holds that are not this experiment's trials (a
            larger grid's, say); a run keeps them and `Results` shows them.
    """

    path: str | None
    trials: int
    done: int
    to_run: tuple[tuple[str, str, str, int, int], ...]
    other_rows: int

    def __repr__(self) -> str:
        where = repr(self.path) if self.path else "memory"
        extra = f", {self.other_rows} other rows kept" if self.other_rows else ""
        return (
            f"Plan({where}: {self.trials} trials, {self.done} done, "
            f"{len(self.to_run)} to run{extra})"
        )


def plan(experiment: Experiment, path: str | os.PathLike[str] | None) -> Plan:
    record = describe(experiment)
    where = str(path) if path is not None else None
    # A new file: everything runs (and plan() makes no file).
    fresh = path is None or not os.path.exists(path)
    store = open_store(None if fresh else path, record)  # refuses another experiment's file
    try:
        held = store.keys()
    finally:
        store.close()
    keys = [t.key for t in experiment.trials()]
    mine = set(keys)
    return Plan(
        where,
        len(keys),
        sum(1 for k in keys if k in held),
        tuple(k for k in keys if k not in held),
        sum(1 for k in held if k not in mine),
    )


def missing(record: dict[str, Any] | None, rows: list[dict[str, Any]]) -> list[Any]:
    """The keys of the record's trials that `rows` lack, in the experiment's order."""
    if record is None:
        return []
    have = {(r["scenario"], r["params"], r["case"], int(r["seed"]), int(r["repetition"]))
            for r in rows}  # fmt: skip
    return [k for k in trial_keys(record) if k not in have]
