"""`CallTree`: calls arranged under the call whose turn made them (delegation trees).

The invariant: every record of the snapshot appears exactly once. A record
sits under its parent when the parent is in the same snapshot; otherwise
(a call made from outside, or a parent already dropped from a bounded log)
it is a root. Parent ids come from a fleet's bookkeeping but a log can be fed
by hand, so a cycle of parent ids is possible: the walk is iterative and
shows a record reached twice only once, so it cannot loop or recurse deep.

Inside a call, its turn's steps (model rounds, tool calls) come in order,
and each sub-call sits under the ``call_peer`` step that made it (matched by
peer and session); a sub-call no step claims follows the steps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ._usage import TokenUsage

if TYPE_CHECKING:
    from ._pricing import PriceTable
    from ._record import CallRecord
    from ._steps import TurnStep

__all__ = ["CallTree"]


@attrs.frozen(repr=False)
class CallTree:
    """A snapshot of calls as delegation trees (from `CallLog.tree()` or a fleet's `calls`).

    ``records`` are the calls, in any order; each one's ``parent`` is the
    ``call_id`` of the call whose turn made it. Roots and siblings are ordered
    by start time. Shows as an indented table in a notebook and as a text tree
    in a console.

    Attributes:
        records: The calls the tree arranges (`CallRecord`s), in any order.
        epoch: The wall-clock time (Unix seconds) of the records' time 0, when known
            (a `CallLog`'s tree knows it); spans exported from the tree use it.
        opened: Show every level open (HTML) and every step (text), as
            `delegation` does; False (the default) shows each call collapsed.
    """

    records: tuple[CallRecord, ...]
    epoch: float | None = attrs.field(default=None, kw_only=True)
    opened: bool = attrs.field(default=False, kw_only=True)

    def __repr__(self) -> str:
        from .._display import _render as _display  # at display time only

        return _display.tree_text(self)

    def _repr_html_(self) -> str:
        from .._display import _render as _display  # at display time only

        return _display.tree_html(self)

    def _children(self) -> dict[int | None, list[CallRecord]]:
        present = {r.call_id for r in self.records}
        children: dict[int | None, list[CallRecord]] = {}
        for record in sorted(self.records, key=lambda r: (r.started, r.call_id)):
            parent = record.parent if record.parent in present else None
            children.setdefault(parent, []).append(record)
        return children

    def roots(self) -> list[CallRecord]:
        """The calls made from outside the tree (or whose parent is not in it), oldest first."""
        return list(self._children().get(None, []))

    def children(self, call_id: int) -> list[CallRecord]:
        """The calls that call ``call_id``'s turn made, oldest first."""
        return list(self._children().get(call_id, []))

    def to_pandas(self, *, steps: bool = False) -> Any:
        """A pandas DataFrame (needs the ``jupyter`` extra).

        One row per call in the tree's order, each under its caller, with its
        ``root`` call and ``depth`` (0 for a root) and `CallLog.to_pandas`'s
        columns; with ``steps=True``, one row per step of every turn instead
        (``kind``, ``name``, ``duration_ms``, tokens, ``sent``, ``received``).
        """
        from . import _frames  # tables are built when asked for (pandas is lazy too)

        return _frames.steps_frame(self) if steps else _frames.tree_frame(self)

    def usage(self, prices: PriceTable | None = None) -> TokenUsage:
        """Tokens per turn and per agent in this tree, priced by ``prices`` (`CallLog.usage`)."""
        return TokenUsage.of(self.records, prices)

    def delegation(self, call_id: int, *, opened: bool = True) -> CallTree:
        """The call ``call_id`` and every call under it, shown opened down to each step.

        ``tree.delegation(tree.roots()[-1].call_id)`` is the newest delegation,
        every model round and tool call in view (``opened=False``: collapsed).

        Raises:
            KeyError: No call ``call_id`` in the tree; names the ids it has.
        """
        if not any(r.call_id == call_id for r in self.records):
            ids = ", ".join(str(r.call_id) for r in self.roots()[:20])
            raise KeyError(
                f"CallTree.delegation: no call {call_id!r} in this tree "
                f"(its roots: {ids or 'none'}); pick one from tree.roots()"
            )
        children = self._children()
        kept: dict[int, CallRecord] = {}
        stack = [next(r for r in self.records if r.call_id == call_id)]
        while stack:
            record = stack.pop()
            if record.call_id in kept:
                continue
            kept[record.call_id] = record
            stack.extend(children.get(record.call_id, []))
        # The chosen call is the root even when its own parent is in the records.
        records = tuple(
            attrs.evolve(r, parent=None) if r.call_id == call_id else r for r in kept.values()
        )
        return CallTree(records, epoch=self.epoch, opened=opened)

    def export_spans(self, tracer_provider: Any = None) -> int:
        """Write the tree as OpenTelemetry spans: one trace per root call (``otel`` extra).

        Each call is an ``invoke_agent {peer}`` span; inside it, its turn's
        model rounds (``chat {model}``) and tool calls (``execute_tool
        {tool}``), and under a ``call_peer`` tool call the sub-call it made,
        with the record's own times. Spans go to ``tracer_provider`` (the
        global one when None) and carry names, tokens, times and outcomes,
        never a prompt or an answer. Returns how many spans were made.
        """
        from ._tree_spans import export_spans

        return export_spans(self, tracer_provider)

    def inside(
        self, call_id: int
    ) -> tuple[list[tuple[TurnStep, list[CallRecord]]], list[CallRecord]]:
        """What call ``call_id``'s turn did: its steps, each with the sub-calls it made, in order.

        A ``call_peer`` step claims the sub-call to its peer whose session it
        names; the second part is the sub-calls no step claims (a behaviour
        that calls peers without recording steps), oldest first.
        """
        record = next((r for r in self.records if r.call_id == call_id), None)
        kids = self.children(call_id)
        if record is None:
            return [], kids
        return claim(record, kids)

    def walk(self) -> Iterator[tuple[str, CallRecord]]:
        """Depth first, roots oldest first: ``(prefix, record)``, the prefix drawing the branches.

        The prefix is ``""`` for a root and box-drawing text such as
        ``"│   └── "`` below it, so ``prefix + record.peer`` draws the tree.
        """
        children = self._children()
        seen: set[int] = set()
        # (record, the prefix its own line gets, the prefix its children's lines extend)
        stack: list[tuple[CallRecord, str, str]] = [
            (r, "", "") for r in reversed(children.get(None, []))
        ]
        if not stack and self.records:  # every record is in a cycle: start anywhere
            first = min(self.records, key=lambda r: (r.started, r.call_id))
            stack = [(first, "", "")]
        while stack:
            record, prefix, inner = stack.pop()
            if record.call_id in seen:
                continue
            seen.add(record.call_id)
            yield prefix, record
            kids: Sequence[CallRecord] = children.get(record.call_id, [])
            for i in range(len(kids) - 1, -1, -1):
                last = i == len(kids) - 1
                stack.append(
                    (
                        kids[i],
                        inner + ("└── " if last else "├── "),
                        inner + ("    " if last else "│   "),
                    )
                )
        for record in self.records:  # left over only from a cycle cut off above: as roots
            if record.call_id not in seen:
                seen.add(record.call_id)
                yield "", record

    def depth(self) -> int:
        """Levels in the deepest tree (0 when empty, 1 when no call made another)."""
        deepest = 0
        for prefix, _ in self.walk():
            deepest = max(deepest, len(prefix) // 4 + 1)
        return deepest


def claim(
    record: CallRecord, kids: Sequence[CallRecord]
) -> tuple[list[tuple[TurnStep, list[CallRecord]]], list[CallRecord]]:
    """`record`'s steps, each with the sub-calls (of `kids`) it made; then the unclaimed kids."""
    by_session = {(k.peer, k.session_id): k for k in kids if k.session_id}
    claimed: set[int] = set()
    steps: list[tuple[TurnStep, list[CallRecord]]] = []
    # In the order they started: parallel tool calls are reported as each one ends.
    for step in sorted(record.steps, key=lambda s: s.started):
        made: list[CallRecord] = []
        if step.kind == "tool" and step.session_id:
            kid = by_session.get((step.peer, step.session_id))
            if kid is not None and kid.call_id not in claimed:
                claimed.add(kid.call_id)
                made.append(kid)
        steps.append((step, made))
    return steps, [k for k in kids if k.call_id not in claimed]
