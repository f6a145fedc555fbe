"""A trial's call tree that explains the trial: its scores, the route expected and taken.

Every call of a failed trial can have finished well (the router asked the
wrong specialist, who answered): a bare `CallTree` then shows only green
"finished" badges. `TrialTree` is that tree with the trial's row beside it:
a headline saying passed or failed and by which checks, the expected peer
against the one asked, and a mark on the call where the route went wrong
(the entry's first delegation, when it went to another peer than the
case's ``expected_peer``). It is a `CallTree`, so everything a tree does
(walk, usage, spans, delegation) works on it unchanged.

What came from the run (names, values) is escaped before it enters markup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from coreagent_sdk import CallTree, escape_html

__all__ = ["TrialTree"]

_OK, _BAD, _GREY = "#1a7f37", "#cf222e", "#57606a"
_BOX = (
    "font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;"
    "border:1px solid #d0d7de;border-radius:4px;padding:6px 8px;margin:2px 0 0 0;"
    "color:#1f2328;background:#fff"
)


_e = escape_html  # the core's escaping: controls and bidi overrides shown as escapes


def _badge(text: str, colour: str) -> str:
    return (
        f'<span style="border:1px solid {colour};color:{colour};border-radius:8px;'
        f'padding:0 5px;margin-right:3px">{_e(text)}</span>'
    )


@attrs.frozen(repr=False)
class TrialTree(CallTree):
    """The call tree of one trial, with what the trial scored (`Results.tree` returns one).

    Attributes:
        trial: The trial's key and setting: scenario, params, case, seed, repetition.
        passed: Whether the trial passed (every check that applied was True).
        scores: Each scorer's value (None: did not apply).
        expected_peer: The peer the case expected the entry to ask first, or None.
        asked: The peer the entry asked first, or None.
        wrong_call: The ``call_id`` of the call where the route went wrong, or None.
    """

    trial: Mapping[str, Any] = attrs.field(factory=dict, kw_only=True)
    passed: bool | None = attrs.field(default=None, kw_only=True)
    scores: Mapping[str, Any] = attrs.field(factory=dict, kw_only=True)
    expected_peer: str | None = attrs.field(default=None, kw_only=True)
    asked: str | None = attrs.field(default=None, kw_only=True)
    wrong_call: int | None = attrs.field(default=None, kw_only=True)

    def _failed_checks(self) -> list[str]:
        return [name for name, value in self.scores.items() if value is False]

    def _headline(self) -> str:
        t = self.trial
        verdict = "passed" if self.passed else "FAILED"
        failed = self._failed_checks()
        why = f" ({', '.join(failed)})" if failed and not self.passed else ""
        return (
            f"trial {t.get('params')} case {t.get('case')!r} repetition "
            f"{t.get('repetition')}: {verdict}{why}"
        )

    def _route(self) -> str | None:
        if self.expected_peer is None:
            return None
        mark = "right" if self.asked == self.expected_peer else "wrong"
        return f"route: expected {self.expected_peer!r}, asked {self.asked!r} ({mark})"

    def __repr__(self) -> str:
        lines = [self._headline()]
        route = self._route()
        if route:
            lines.append(route)
        scores = ", ".join(f"{k}={v!r}" for k, v in self.scores.items())
        if scores:
            lines.append(f"scores: {scores}")
        tree = super().__repr__().splitlines()
        if self.wrong_call is not None:
            walked = [r.call_id for _, r in self.walk()]
            if self.wrong_call in walked and walked.index(self.wrong_call) + 1 < len(tree):
                at = walked.index(self.wrong_call) + 1
                tree[at] += f"   <-- wrong route: expected {self.expected_peer!r}"
        return "\n".join([*lines, *tree])

    def _repr_html_(self) -> str:
        colour = _OK if self.passed else _BAD
        head = [f'<div style="font-weight:600;color:{colour}">{_e(self._headline())}</div>']
        route = self._route()
        if route:
            wrong = self.asked != self.expected_peer
            head.append(
                f"<div>{_badge('route', _BAD if wrong else _OK)} expected "
                f"<b>{_e(self.expected_peer)}</b>, asked <b>{_e(self.asked)}</b>"
                + (f" (call {self.wrong_call})" if wrong and self.wrong_call is not None else "")
                + "</div>"
            )
        badges = "".join(
            _badge(f"{k}: {v}", _GREY if v is None else _OK if v is not False else _BAD)
            if isinstance(v, bool) or v is None
            else _badge(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}", _GREY)
            for k, v in self.scores.items()
        )
        if badges:
            head.append(f"<div>{badges}</div>")
        tree = super()._repr_html_()
        if self.wrong_call is not None:
            # The tree's own markup names each call "call N" in its summary line: the mark
            # goes right after the wrong one's, so the place is seen without opening it.
            mark = " " + _badge(f"wrong route: expected {self.expected_peer}", _BAD)
            tree = re.sub(
                rf"(?<![0-9])call {self.wrong_call}</span>",
                lambda found: found.group(0) + mark,
                tree,
                count=1,
            )
        return f'<div style="{_BOX}">{"".join(head)}</div>{tree}'


def trial_tree(tree: CallTree, row: Mapping[str, Any], scores: list[str]) -> TrialTree:
    """`tree` with the trial's row beside it."""
    expected, asked = row.get("expected_peer"), row.get("asked")
    wrong = None
    if expected is not None and asked != expected:
        roots = tree.roots()
        first = tree.children(roots[0].call_id) if roots else []
        wrong = first[0].call_id if first else (roots[0].call_id if roots else None)
    return TrialTree(
        tree.records,
        epoch=tree.epoch,
        trial={k: row.get(k) for k in ("scenario", "params", "case", "seed", "repetition")},
        passed=row.get("passed"),
        scores={name: row.get(name) for name in scores},
        expected_peer=expected,
        asked=asked,
        wrong_call=wrong,
    )
