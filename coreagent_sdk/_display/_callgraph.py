"""`CallGraph`: who called whom in a record of calls, with counts, failures and latency.

The invariant: the graph is a summary of records and nothing else. Each
record is counted once, on the edge from the agent whose turn made it (its
parent's peer; "you", outside the fleet, for a root) to the peer it asked;
an agent that took no call still shows when the caller names it (a fleet's
roster). The drawing is an SVG built here from escaped text, with no script
and no stylesheet to fetch, so it shows the same in a live kernel, a saved
notebook, its HTML and the docs; its size is bounded (`MAX_DRAWN` agents,
the busiest kept) and its layout needs no graph library: agents go in
columns by how many hops from outside they were first asked, edges from
left to right, and a call back to an earlier column (or to itself) arcs
over the boxes.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

from .._records import _frames
from . import _render as _display

if TYPE_CHECKING:
    from .._records._record import CallRecord

__all__ = ["OUTSIDE", "CallEdge", "CallGraph", "call_graph"]

OUTSIDE = "you"
"""How the graph names the callers outside the records (a notebook, an application)."""

MAX_DRAWN = 40  # agents drawn at most (the busiest: calls taken and made); the rest counted

_BOX_W, _BOX_H, _COL, _ROW, _PAD = 150, 34, 320, 62, 24


@attrs.frozen
class CallEdge:
    """Calls from one agent to another.

    Attributes:
        caller: The agent whose turns made the calls; None for calls from outside.
        callee: The agent asked.
        calls: How many calls.
        failures: How many of them failed.
        truncated: How many answers were cut at the caller's byte cap.
        median_ms: The median duration of the calls that ended, in ms (None if none did).
    """

    caller: str | None
    callee: str
    calls: int
    failures: int = 0
    truncated: int = 0
    median_ms: float | None = None

    @property
    def label(self) -> str:
        """What the drawing writes on the edge: count, failures, median latency (``12 ms``)."""
        bits = [f"{self.calls:,} call{'s' if self.calls != 1 else ''}"]
        if self.failures:
            bits.append(f"{self.failures:,} failed")
        if self.median_ms is not None:
            bits.append(f"{self.median_ms:,.0f} ms")
        return " · ".join(bits)


@attrs.frozen(repr=False)
class CallGraph:
    """Agents and who called whom (`call_graph(fleet)` or `call_graph(fleet.calls)`).

    Shows as an SVG drawing in a notebook (no script: it stays in a saved
    notebook and the docs), as text in a console; `to_pandas()` gives the
    edges as a table.

    Attributes:
        agents: Every agent, sorted: those called and those the caller named.
        edges: One `CallEdge` per (caller, callee) pair, busiest first.
    """

    agents: tuple[str, ...]
    edges: tuple[CallEdge, ...]

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{e.caller or OUTSIDE} -> {e.callee} ({e.label})" for e in self.edges[:8]
        )
        more = f", and {len(self.edges) - 8} more" if len(self.edges) > 8 else ""
        edges = f"{len(self.edges)} edges: {shown or 'no calls'}{more}"
        return f"CallGraph({len(self.agents)} agents, {edges})"

    def to_pandas(self) -> Any:
        """The edges as a pandas DataFrame (``caller`` is "you" for calls from outside)."""
        rows = [{**attrs.asdict(e), "caller": e.caller or OUTSIDE} for e in self.edges]
        return _frames.frame(
            rows,
            ("caller", "callee", "calls", "failures", "truncated", "median_ms"),
            frozenset(),
        )

    def to_svg(self) -> str:
        """The drawing, as a standalone SVG document's text."""
        return _svg(self)

    def _repr_html_(self) -> str:
        return (
            # As wide as the drawing (the shared frame stops at 60em): scrolls when the page is not.
            f'<div style="{_display.BOX};max-width:none;overflow-x:auto">'
            f'<div style="{_display.TITLE}">{_display.escape(_title(self))}</div>'
            f"{_svg(self)}"
            f'<div style="{_display.NOTE}">each arrow: calls from one agent to another, how '
            "many failed (red) and their median duration; you: calls from outside the "
            "fleet</div></div>"
        )


def _title(graph: CallGraph) -> str:
    calls = sum(e.calls for e in graph.edges)
    return (
        f"CallGraph: {len(graph.agents)} agent{'s' if len(graph.agents) != 1 else ''}, "
        f"{calls:,} call{'s' if calls != 1 else ''}"
    )


