"""`Results`: one row per trial, and the summaries a study asks of them.

The rows are plain dicts (the store's JSON), so a run, a reload and the
numbers of every summary need nothing but the standard library; pandas
(the `experiments` extra) is needed only to get DataFrames out, and
matplotlib (the `jupyter` extra) only to plot.

Every rate comes with its interval, and every summary says which interval it
is: Wilson's score interval for one pass rate, Newcombe's hybrid score
interval for the difference of two (see `_stats`). Trials of one setting
are pooled over its cases, so a rate is "of the trials of this setting":
with few cases, that treats the cases as a fixed set, not a sample.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from coreagent_sdk import CallRecord, CallTree, TurnStep

from . import _display, _parquet
from ._case_diff import CaseDiff
from ._meta import order
from ._scenario import RESERVED
from ._stats import mean_interval, newcombe, pass_at_k, pass_hat_k, wilson
from ._trial_tree import TrialTree, trial_tree

__all__ = ["INTERVAL", "Results"]

INTERVAL = "Wilson score interval"
"""The interval every pass rate is given with (a difference: Newcombe's, from two of them)."""


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError(
            "experiments: tables need pandas: pip install 'coreagent-sdk[experiments]'"
        ) from None
    return pandas


def _setting(row: dict[str, Any], by: Sequence[str]) -> tuple[Any, ...]:
    return tuple(_hashable(row.get(name)) for name in by)


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every column of `rows`, in the order rows first have them (quick: most rows share keys)."""
    if not rows:
        return []
    first = rows[0].keys()
    columns = dict.fromkeys(first)
    for row in rows:
        if row.keys() != first:
            columns.update(dict.fromkeys(row))
    return list(columns)


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


class Results:
    """The rows of a run (one per trial), its summaries, plots and files.

    Attributes:
        rows: One dict per trial: the key (scenario, params, case, seed, repetition),
            each parameter, ``passed``, each scorer's value, the answer or error,
            timings, tokens, cost and the call tree's summary (``tree``: its JSON).
        stopped: Why the run stopped early ("interrupted", "budget: tokens",
            "budget: cost", "budget: wall time"), or None when it ran every trial.
        skipped: Trials the store already held, so this run did not run them.
        path: The SQLite file the rows are in, or None.
        experiment: The record of the experiment the rows come from (scenario, entry,
            cases, scorers, grid, k, seeds, package versions, a fingerprint of the
            scenario's code), as the file keeps it; None for rows given by hand.

    Rows are in the experiment's order: settings in the grid's order, then cases,
    seeds and repetitions, whatever order the trials finished in.
    """

    def __init__(
        self,
        rows: Iterable[dict[str, Any]],
        *,
        stopped: str | None = None,
        skipped: int = 0,
        path: Path | None = None,
        experiment: dict[str, Any] | None = None,
    ) -> None:
        self.rows = list(rows)
        self.stopped = stopped
        self.skipped = skipped
        self.path = path
        self.experiment = experiment

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    @property
    def params(self) -> list[str]:
        """The parameter names of the grid, in its order."""
        if self.experiment is not None:
            return list(self.experiment["grid"])
        given: set[str] = set()
        for text in {row["params"] for row in self.rows}:  # a few settings, many rows
            given.update(json.loads(text))
        # The row's own keys are in grid order (the params text has them sorted).
        return [name for name in _columns(self.rows) if name in given]

    @property
    def scores(self) -> list[str]:
        """The scorers' column names."""
        if self.experiment is not None:
            return list(self.experiment["scorers"])
        params = set(self.params)
        return [name for name in _columns(self.rows) if name not in RESERVED and name not in params]

    # Files

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Results:
        """The rows of a saved run: its SQLite file (`run(path)`) or a `to_parquet` export."""
        where = Path(path)
        if not where.exists():
            raise FileNotFoundError(f"Results.load: no file at {str(where)!r}")
        if where.suffix.lower() == ".parquet":
            return _parquet.read(cls, where)
        from ._store import read_file

        db = sqlite3.connect(f"file:{where}?mode=ro", uri=True)
        try:
            rows, record = read_file(where, db)
        finally:
            db.close()
        return cls(order(record, rows), path=where, experiment=record)

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame, one row per trial (needs the `experiments` extra)."""
        return _pandas().DataFrame.from_records(self.rows)

    def to_parquet(self, path: str | os.PathLike[str]) -> Path:
        """Write the rows to a Parquet file (pyarrow); `Results.load` reads it back."""
        return _parquet.write(self, Path(path))

    def row(self, key: int | Sequence[Any]) -> dict[str, Any]:
        """The row at index `key`, or of the trial whose key is `key`.

        A trial's key is (scenario, params, case, seed, repetition), as a row holds
        it (``row["params"]`` is the setting's JSON text); a shorter tuple from its
        start names a trial too when one row matches it.
        """
        if isinstance(key, bool) or not isinstance(key, (int, tuple, list)):
            raise TypeError(
                f"Results: give a row's index or a trial's key (scenario, params, case, seed, "
                f"repetition), got {key!r}"
            )
        if isinstance(key, int):
            if not -len(self.rows) <= key < len(self.rows):
                raise IndexError(
                    f"Results: no row {key} ({len(self.rows)} rows: 0 to {len(self.rows) - 1}); "
                    "give an index in range, or a trial's key"
                )
            return self.rows[key]
        wanted = tuple(key)
        found = [r for r in self.rows if _key_of(r)[: len(wanted)] == wanted]
        if len(found) != 1:
            first = _key_of(self.rows[0]) if self.rows else None
            raise KeyError(
                f"Results: {'no' if not found else len(found)} trials with key {wanted!r}; a "
                f"trial's key is (scenario, params, case, seed, repetition), say {first!r}"
            )
        return found[0]

    def missing(self) -> list[tuple[str, str, str, int, int]]:
        """The keys of the experiment's trials these rows lack (a stopped or partial run).

        From the experiment's record (its grid, cases, k and seeds as the file keeps
        them); rows given by hand, without one, lack nothing.
        """
        from ._plan import missing

        return missing(self.experiment, self.rows)

    def tree(self, key: int | Sequence[Any]) -> TrialTree:
        """The call tree of a row (by index or trial key): every call its trial's fleet carried.

        A `TrialTree`: the `CallTree` with the trial's scores, the expected peer against
        the one asked, and a mark on the call where the route went wrong.
        """
        row = self.row(key)
        records = json.loads(row["tree"])
        tree = CallTree(
            tuple(
                CallRecord(**{**r, "steps": tuple(TurnStep(**s) for s in r.get("steps") or ())})
                for r in records
            )
        )
        return trial_tree(tree, row, self.scores)

    # Summaries (numbers in pure Python; DataFrames out)

    def _groups(self, by: Sequence[str]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        if len(by) == 1:  # the common case, a loop without a call per row
            (name,) = by
            for row in self.rows:
                value = row.get(name)
                if isinstance(value, (list, dict)):
                    value = _hashable(value)
                groups.setdefault((value,), []).append(row)
            return groups
        for row in self.rows:
            groups.setdefault(_setting(row, by), []).append(row)
        return groups

    def _by(self, by: str | Sequence[str] | None) -> list[str]:
        if by is None:
            return self.params
        names = [by] if isinstance(by, str) else list(by)
        params = self.params
        known = {*params, "case", "scenario", "asked"}
        if any(name not in known for name in names):
            known |= set(self.scores)
        for name in names:
            if name not in known:
                raise KeyError(
                    f"Results: no column {name!r} to group by (parameters: "
                    f"{', '.join(params) or 'none'}); name a parameter of the grid"
                )
        return names

    def summary_rows(
        self, by: str | Sequence[str] | None = None, confidence: float = 0.95
    ) -> list[dict[str, Any]]:
        """`summary` as a list of dicts (no pandas needed)."""
        names = self._by(by)
        scores = [s for s in self.scores if s not in names]
        out = []
        for setting, rows in self._groups(names).items():
            n = len(rows)
            passes = sum(1 for r in rows if r["passed"])
            low, high = wilson(passes, n, confidence)
            summary: dict[str, Any] = {
                **dict(zip(names, setting, strict=True)),
                "trials": n,
                "passed": passes,
                "pass_rate": passes / n,
                "low": low,
                "high": high,
                "errors": sum(1 for r in rows if r.get("error_kind")),
            }
            # Each metric's mean with its t interval; each scorer's (a check's rate
            # with Wilson's), so a summary answers "what did it cost" as it does "how often".
            for column, values in (
                ("mean_ms", [r["duration_ms"] for r in rows]),
                ("mean_tokens", [r["tokens_in"] + r["tokens_out"] for r in rows]),
                ("mean_cost", [r["cost"] for r in rows if r.get("cost") is not None]),
            ):
                mean, m_low, m_high = mean_interval(values, confidence) if values else (
                    None, None, None
                )  # fmt: skip
                summary.update({column: mean, f"{column}_low": m_low, f"{column}_high": m_high})
            for score in scores:
                values = [r[score] for r in rows if r.get(score) is not None]
                if values and all(isinstance(v, bool) for v in values):
                    hits = sum(1 for v in values if v)
                    mean = hits / len(values)
                    m_low, m_high = wilson(hits, len(values), confidence)
                elif values:
                    mean, m_low, m_high = mean_interval([float(v) for v in values], confidence)
                else:
                    mean = m_low = m_high = None
                summary.update({f"mean_{score}": mean, f"mean_{score}_low": m_low,
                                f"mean_{score}_high": m_high})  # fmt: skip
            out.append(summary)
        return out

    def summary(self, by: str | Sequence[str] | None = None, confidence: float = 0.95) -> Any:
        """Pass rate per setting with its Wilson interval (``low``, ``high``), errors, means.

        Each mean (``mean_ms``, ``mean_tokens``, ``mean_cost``, and ``mean_<scorer>``
        for every scorer: a check's rate, a metric's mean) comes with its interval
        (``..._low``, ``..._high``: t for numbers, Wilson for checks) at `confidence`.

        ``by`` names the parameters to group by (default: all of them: one row per setting).
        """
        return _pandas().DataFrame.from_records(self.summary_rows(by, confidence))

    def pass_k_rows(
        self, k: int | None = None, by: str | Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """`pass_k` as a list of dicts (no pandas needed)."""
        names = self._by(by)
        out = []
        for setting, rows in self._groups(names).items():
            per_case: dict[str, list[bool]] = {}
            for r in rows:
                per_case.setdefault(r["case"], []).append(bool(r["passed"]))
            tries = min(len(v) for v in per_case.values())
            use = tries if k is None else k
            if use > tries:
                raise ValueError(
                    f"Results.pass_k: k={use} but a case of "
                    f"{dict(zip(names, setting, strict=True))} "
                    f"has only {tries} tries; run the experiment with k >= {use}, or ask for less"
                )
            at = [pass_at_k(len(v), sum(v), use) for v in per_case.values()]
            hat = [pass_hat_k(len(v), sum(v), use) for v in per_case.values()]
            out.append(
                {
                    **dict(zip(names, setting, strict=True)),
                    "k": use,
                    "cases": len(per_case),
                    "pass@k": sum(at) / len(at),
                    "pass^k": sum(hat) / len(hat),
                }
            )
        return out

    def pass_k(self, k: int | None = None, by: str | Sequence[str] | None = None) -> Any:
        """pass@k (some of k tries pass) and pass^k (all k pass), averaged over cases.

        Each case's value is the unbiased estimate from its n >= k tries;
        ``k`` defaults to the fewest tries any case has.
        """
        return _pandas().DataFrame.from_records(self.pass_k_rows(k, by))

    def compare_rows(
        self,
        by: str,
        baseline: Any = None,
        confidence: float = 0.95,
        metric: str = "passed",
        paired: bool | None = None,
        correction: str | None = None,
    ) -> list[dict[str, Any]]:
        """`compare` as a list of dicts (no pandas needed)."""
        from ._compare import check_metric, compare_rows, metric_values

        names = self._by(by)
        groups = self._groups(names)
        if not groups:
            return []
        params = self.params
        scores = [c for c in _columns(self.rows) if c not in RESERVED and c not in set(params)]
        check_metric(metric, scores, metric_values(self.rows, metric))
        keys = list(groups)
        base = (_hashable(baseline),) if baseline is not None else keys[0]
        if base not in groups:
            raise KeyError(
                f"Results.compare: no trials with {by}={baseline!r} (values: "
                f"{', '.join(repr(k[0]) for k in keys)})"
            )
        others = [p for p in params if p != by]
        return compare_rows(groups, by, others, base, metric, confidence, paired, correction)

    def compare(
        self,
        by: str,
        baseline: Any = None,
        confidence: float = 0.95,
        metric: str = "passed",
        paired: bool | None = None,
        correction: str | None = None,
    ) -> Any:
        """Each value of parameter `by` against a baseline (default: the grid's first value).

        Args:
            by: The parameter whose values are compared.
            baseline: The value the others are compared with.
            confidence: Of every interval (shown in the ``confidence`` column).
            metric: ``"passed"`` (default), a pass/fail scorer, ``"cost"``, ``"tokens"``,
                ``"duration_ms"`` or any numeric scorer.
            paired: None (default): paired by case when both settings were asked the
                same cases and repetitions (then each case is compared with itself),
                independent otherwise; True insists on pairing, False never pairs.
            correction: None, ``"holm"`` or ``"bonferroni"``: for comparing many values
                with one baseline (adjusted ``p_value``; intervals at ``diff_confidence``).

        ``mean`` (``pass_rate`` for ``passed``) is each value's, with its interval
        (Wilson for pass/fail, t for numbers: ``low``, ``high``); ``diff`` is the value's
        minus the baseline's with its interval (``diff_low``, ``diff_high``) and
        ``p_value``; ``method`` says how (paired by case, or independent);
        ``vs_baseline`` says "better"/"worse" (or "higher"/"lower" for a number) only
        when the interval excludes 0.
        """
        return _pandas().DataFrame.from_records(
            self.compare_rows(by, baseline, confidence, metric, paired, correction)
        )

    def confusion_rows(self) -> dict[str, dict[str, int]]:
        """`confusion` as {expected peer: {asked peer: trials}} (no pandas needed)."""
        table: dict[str, dict[str, int]] = {}
        for row in self.rows:
            expected = row.get("expected_peer")
            if expected is None:
                continue
            asked = row.get("asked") or "(none)"
            table.setdefault(expected, {}).setdefault(asked, 0)
            table[expected][asked] += 1
        return table

    def confusion(self) -> Any:
        """Routing confusion: trials by expected peer (rows) and the peer first asked (columns).

        Only cases with an ``expected_peer`` count; a trial whose entry
        delegated to nobody is in the ``(none)`` column.
        """
        table = self.confusion_rows()
        columns = sorted({a for asked in table.values() for a in asked})
        frame = _pandas().DataFrame(
            [[table[e].get(a, 0) for a in columns] for e in sorted(table)],
            index=sorted(table),
            columns=columns,
        )
        frame.index.name, frame.columns.name = "expected", "asked"
        return frame

    @staticmethod
    def side_by_side_rows(
        before: Results, after: Results, by: str | Sequence[str] | None = None,
        confidence: float = 0.95,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """`side_by_side` as a list of dicts (no pandas needed)."""
        names = before._by(by) if by is not None else list(
            dict.fromkeys([*before.params, *after.params])
        )  # fmt: skip
        old, new = before._groups(names), after._groups(names)
        out = []
        for key in [*old, *(k for k in new if k not in old)]:
            a, b = old.get(key, []), new.get(key, [])
            pa, pb = sum(1 for r in a if r["passed"]), sum(1 for r in b if r["passed"])
            diff, low, high = newcombe(pa, len(a), pb, len(b), confidence)
            out.append(
                {
                    **dict(zip(names, key, strict=True)),
                    "before_trials": len(a),
                    "before_rate": pa / len(a) if a else math.nan,
                    "after_trials": len(b),
                    "after_rate": pb / len(b) if b else math.nan,
                    "diff": diff,
                    "diff_low": low,
                    "diff_high": high,
                }
            )
        return out

    @staticmethod
    def side_by_side(
        before: Results, after: Results, by: str | Sequence[str] | None = None,
        confidence: float = 0.95,
    ) -> Any:  # fmt: skip
        """Two runs (before and after a change) per setting: rates and the change, with intervals.

        ``diff`` is after minus before, with Newcombe's interval; a setting
        one run lacks shows nan on that side.
        """
        return _pandas().DataFrame.from_records(
            Results.side_by_side_rows(before, after, by, confidence)
        )

    @staticmethod
    def case_diff(before: Results, after: Results) -> CaseDiff:
        """Two runs (before and after a change) case by case: which trials flipped.

        Pairs each trial with the other run's of the same setting, case and repetition;
        `CaseDiff` says which were fixed, which broke, with both answers and both call
        trees one click away in the HTML, and ``.to_pandas()`` as a table.
        """
        from ._case_diff import case_diff

        params = list(dict.fromkeys([*before.params, *after.params]))
        return case_diff(before, after, ("before", "after"), before.rows, after.rows, params)

    def compare_cases(self, by: str, baseline: Any = None, value: Any = None) -> CaseDiff:
        """Two values of parameter `by` case by case (default: the grid's first two values).

        Pairs each trial of ``by=baseline`` with the trial of ``by=value`` that has the
        same other parameters, case and repetition: see `CaseDiff`.
        """
        from ._case_diff import case_diff

        names = self._by(by)
        values = [key[0] for key in self._groups(names)]
        if len(values) < 2 and (baseline is None or value is None):
            raise ValueError(
                f"Results.compare_cases: {by!r} has {len(values)} value(s) in these rows; "
                "two are needed"
            )
        a = values[0] if baseline is None else baseline
        b = next(v for v in values if v != a) if value is None else value
        for wanted in (a, b):
            if _hashable(wanted) not in {_hashable(v) for v in values}:
                raise KeyError(
                    f"Results.compare_cases: no trials with {by}={wanted!r} (values: "
                    f"{', '.join(map(repr, values))})"
                )
        side_a = [r for r in self.rows if _hashable(r.get(by)) == _hashable(a)]
        side_b = [r for r in self.rows if _hashable(r.get(by)) == _hashable(b)]
        others = [p for p in self.params if p != by]
        return case_diff(self, self, (f"{by}={a!r}", f"{by}={b!r}"), side_a, side_b, others)

    # Display

    def __repr__(self) -> str:
        return _display.results_text(self)

    def _repr_html_(self) -> str:
        return _display.results_html(self)

    # Plots (matplotlib: the jupyter extra)

    def plot_pass_rate(self, by: str | Sequence[str] | None = None, ax: Any = None) -> Any:
        """Pass rate per setting with its Wilson interval, as horizontal bars; returns the Axes."""
        from ._plots import pass_rate

        return pass_rate(self, by, ax)

    def plot_latency(self, by: str | Sequence[str] | None = None, ax: Any = None) -> Any:
        """The distribution of the entry call's duration per setting (box plots)."""
        from ._plots import distribution

        return distribution(self, "duration_ms", "entry call (ms)", by, ax)

    def plot_cost(self, by: str | Sequence[str] | None = None, ax: Any = None) -> Any:
        """The distribution of cost per trial (dollars; tokens without a price table)."""
        from ._plots import cost_distribution

        return cost_distribution(self, by, ax)

    def plot_cost_vs_accuracy(self, by: str | Sequence[str] | None = None, ax: Any = None) -> Any:
        """Each setting as a point: mean cost (or tokens) per trial against its pass rate."""
        from ._plots import cost_vs_accuracy

        return cost_vs_accuracy(self, by, ax)


def _key_of(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["scenario"], row["params"], row["case"], row["seed"], row["repetition"])
