"""How `Results` look: a short text in a console, an HTML table in a notebook.

Every string that came from a run (parameter values, case names, peer
names, error kinds) goes through the core's `escape_html` before it enters markup, and
all markup is built here. Styles are inline, there is no script, and the
table is bounded (`_SHOWN` settings, then a line saying how many more).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from coreagent_sdk import escape_html

if TYPE_CHECKING:
    from ._results import Results

__all__ = ["results_html", "results_text"]

_SHOWN = 50
_BOX = (
    "font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;"
    "border:1px solid #d0d7de;border-radius:4px;padding:6px 8px;margin:2px 0;"
    "max-width:70em;color:#1f2328;background:#fff"
)
_CELL = "text-align:left;padding:1px 10px 1px 0;vertical-align:middle"


# The core's own escaping: controls and bidi overrides a peer or a case holds are shown as
# escapes, not passed raw into the table (html.escape alone let U+202E turn a row around).
_e = escape_html


def _headline(results: Results) -> str:
    passed = sum(1 for r in results.rows if r["passed"])
    parts = [f"{len(results)} trials", f"{passed} passed"]
    costs = [r["cost"] for r in results.rows if r.get("cost") is not None]
    if costs:
        parts.append(f"${math.fsum(costs):.3g} spent")
    if results.skipped:
        parts.append(f"{results.skipped} already done")
    if results.stopped:
        parts.append(f"stopped: {results.stopped}")
    return ", ".join(parts)


def results_text(results: Results) -> str:
    """``Results(300 trials, 241 passed, stopped: interrupted)``."""
    return f"Results({_headline(results)})"


def _money(value: float | None) -> str:
    # Simulated models cost millionths of a dollar a trial: significant digits, not cents.
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.3g}"


def _pct(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:.0f}%"


def _bar(rate: float, low: float, high: float) -> str:
    # The rate as a filled bar, the interval as a thin line across it: a glance, not a plot.
    if math.isnan(rate):
        return ""
    return (
        '<div style="position:relative;width:120px;height:10px;background:#eaeef2">'
        f'<div style="position:absolute;left:0;top:0;height:10px;width:{120 * rate:.1f}px;'
        'background:#54aeff"></div>'
        f'<div style="position:absolute;top:4px;height:2px;left:{120 * low:.1f}px;'
        f'width:{max(1.0, 120 * (high - low)):.1f}px;background:#1f2328"></div></div>'
    )


def results_html(results: Results) -> str:
    """A pass-rate table per setting, with Wilson intervals and a bar each."""
    from ._results import INTERVAL

    rows = results.summary_rows() if results.rows else []
    names = results.params
    priced = any(r.get("mean_cost") is not None for r in rows)
    head = "".join(f'<th style="{_CELL}">{_e(n)}</th>' for n in names)
    head += "".join(
        f'<th style="{_CELL}">{h}</th>'
        for h in ("trials", "pass rate", "95% interval", "", "errors", "mean ms", "mean tokens",
                  *(("mean cost ($)", "95% interval") if priced else ()))
    )  # fmt: skip
    body = []
    for row in rows[:_SHOWN]:
        cells = "".join(f'<td style="{_CELL}">{_e(row[n])}</td>' for n in names)
        cells += (
            f'<td style="{_CELL}">{row["trials"]}</td>'
            f'<td style="{_CELL}">{_pct(row["pass_rate"])}</td>'
            f'<td style="{_CELL}">{_pct(row["low"])}&ndash;{_pct(row["high"])}</td>'
            f'<td style="{_CELL}">{_bar(row["pass_rate"], row["low"], row["high"])}</td>'
            f'<td style="{_CELL}">{row["errors"]}</td>'
            f'<td style="{_CELL}">{row["mean_ms"]:.1f}</td>'
            f'<td style="{_CELL}">{row["mean_tokens"]:.0f}</td>'
        )
        if priced:
            cells += (
                f'<td style="{_CELL}">{_money(row["mean_cost"])}</td>'
                f'<td style="{_CELL}">{_money(row["mean_cost_low"])}&ndash;'
                f"{_money(row['mean_cost_high'])}</td>"
            )
        body.append(f"<tr>{cells}</tr>")
    more = (
        f'<div style="color:#57606a">+{len(rows) - _SHOWN} more settings: '
        "results.summary() has them all</div>"
        if len(rows) > _SHOWN
        else ""
    )
    return (
        f'<div style="{_BOX}"><div style="font-weight:600">Results: {_e(_headline(results))}'
        f'</div><div style="overflow-x:auto"><table style="border-collapse:collapse">'
        f"<tr>{head}</tr>{''.join(body)}</table></div>{more}"
        f'<div style="color:#57606a">intervals: {_e(INTERVAL)} (95%)</div></div>'
    )
