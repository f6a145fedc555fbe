"""Per-case diffs: two runs, or two settings of one run, side by side case by case.

A pass rate that moved from 80% to 70% says nothing of *which* cases moved:
two cases may have broken and one been fixed. `CaseDiff` pairs the trials
of the two sides by case (and repetition, and the other parameters), and
says of each pair whether it was fixed, broke, or stayed the same, with
both answers and both call trees one click away in the HTML (a
``<details>`` each, no script, so a saved notebook opens them too).

Everything that came from a run is escaped before it enters markup, and
the table is bounded: the flipped pairs only (`_SHOWN` at most), then a line
counting the pairs that stayed the same (``.to_pandas()`` has every pair).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from coreagent_sdk import escape_html

if TYPE_CHECKING:
    from ._results import Results

__all__ = ["CaseDiff", "case_diff"]

_SHOWN = 20
_CELL = "text-align:left;padding:1px 10px 1px 0;vertical-align:top"
_COLOURS = {"fixed": "#1a7f37", "broke": "#cf222e"}
_ORDER = {"broke": 0, "fixed": 1, "same: failed": 2, "same: passed": 3, "one side only": 4}


_e = escape_html  # the core's escaping: controls and bidi overrides shown as escapes


@attrs.frozen(repr=False)
class CaseDiff:
    """The trials of two sides paired by case: which flipped, with answers and trees.

    From `Results.case_diff(before, after)` (two runs) or
    `results.compare_cases(param, baseline, value)` (two settings of one run).

    Attributes:
        before: A name for the first side (``"before"``, or ``"persona='terse'"``).
        after: A name for the second side.
        rows: One dict per pair: the pairing columns (case, repetition, other
            parameters), ``before_passed``, ``after_passed``, ``change`` ("fixed",
            "broke", "same: passed", "same: failed", "one side only"), both answers
            and both trial keys (for `Results.tree`).
        sides: The two `Results` the rows come from (their trees are drawn from them).
    """

    before: str
    after: str
    rows: tuple[dict[str, Any], ...]
    sides: tuple[Results, Results] = attrs.field(eq=False)

    @property
    def flipped(self) -> list[dict[str, Any]]:
        """The pairs that were fixed or broke."""
        return [r for r in self.rows if r["change"] in ("fixed", "broke")]

    def counts(self) -> dict[str, int]:
        """Pairs per change."""
        found: dict[str, int] = {}
        for row in self.rows:
            found[row["change"]] = found.get(row["change"], 0) + 1
        return found

    def to_pandas(self) -> Any:
        """The pairs as a DataFrame, one row per pair (needs the `experiments` extra)."""
        from ._results import _pandas

        return _pandas().DataFrame.from_records(list(self.rows))

    def __repr__(self) -> str:
        counts = ", ".join(f"{n} {change}" for change, n in sorted(
            self.counts().items(), key=lambda item: _ORDER.get(item[0], 9)
        ))  # fmt: skip
        return f"CaseDiff({self.before} -> {self.after}: {len(self.rows)} pairs: {counts})"

    def _repr_html_(self) -> str:
        ordered = [r for r in self.rows if r["change"] in ("fixed", "broke", "one side only")]
        ordered.sort(key=lambda r: _ORDER.get(r["change"], 9))
        body = []
        for row in ordered[:_SHOWN]:
            change = row["change"]
            colour = _COLOURS.get(change, "#57606a")
            trees = ""
            if change in ("fixed", "broke"):
                parts = []
                for side, key in ((0, row["before_key"]), (1, row["after_key"])):
                    tree = self.sides[side].tree(key)._repr_html_()
                    label = self.before if side == 0 else self.after
                    parts.append(
                        f"<details><summary>{_e(label)}: call tree</summary>{tree}</details>"
                    )
                trees = "".join(parts)
            others = ", ".join(
                f"{k}={v}" for k, v in row.items()
                if k not in _SIDE_COLUMNS and k not in ("change", "case", "repetition")
            )  # fmt: skip
            where = f"{_e(row['case'])} #{_e(row['repetition'])}" + (
                f'<div style="color:#57606a">{_e(others)}</div>' if others else ""
            )
            body.append(
                f'<tr><td style="{_CELL}">{where}</td>'
                f'<td style="{_CELL};color:{colour};font-weight:600">{_e(change)}</td>'
                f'<td style="{_CELL}">{_e(_short(row["before_answer"]))}</td>'
                f'<td style="{_CELL}">{_e(_short(row["after_answer"]))}{trees}</td></tr>'
            )
        same = len(self.rows) - len(ordered)
        hidden = max(0, len(ordered) - _SHOWN)
        more = (
            f'<div style="color:#57606a">{f"+{hidden} more flipped, " if hidden else ""}'
            f"{same} pairs the same: .to_pandas() has every pair</div>"
        )
        head = "".join(
            f'<th style="{_CELL}">{_e(h)}</th>'
            for h in (
                "case #repetition",
                "change",
                f"{self.before}: answer",
                f"{self.after}: answer",
            )
        )
        return (
            '<div style="font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;'
            "border:1px solid #d0d7de;border-radius:4px;padding:6px 8px;color:#1f2328;"
            f'background:#fff"><div style="font-weight:600">{_e(repr(self))}</div>'
            f'<div style="overflow-x:auto"><table style="border-collapse:collapse"><tr>{head}</tr>'
            f"{''.join(body)}</table></div>{more}</div>"
        )


_SIDE_COLUMNS = frozenset(
    {"before_passed", "after_passed", "before_answer", "after_answer", "before_key", "after_key"}
)


def _short(text: str | None, most: int = 160) -> str:
    if text is None:
        return "(no answer)"
    return text if len(text) <= most else text[:most] + "…"


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["scenario"], row["params"], row["case"], row["seed"], row["repetition"])


def case_diff(
    before: Results,
    after: Results,
    names: tuple[str, str],
    before_rows: Sequence[dict[str, Any]],
    after_rows: Sequence[dict[str, Any]],
    pair_on: Sequence[str],
) -> CaseDiff:
    """Pair `before_rows` with `after_rows` on the columns `pair_on` (with case, repetition)."""
    from ._results import _hashable

    def pair_key(row: dict[str, Any]) -> tuple[Any, ...]:
        return (*(_hashable(row.get(n)) for n in pair_on), row["case"], row["repetition"])

    old = {pair_key(r): r for r in before_rows}
    new = {pair_key(r): r for r in after_rows}
    rows = []
    for key in [*old, *(k for k in new if k not in old)]:
        a, b = old.get(key), new.get(key)
        if a is not None and b is not None:
            pa, pb = bool(a["passed"]), bool(b["passed"])
            change = ("fixed" if pb else "broke") if pa != pb else (
                "same: passed" if pa else "same: failed"
            )  # fmt: skip
        else:
            change = "one side only"
        either = a if a is not None else b
        assert either is not None
        rows.append(
            {
                "case": either["case"],
                "repetition": either["repetition"],
                **{n: either.get(n) for n in pair_on},
                "change": change,
                "before_passed": a["passed"] if a else None,
                "after_passed": b["passed"] if b else None,
                "before_answer": (a.get("answer") or a.get("error")) if a else None,
                "after_answer": (b.get("answer") or b.get("error")) if b else None,
                "before_key": _key(a) if a else None,
                "after_key": _key(b) if b else None,
            }
        )
    return CaseDiff(names[0], names[1], tuple(rows), (before, after))
