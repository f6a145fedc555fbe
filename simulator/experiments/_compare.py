"""Each value of a parameter against a baseline, on any metric, paired by case where it can be.

A metric is ``passed`` (the default), a pass/fail scorer, ``cost``,
``tokens`` (in + out), ``duration_ms`` or any numeric scorer. Pass/fail
metrics are compared as proportions, numbers as means.

Two settings are **paired** when they were asked the same trials: for each
(other parameters, case, repetition) one trial of each. Then each pair is
compared with itself (McNemar's exact test and Newcombe's paired interval for
pass/fail, the t interval of the differences for numbers), which is what
"case by case" means and is far more sensitive than pooling when the cases
differ in difficulty. Otherwise the settings are compared as independent
samples (Newcombe's unpaired interval; Welch's t). The ``method`` column
says which was used. With ``correction``, comparing many settings to one
baseline adjusts the p-values (Holm) and widens every interval to
1 - alpha/m (Bonferroni), so "better" still means what it says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ._stats import (
    holm,
    mcnemar_exact,
    mean_interval,
    newcombe,
    newcombe_paired,
    paired_difference,
    welch,
    wilson,
)

__all__ = ["CORRECTIONS", "compare_rows", "metric_values"]

CORRECTIONS = (None, "holm", "bonferroni")
_BUILT_IN = ("passed", "cost", "tokens", "duration_ms", "calls", "depth", "delegations")


def metric_value(row: dict[str, Any], metric: str) -> Any:
    if metric == "tokens":
        return row["tokens_in"] + row["tokens_out"]
    return row.get(metric)


def metric_values(rows: Sequence[dict[str, Any]], metric: str) -> list[Any]:
    """The metric of each row (None: does not apply to it)."""
    return [metric_value(r, metric) for r in rows]


def is_proportion(values: Sequence[Any]) -> bool:
    present = [v for v in values if v is not None]
    return bool(present) and all(isinstance(v, bool) for v in present)


def check_metric(metric: str, known: Sequence[str], values: Sequence[Any]) -> None:
    if metric not in known and metric not in _BUILT_IN and metric != "tokens":
        raise KeyError(
            f"Results.compare: no metric {metric!r}; give one of "
            f"{', '.join(repr(m) for m in (*_BUILT_IN, *known))}"
        )
    bad = next((v for v in values if v is not None and not isinstance(v, (bool, int, float))), 0)
    if bad:
        raise TypeError(f"Results.compare: metric {metric!r} holds {bad!r}, not a number")


def _pair_key(row: dict[str, Any], by: str, others: Sequence[str]) -> tuple[Any, ...]:
    from ._results import _hashable

    return (*(_hashable(row.get(n)) for n in others), row["case"], row["repetition"])


def _pairs(
    rows: Sequence[dict[str, Any]], by: str, others: Sequence[str]
) -> dict[tuple[Any, ...], dict[str, Any]] | None:
    if others:
        pairs = {_pair_key(row, by, others): row for row in rows}
    else:  # one parameter: a loop without a call per row (100,000 rows in well under 1 s)
        pairs = {(row["case"], row["repetition"]): row for row in rows}
    # Two trials for one case and repetition (another seed): no one-to-one pairing.
    return pairs if len(pairs) == len(rows) else None


def compare_rows(
    groups: dict[Any, list[dict[str, Any]]],
    by: str,
    others: Sequence[str],
    base: Any,
    metric: str,
    confidence: float,
    paired: bool | None,
    correction: str | None,
) -> list[dict[str, Any]]:
    if correction not in CORRECTIONS:
        raise ValueError(
            f"Results.compare: correction must be None, 'holm' or 'bonferroni', got {correction!r}"
        )
    values = {key: metric_values(rows, metric) for key, rows in groups.items()}
    proportion = all(is_proportion(v) or not any(x is not None for x in v) for v in values.values())
    compared = len(groups) - 1
    level = confidence
    if correction is not None and compared > 1:
        level = 1 - (1 - confidence) / compared
    base_rows = groups[base]
    base_pairs = _pairs(base_rows, by, others)
    out = []
    for key, rows in groups.items():
        mine = [v for v in values[key] if v is not None]
        row: dict[str, Any] = {by: key[0], "metric": metric, "trials": len(mine)}
        if proportion:
            passes = sum(1 for v in mine if v)
            low, high = wilson(passes, len(mine), confidence)
            row.update(mean=passes / len(mine) if mine else math.nan, low=low, high=high)
            if metric == "passed":
                row["pass_rate"] = row["mean"]
        else:
            mean, low, high = mean_interval([float(v) for v in mine], confidence)
            row.update(mean=mean, low=low, high=high)
        if key == base:
            row.update(diff=0.0, diff_low=math.nan, diff_high=math.nan, p_value=math.nan,
                       method="baseline", pairs=None)  # fmt: skip
            out.append(row)
            continue
        pairs = _pairs(rows, by, others)
        can_pair = base_pairs is not None and pairs is not None and set(pairs) == set(base_pairs)
        if paired and not can_pair:
            raise ValueError(
                f"Results.compare: {by}={key[0]!r} and the baseline were not asked the same "
                "cases and repetitions, so they cannot be paired; leave paired=None"
            )
        use_pairs = can_pair if paired is None else paired
        row.update(_difference(base_rows, rows, base_pairs, pairs, metric, proportion,
                               use_pairs, level))  # fmt: skip
        out.append(row)
    if correction is not None:
        p_values = [r["p_value"] for r in out if r["method"] != "baseline"]
        if correction == "holm":
            adjusted = holm(p_values)
        else:
            adjusted = [min(1.0, p * compared) if not math.isnan(p) else p for p in p_values]
        it = iter(adjusted)
        for r in out:
            if r["method"] != "baseline":
                r["p_value"] = next(it)
    for r in out:
        r["confidence"] = confidence
        r["diff_confidence"] = level
        r["correction"] = correction
        r["vs_baseline"] = _verdict(r)
    return out


def _verdict(row: dict[str, Any]) -> str:
    if row["method"] == "baseline":
        return "baseline"
    low, high = row["diff_low"], row["diff_high"]
    if math.isnan(low) or math.isnan(high):
        return "too few trials"
    if low > 0:
        return "higher" if row["metric"] != "passed" else "better"
    if high < 0:
        return "lower" if row["metric"] != "passed" else "worse"
    return "no clear difference"


def _difference(
    base_rows: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    base_pairs: dict[tuple[Any, ...], dict[str, Any]] | None,
    pairs: dict[tuple[Any, ...], dict[str, Any]] | None,
    metric: str,
    proportion: bool,
    use_pairs: bool,
    level: float,
) -> dict[str, Any]:
    if use_pairs:
        assert base_pairs is not None
        assert pairs is not None
        couples = [
            (metric_value(base_pairs[k], metric), metric_value(pairs[k], metric))
            for k in base_pairs
        ]
        couples = [(a, b) for a, b in couples if a is not None and b is not None]
        if proportion:
            both = sum(1 for a, b in couples if a and b)
            only_a = sum(1 for a, b in couples if a and not b)
            only_b = sum(1 for a, b in couples if b and not a)
            neither = len(couples) - both - only_a - only_b
            diff, low, high = newcombe_paired(both, only_a, only_b, neither, level)
            return {
                "diff": diff, "diff_low": low, "diff_high": high,
                "p_value": mcnemar_exact(only_a, only_b),
                "method": "paired by case: Newcombe, McNemar exact", "pairs": len(couples),
            }  # fmt: skip
        diff, low, high, p = paired_difference(
            [float(a) for a, _ in couples], [float(b) for _, b in couples], level
        )
        return {"diff": diff, "diff_low": low, "diff_high": high, "p_value": p,
                "method": "paired by case: t", "pairs": len(couples)}  # fmt: skip
    a = [v for v in metric_values(base_rows, metric) if v is not None]
    b = [v for v in metric_values(rows, metric) if v is not None]
    if proportion:
        pa, pb = sum(1 for v in a if v), sum(1 for v in b if v)
        diff, low, high = newcombe(pa, len(a), pb, len(b), level)
        return {"diff": diff, "diff_low": low, "diff_high": high,
                "p_value": _two_proportion_p(pa, len(a), pb, len(b)),
                "method": "independent: Newcombe", "pairs": None}  # fmt: skip
    diff, low, high, p = welch([float(v) for v in a], [float(v) for v in b], level)
    return {"diff": diff, "diff_low": low, "diff_high": high, "p_value": p,
            "method": "independent: Welch t", "pairs": None}  # fmt: skip


def _two_proportion_p(pa: int, na: int, pb: int, nb: int) -> float:
    # The pooled two-proportion z test: the p-value beside Newcombe's interval.
    from statistics import NormalDist

    if not na or not nb:
        return math.nan
    pooled = (pa + pb) / (na + nb)
    se = math.sqrt(pooled * (1 - pooled) * (1 / na + 1 / nb))
    if se == 0:
        return 1.0
    z = (pb / nb - pa / na) / se
    return 2 * (1 - NormalDist().cdf(abs(z)))