def _records_of(source: Any) -> tuple[list[CallRecord], list[str]]:
    """The records (and any agent names) a source holds: a log, a tree, records or a fleet."""
    from .._records._calllog import CallLog, CallRecord
    from .._records._calltree import CallTree

    names: list[str] = []
    roster = getattr(source, "roster", None)
    if callable(roster) and isinstance(getattr(source, "calls", None), CallLog):
        names = [str(getattr(entry, "name", entry)) for entry in roster()]
        source = source.calls
    if isinstance(source, CallLog):
        return source.records(), names
    if isinstance(source, CallTree):
        return list(source.records), names
    if isinstance(source, Iterable) and not isinstance(source, (str, bytes)):
        records = list(source)
        if all(isinstance(r, CallRecord) for r in records):
            return records, names
    raise TypeError(
        f"call_graph: cannot read calls from {type(source).__name__}; give a fleet, a CallLog "
        "(fleet.calls), a CallTree or CallRecords"
    )


def call_graph(source: Any) -> CallGraph:
    """Who called whom: from a simulated fleet (its calls and its roster's agents), a
    `CallLog`, a `CallTree` or `CallRecord`s."""
    records, named = _records_of(source)
    peer_of = {r.call_id: r.peer for r in records}
    grouped: dict[tuple[str | None, str], list[CallRecord]] = {}
    for r in records:
        caller = peer_of.get(r.parent) if r.parent is not None else None
        grouped.setdefault((caller, r.peer), []).append(r)
    edges = []
    for (caller, callee), calls in grouped.items():
        took = [r.duration_ms for r in calls if r.duration_ms is not None and r.ended is not None]
        edges.append(
            CallEdge(
                caller,
                callee,
                len(calls),
                failures=sum(1 for r in calls if r.state == "failed"),
                truncated=sum(1 for r in calls if r.truncated),
                median_ms=float(statistics.median(took)) if took else None,
            )
        )
    edges.sort(key=lambda e: (-e.calls, e.caller or "", e.callee))
    agents = sorted({*named, *(r.peer for r in records)})
    return CallGraph(tuple(agents), tuple(edges))


# --- the drawing ------------------------------------------------------------------


def _columns(graph: CallGraph) -> dict[str | None, int]:
    """Each agent's column: the longest chain of calls from outside that reaches it.

    Longest, not shortest, so a peer asked both from outside and by another
    agent sits right of that agent and every such edge points right. A cycle
    would grow forever: relaxing stops after as many rounds as there are
    agents, and the edges it leaves pointing back are drawn as arcs.
    """
    column: dict[str | None, int] = {None: 0}
    for agent in graph.agents:
        column[agent] = 1
    for _ in range(len(graph.agents)):
        changed = False
        for e in graph.edges:
            if e.caller is not None and e.caller != e.callee:
                want = column[e.caller] + 1
                if want > column[e.callee] and want <= len(graph.agents):
                    column[e.callee] = want
                    changed = True
        if not changed:
            break
    return column


