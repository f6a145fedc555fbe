"""Plots of `Results` (matplotlib, the `jupyter` extra): imported when a plot is drawn.

Each plot returns its matplotlib ``Axes`` (a new figure unless ``ax`` is
given), so a notebook can restyle it or put several side by side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._results import Results

__all__ = ["cost_distribution", "cost_vs_accuracy", "distribution", "pass_rate"]


def _axes(ax: Any, height: float) -> Any:
    if ax is not None:
        return ax
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(
            "experiments: plots need matplotlib: pip install 'coreagent-sdk[jupyter]'"
        ) from None
    _, made = plt.subplots(figsize=(6.5, max(1.8, height)))
    return made


# Labels are text, never TeX (parse_math=False wherever one is drawn): a grid value holding
# "$^$" raised mathtext's ValueError at the draw, and "$x$" came out in italics.
def _label(setting: dict[str, Any], names: Sequence[str]) -> str:
    return ", ".join(f"{n}={setting[n]}" for n in names) or "all trials"


def pass_rate(results: Results, by: str | Sequence[str] | None, ax: Any) -> Any:
    from ._results import INTERVAL

    rows = results.summary_rows(by)
    names = results._by(by)
    ax = _axes(ax, 0.35 * len(rows) + 1)
    labels = [_label(r, names) for r in rows]
    rates = [r["pass_rate"] for r in rows]
    errors = [[r["pass_rate"] - r["low"] for r in rows], [r["high"] - r["pass_rate"] for r in rows]]
    ax.barh(range(len(labels)), rates, xerr=errors, color="#54aeff", capsize=3)
    ax.set_yticks(range(len(labels)), labels, parse_math=False)
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel(f"pass rate ({INTERVAL}, 95%)")
    return ax


def distribution(
    results: Results, column: str, label: str, by: str | Sequence[str] | None, ax: Any
) -> Any:
    names = results._by(by)
    groups = results._groups(names)
    ax = _axes(ax, 0.35 * len(groups) + 1)
    data = [[r[column] for r in rows if r.get(column) is not None] for rows in groups.values()]
    labels = [_label(dict(zip(names, key, strict=True)), names) for key in groups]
    try:
        ax.boxplot(data, orientation="horizontal")
    except TypeError:  # matplotlib before 3.10
        ax.boxplot(data, vert=False)
    ax.set_yticks(range(1, len(labels) + 1), labels, parse_math=False)
    ax.invert_yaxis()
    ax.set_xlabel(label)
    return ax


def _priced(results: Results) -> bool:
    return any(r.get("cost") is not None for r in results.rows)


def cost_distribution(results: Results, by: str | Sequence[str] | None, ax: Any) -> Any:
    if _priced(results):
        return distribution(results, "cost", "cost per trial ($)", by, ax)
    for row in results.rows:  # tokens, when no price table was given
        row.setdefault("_tokens", row["tokens_in"] + row["tokens_out"])
    try:
        return distribution(results, "_tokens", "tokens per trial (no price table)", by, ax)
    finally:
        for row in results.rows:
            row.pop("_tokens", None)


def cost_vs_accuracy(results: Results, by: str | Sequence[str] | None, ax: Any) -> Any:
    rows = results.summary_rows(by)
    names = results._by(by)
    ax = _axes(ax, 3.2)
    priced = _priced(results)
    xs = [r["mean_cost"] if priced else r["mean_tokens"] for r in rows]
    ys = [r["pass_rate"] for r in rows]
    errors = [[r["pass_rate"] - r["low"] for r in rows], [r["high"] - r["pass_rate"] for r in rows]]
    ax.errorbar(xs, ys, yerr=errors, fmt="o", capsize=3)
    for x, y, r in zip(xs, ys, rows, strict=True):
        if x is not None and not math.isnan(y):
            ax.annotate(_label(r, names), (x, y), fontsize=7, xytext=(4, 2),
                        textcoords="offset points", parse_math=False)  # fmt: skip
    ax.set_xlabel("mean cost per trial ($)" if priced else "mean tokens per trial")
    ax.set_ylabel("pass rate")
    ax.set_ylim(0, 1.05)
    return ax
