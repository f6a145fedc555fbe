"""Plots of `Results` (matplotlib, the `jupyter` extra): imported when a plot is drawn.

Each plot returns its matplotlib ``Axes`` (a new figure unless ``ax`` is
given), so a notebook can restyle it or put several side by side.

Readable by construction, not by luck:

- A setting is labelled by the parameters that vary between the settings
  shown (a parameter with one value is said once, in the title, not on
  every bar).
- Cost is drawn in a unit that fits it: a simulated model's trial costs
  millionths of a dollar, which as dollars prints ticks like ``0.000001``
  over each other; µ$ or m$ keep the numbers short.
- Points are told apart by a legend outside the data, not by labels that
  overlap each other and run off the axes.
- Text from a run (a setting holding ``$``) is drawn as text
  (``parse_math=False``), never as matplotlib's mathtext.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._results import Results

__all__ = ["cost_distribution", "cost_vs_accuracy", "distribution", "pass_rate"]


def _axes(ax: Any, height: float, width: float = 6.5) -> Any:
    if ax is not None:
        return ax
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(
            "experiments: plots need matplotlib: pip install 'coreagent-sdk[jupyter]'"
        ) from None
    _, made = plt.subplots(figsize=(width, max(1.8, height)), layout="constrained")
    return made


def _text(value: object) -> str:
    # Labels are text, never TeX: every one is drawn with parse_math=False (a grid value
    # holding "$^$" raised mathtext's ValueError at the draw, and "$x$" came out in italics).
    return str(value)


def _varying(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> list[str]:
    from ._results import _hashable

    varying = [n for n in names if len({_hashable(r.get(n)) for r in rows}) > 1]
    return varying or list(names)


def _label(setting: dict[str, Any], names: Sequence[str]) -> str:
    return _text(", ".join(f"{n}={setting[n]}" for n in names)) or "all trials"


def _fixed(rows: Sequence[dict[str, Any]], names: Sequence[str], shown: Sequence[str]) -> str:
    fixed = [n for n in names if n not in shown and rows]
    return _text(", ".join(f"{n}={rows[0].get(n)}" for n in fixed))


def _title(
    ax: Any, rows: Sequence[dict[str, Any]], names: Sequence[str], shown: Sequence[str]
) -> None:
    fixed = _fixed(rows, names, shown)
    if fixed:
        ax.set_title(fixed, fontsize=9, loc="left", parse_math=False)


def _money(values: Sequence[float]) -> tuple[float, str]:
    """A scale and unit that keep cost ticks short: ($, 1), (m$, 1e3) or (µ$, 1e6)."""
    top = max((abs(v) for v in values if v is not None and not math.isnan(v)), default=0.0)
    if top == 0 or top >= 1:
        return 1.0, "$"
    if top >= 1e-3:
        return 1e3, "m$, thousandths of a dollar"
    return 1e6, "µ$, millionths of a dollar"


def _short_ticks(ax: Any, axis: str = "x") -> None:
    from matplotlib.ticker import MaxNLocator

    getattr(ax, f"{axis}axis").set_major_locator(MaxNLocator(nbins=5))


def pass_rate(results: Results, by: str | Sequence[str] | None, ax: Any) -> Any:
    from ._results import INTERVAL

    rows = results.summary_rows(by)
    names = results._by(by)
    shown = _varying(rows, names)
    ax = _axes(ax, 0.35 * len(rows) + 1.2)
    labels = [_label(r, shown) for r in rows]
    rates = [r["pass_rate"] for r in rows]
    errors = [[r["pass_rate"] - r["low"] for r in rows], [r["high"] - r["pass_rate"] for r in rows]]
    positions = list(range(len(rows)))
    ax.barh(positions, rates, xerr=errors, color="#54aeff", capsize=3)
    ax.set_yticks(positions, labels, parse_math=False)
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel(f"pass rate ({INTERVAL}, 95%)")
    _title(ax, rows, names, shown)
    return ax


def distribution(
    results: Results,
    column: str,
    label: str,
    by: str | Sequence[str] | None,
    ax: Any,
    scale: float = 1.0,
) -> Any:
    names = results._by(by)
    groups = results._groups(names)
    settings = [dict(zip(names, key, strict=True)) for key in groups]
    shown = _varying(settings, names)
    ax = _axes(ax, 0.35 * len(groups) + 1.2)
    data = [
        [r[column] * scale for r in rows if r.get(column) is not None] for rows in groups.values()
    ]
    labels = [_label(s, shown) for s in settings]
    try:
        ax.boxplot(data, orientation="horizontal")
    except TypeError:  # matplotlib before 3.10
        ax.boxplot(data, vert=False)
    ax.set_yticks(range(1, len(labels) + 1), labels, parse_math=False)
    ax.invert_yaxis()
    ax.set_xlabel(label)
    _short_ticks(ax)
    _title(ax, settings, names, shown)
    return ax


def _priced(results: Results) -> bool:
    return any(r.get("cost") is not None for r in results.rows)


def cost_distribution(results: Results, by: str | Sequence[str] | None, ax: Any) -> Any:
    if _priced(results):
        scale, unit = _money([r["cost"] for r in results.rows if r.get("cost") is not None])
        return distribution(results, "cost", f"cost per trial ({unit})", by, ax, scale)
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
    shown = _varying(rows, names)
    ax = _axes(ax, 3.2, width=8.0)
    priced = _priced(results)
    raw = [r["mean_cost"] if priced else r["mean_tokens"] for r in rows]
    scale, unit = _money([v for v in raw if v is not None]) if priced else (1.0, "")
    markers = "osD^v<>pPX*h"
    for i, (x, r) in enumerate(zip(raw, rows, strict=True)):
        if x is None or math.isnan(r["pass_rate"]):
            continue
        ax.errorbar(
            [x * scale], [r["pass_rate"]],
            yerr=[[r["pass_rate"] - r["low"]], [r["high"] - r["pass_rate"]]],
            fmt=markers[i % len(markers)], capsize=3, label=_label(r, shown),
        )  # fmt: skip
    ax.set_xlabel(f"mean cost per trial ({unit})" if priced else "mean tokens per trial")
    ax.set_ylabel("pass rate")
    ax.set_ylim(0, 1.05)
    ax.margins(x=0.15)
    _short_ticks(ax)
    if rows:
        # Outside the data, on the right: as many settings as there are, none over a point.
        legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        for text in legend.get_texts():
            text.set_parse_math(False)
    _title(ax, rows, names, shown)
    return ax