def _cut(text: str, limit: int = 20) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _svg(graph: CallGraph) -> str:
    e = _display.escape
    busiest: dict[str, int] = {}  # calls taken
    busy: dict[str | None, int] = {}  # calls taken and made
    for edge in graph.edges:
        busiest[edge.callee] = busiest.get(edge.callee, 0) + edge.calls
        for end in {edge.caller, edge.callee}:
            busy[end] = busy.get(end, 0) + edge.calls
    drawn = sorted(graph.agents, key=lambda a: (-busy.get(a, 0), a))[:MAX_DRAWN]
    kept = set(drawn)
    edges = [x for x in graph.edges if x.callee in kept and (x.caller is None or x.caller in kept)]
    column = _columns(graph)
    outside = any(x.caller is None for x in edges)
    # By column; the agents that took no call in a row of their own below (no edge crosses it).
    nodes: list[str | None] = ([None] if outside else []) + sorted(
        (a for a in drawn if busiest.get(a, 0)), key=lambda a: (column[a], a)
    )
    idle = sorted(a for a in drawn if not busiest.get(a, 0))
    place: dict[str | None, tuple[float, float]] = {}
    rows: dict[int, int] = {}
    first = 0 if outside else 1
    for node in nodes:
        col = column[node] - first
        row = rows.get(col, 0)
        rows[col] = row + 1
        place[node] = (_PAD + col * _COL, _PAD + 18 + row * _ROW)
    below = _PAD + 18 + max(rows.values(), default=0) * _ROW + (12 if rows else 0)
    per_row = max(1, max(rows, default=0) + 1) * 2  # two idle boxes per column's width
    for i, agent in enumerate(idle):
        place[agent] = (
            _PAD + (i % per_row) * (_COL / 2),
            below + 16 + (i // per_row) * (_BOX_H + 12),
        )
    nodes += idle
    width = (
        _PAD * 2
        + max(max(rows, default=0) * _COL, (min(len(idle), per_row) - 1) * _COL / 2)
        + _BOX_W
    )
    height = max(y for _, y in place.values()) + _BOX_H + _PAD + 14 if place else 2 * _PAD
    uid = hashlib.sha1(repr((graph.agents, graph.edges)).encode()).hexdigest()[:10]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" font-family="ui-monospace,Menlo,monospace" '
        'font-size="12">',
        f"<title>{e(_title(graph))}</title>",
        f'<defs><marker id="arrow-{uid}" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#57606a"/></marker>'
        f'<marker id="arrow-bad-{uid}" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#cf222e"/></marker></defs>',
    ]
    labels = []
    incoming: dict[str, int] = {}
    for edge in edges:
        (x0, y0), (x1, y1) = place[edge.caller], place[edge.callee]
        colour = "#cf222e" if edge.failures else "#57606a"
        marker = f"arrow-bad-{uid}" if edge.failures else f"arrow-{uid}"
        stroke = min(1.0 + edge.calls.bit_length() * 0.6, 5.0)
        if edge.caller == edge.callee:  # a call to itself: a loop above its box
            sx, sy = x0 + _BOX_W * 0.35, y0
            path = f"M{sx},{sy} C{sx - 10},{sy - 40} {sx + 60},{sy - 40} {sx + 50},{sy}"
            lx, ly, anchor = sx + 20, sy - 32, "middle"
        elif x1 > x0:  # forward: right side to left side; the label just before the target
            sx, sy, tx, ty = x0 + _BOX_W, y0 + _BOX_H / 2, x1, y1 + _BOX_H / 2
            mid = (sx + tx) / 2
            path = f"M{sx},{sy} C{mid},{sy} {mid},{ty} {tx},{ty}"
            anchor = "end"
            stacked = incoming.get(edge.callee, 0)
            incoming[edge.callee] = stacked + 1
            lx, ly = tx - 10, ty - 7 - 13 * stacked
        else:  # back or sideways: an arc over the boxes, top to top
            sx, sy, tx, ty = x0 + _BOX_W / 2, y0, x1 + _BOX_W / 2 + 8, y1
            lift = min(sy, ty) - 30 - abs(sx - tx) / 8
            path = f"M{sx},{sy} C{sx},{lift} {tx},{lift} {tx},{ty}"
            lx, ly, anchor = (sx + tx) / 2, lift + 18, "middle"
        out.append(
            f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="{stroke:.1f}" '
            f'marker-end="url(#{marker})"/>'
        )
        labels.append(
            f'<text x="{lx:.0f}" y="{ly:.0f}" text-anchor="{anchor}" font-size="11" '
            f'fill="{colour}" stroke="#fff" stroke-width="3" paint-order="stroke">'
            f"{e(edge.label)}</text>"
        )
    for node in nodes:
        x, y = place[node]
        called = node is None or busiest.get(node, 0) > 0
        dash = ' stroke-dasharray="4 3"' if node is None or not called else ""
        fill = "#f6f8fa" if node is None else ("#ddf4ff" if called else "#fff")
        name = OUTSIDE if node is None else node
        out.append(
            f'<g><title>{e(name)}</title><rect x="{x}" y="{y}" width="{_BOX_W}" '
            f'height="{_BOX_H}" rx="6" fill="{fill}" stroke="#57606a"{dash}/>'
            f'<text x="{x + _BOX_W / 2}" y="{y + _BOX_H / 2 + 4}" text-anchor="middle" '
            f'fill="#1f2328">{e(_cut(name))}</text></g>'
        )
    if idle:
        out.append(
            f'<text x="{_PAD}" y="{below + 8}" fill="#57606a" font-size="11">took no calls:</text>'
        )
    out.extend(labels)  # over the boxes and lines, so no label is hidden
    hidden = len(graph.agents) - len(drawn)
    if hidden > 0:
        out.append(
            f'<text x="{_PAD}" y="{height - 8}" fill="#57606a">'
            f"{e(f'{hidden:,} more agents not drawn (the busiest {MAX_DRAWN} are)')}</text>"
        )
    out.append("</svg>")
    return "".join(out)
