"""How the SDK's values look in a notebook (HTML) and in a console (text).

The invariant: every string that came from a peer, a hub, a registry or a
user passes through `_e` (HTML escaping, quotes included) before it enters
markup, and all markup is built here, so reviewing the escaping means
reviewing this one module (and `_callgraph`'s SVG, which escapes with this
module's `escape`). A peer answering `<script>` shows that text.

Styles are inline and there is no script, so the output renders the same in
JupyterLab, VS Code, nbviewer and the documentation, and stays readable
where a front end strips styles (as xarray's reprs do). Everything printed
is bounded: an answer shows its first `_SHOWN_CHARS` characters, a table its
first `_SHOWN_ROWS` rows, and each says how much more there is.

The classes own no markup: each gains a `_repr_html_` (and a readable
`__repr__`) that calls a function here.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .._attach._quote import names_text
from .._unshown import shown_text

if TYPE_CHECKING:
    from .._peer._call_peer import CallPeerResult
    from .._peer._directory import Peer
    from .._records._calltree import CallTree
    from .._records._record import CallRecord
    from .._records._steps import TurnStep
    from .._runtime._runtime_cache import CacheStats, RuntimeCache

__all__ = [
    "BOX",
    "NOTE",
    "TITLE",
    "CacheState",
    "cache_html",
    "cache_state",
    "cache_text",
    "calls_html",
    "escape",
    "escape_html",
    "fleet_html",
    "result_html",
    "result_text",
    "roster_html",
    "roster_text",
    "short",
    "table_html",
    "tree_html",
    "tree_text",
]

_SHOWN_CHARS = 20_000  # of an answer, in HTML; the text repr shows far less
_SHOWN_ROWS = 200
_TEXT_CHARS = 60

_BOX = (
    "font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;"
    "border:1px solid #d0d7de;border-radius:4px;padding:6px 8px;margin:2px 0;"
    "max-width:60em;color:#1f2328;background:#fff"
)
_TH = "text-align:left;padding:1px 10px 1px 0;color:#57606a;font-weight:600"
_TD = "text-align:left;padding:1px 10px 1px 0;vertical-align:top"
_TITLE = "font-weight:600;margin-bottom:4px"
_NOTE = "color:#57606a;margin-top:4px"
_ANSWER = (
    "max-height:14em;overflow:auto;white-space:pre-wrap;word-break:break-word;"
    "background:#f6f8fa;border-radius:3px;padding:4px 6px;margin:4px 0 0 0"
)
_COLOURS = {
    "finished": "#1a7f37",
    "truncated": "#bf8700",
    "failed": "#cf222e",
    "running": "#0969da",
    "expired": "#cf222e",
    "live": "#1a7f37",
}


def escape_html(value: object) -> str:
    """`value` as text that HTML (or SVG) may carry, as the SDK's own notebook views show it.

    `html.escape` (quotes included), after showing as escapes (``\\x1b``, ``\\u202e``)
    what markup must not carry as it is: control characters but tab and line breaks, DEL
    and the C1 controls, lone surrogates, U+FFFE/U+FFFF, the line and paragraph
    separators, and the bidi controls, which would turn the rest of a line around (a peer
    named ``"admin\\u202e"`` made a call's "0.2 ms · failed" read "deliaf · sm 2.0"). Use
    it for whatever a peer, a model or a run said, in views of your own.
    """
    return html.escape(shown_text(str(value)), quote=True)


_e = escape_html  # the only way a value enters markup


escape = _e
BOX = _BOX  # the frame, the title line and the note every view shares
TITLE = _TITLE
NOTE = _NOTE


def short(text: str, limit: int = _TEXT_CHARS) -> str:
    """`text` cut to `limit` characters, with how many more there were."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... (+{len(text) - limit} chars)"


def _badge(label: str, colour: str) -> str:
    return (
        f'<span style="display:inline-block;padding:0 6px;border-radius:8px;'
        f'color:#fff;background:{colour};font-size:11px">{_e(label)}</span>'
    )


def _bar(used: int, cap: int) -> str:
    share = 0.0 if cap <= 0 else min(1.0, used / cap)
    colour = _COLOURS["truncated"] if share >= 1.0 else _COLOURS["running"]
    return (
        '<span style="display:inline-block;vertical-align:middle;width:10em;height:0.7em;'
        'background:#eaeef2;border-radius:3px;overflow:hidden">'
        f'<span style="display:block;height:100%;width:{share * 100:.1f}%;'
        f'background:{colour}"></span></span>'
    )


def _labels(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def table_html(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    title: str = "",
    note: str = "",
    raw_columns: frozenset[int] = frozenset(),
) -> str:
    """A small table; cells are escaped except those in `raw_columns` (markup made here)."""
    out = [f'<div style="{_BOX}">']
    if title:
        out.append(f'<div style="{_TITLE}">{_e(title)}</div>')
    out.append('<table style="border-collapse:collapse;margin:0">')
    out.append("<tr>" + "".join(f'<th style="{_TH}">{_e(h)}</th>' for h in headers) + "</tr>")
    shown = 0
    more = 0
    for row in rows:
        if shown >= _SHOWN_ROWS:
            more += 1
            continue
        shown += 1
        cells = (str(c) if i in raw_columns else _e(c) for i, c in enumerate(row))
        out.append("<tr>" + "".join(f'<td style="{_TD}">{c}</td>' for c in cells) + "</tr>")
    out.append("</table>")
    if more:
        note = f"{note} and {more} more rows not shown".strip()
    if not shown:
        note = note or "empty"
    if note:
        out.append(f'<div style="{_NOTE}">{_e(note)}</div>')
    out.append("</div>")
    return "".join(out)


# --- CallPeerResult ----------------------------------------------------------------


def _size(result: CallPeerResult) -> int:
    return len(result.response.encode())


def result_text(result: CallPeerResult) -> str:
    cap = "" if result.max_response_bytes is None else f"/{result.max_response_bytes}"
    return (
        f"CallPeerResult(peer={result.peer!r}, session_id={result.session_id!r}, "
        f"duration_ms={result.duration_ms}, truncated={result.truncated}, "
        f"bytes={_size(result)}{cap}, response={short(result.response)})"
    )


def result_html(result: CallPeerResult) -> str:
    size = _size(result)
    cap = result.max_response_bytes
    badge = (
        _badge("truncated", _COLOURS["truncated"])
        if result.truncated
        else _badge("complete", _COLOURS["finished"])
    )
    bar = f"{_bar(size, cap)} {size:,} / {cap:,} bytes" if cap else f"{size:,} bytes"
    text = result.response
    cut = ""
    if len(text) > _SHOWN_CHARS:
        cut = f"... {len(text) - _SHOWN_CHARS:,} more characters not shown"
        text = text[:_SHOWN_CHARS]
    rest = (
        f'<div style="{_NOTE}">the byte cap cut the answer; the whole of it is in session '
        f"{_e(result.session_id)} on the peer: <code>await tool.read_answer(result)</code> "
        "reads it back</div>"
        if result.truncated
        else ""
    )
    return (
        f'<div style="{_BOX}">'
        f'<div style="{_TITLE}">CallPeerResult {badge}</div>'
        '<table style="border-collapse:collapse;margin:0">'
        f'<tr><th style="{_TH}">peer</th><td style="{_TD}">{_e(result.peer)}</td></tr>'
        f'<tr><th style="{_TH}">session</th><td style="{_TD}">{_e(result.session_id)}</td></tr>'
        f'<tr><th style="{_TH}">duration</th><td style="{_TD}">{result.duration_ms:,} ms</td></tr>'
        f'<tr><th style="{_TH}">bytes</th><td style="{_TD}">{bar}</td></tr>'
        "</table>"
        f'<pre style="{_ANSWER}">{_e(text)}</pre>'
        + (f'<div style="{_NOTE}">{_e(cut)}</div>' if cut else "")
        + rest
        + "</div>"
    )


# --- directories -----------------------------------------------------------------


def roster_text(peers: Sequence[Peer]) -> str:
    # Names are what a hub sent: quoted as Go's %q, each cut, a screenful at most.
    if not peers:
        return "Roster(0 peers)"  # not "Roster(0 peers: )"
    names = names_text(p.name for p in peers)
    return f"Roster({len(peers)} peer{'' if len(peers) == 1 else 's'}: {names})"


def roster_html(peers: Sequence[Peer]) -> str:
    return table_html(
        ("name", "endpoint", "labels"),
        ((p.name, p.endpoint, _labels(p.labels)) for p in peers),
        title=f"Roster: {len(peers)} peer{'s' if len(peers) != 1 else ''}",
        note="" if peers else "no peers are registered",
    )


# --- RuntimeCache ----------------------------------------------------------------


def _cache_rows(cache: RuntimeCache) -> list[tuple[str, str, int]]:
    # The cache keeps its LRU private; reading it here keeps markup out of the cache.
    slots = list(cache._resident.values())
    return [(s.agent_id, s.slug, s.pins) for s in reversed(slots)]


class CacheState(NamedTuple):
    """What a cache display shows, copied at one moment (a widget draws it on another thread)."""

    rows: tuple[tuple[str, str, int], ...]  # agent, slug, pins; most recently used first
    stats: CacheStats
    resident: int
    max_instances: int
    building: int


def cache_state(cache: RuntimeCache) -> CacheState:
    return CacheState(
        tuple(_cache_rows(cache)), cache.stats, len(cache), cache.max_instances, len(cache._builds)
    )


def cache_text(cache: RuntimeCache | CacheState) -> str:
    c = cache if isinstance(cache, CacheState) else cache_state(cache)
    s = c.stats
    return (
        f"RuntimeCache(resident={c.resident}, max_instances={c.max_instances}, "
        f"building={c.building}, hits={s.hits}, misses={s.misses}, builds={s.builds}, "
        f"evictions={s.evictions}, closes={s.closes})"
    )


def cache_html(cache: RuntimeCache | CacheState) -> str:
    c = cache if isinstance(cache, CacheState) else cache_state(cache)
    s = c.stats
    rows = [(i + 1, agent, slug, pins) for i, (agent, slug, pins) in enumerate(c.rows)]
    counters = (
        f"hits {s.hits:,} · misses {s.misses:,} · builds {s.builds:,} · "
        f"build failures {s.build_failures:,} · evictions {s.evictions:,} · closes {s.closes:,}"
    )
    table = table_html(
        ("LRU", "agent", "slug", "leases held"),
        rows,
        title=f"RuntimeCache: {c.resident} of {c.max_instances} resident, {c.building} building",
        note=counters + " · most recently used first",
    )
    return table


# --- the simulator's fleet (rows computed by the simulator) -------------------------


def fleet_html(hub_url: str, rows: Sequence[Mapping[str, Any]], served: Mapping[str, str]) -> str:
    """A fleet's roster: rows of name, endpoint, labels, behavior, lease_left, state, url."""
    cells = []
    for row in rows:
        left = row.get("lease_left")
        state = str(row.get("state", ""))
        colour = _COLOURS.get(state, "#57606a")
        cells.append(
            (
                _e(row.get("name", "")),
                _e(row.get("endpoint", "")),
                _e(_labels(row.get("labels") or {})),
                _e(row.get("behavior", "")),
                "" if left is None else _e(f"{left:,.0f} s"),
                _badge(state, colour),
                _e(row.get("url") or ""),
            )
        )
    where = f"hub {hub_url}" + (f", served at {served['hub']}" if "hub" in served else "")
    return table_html(
        ("peer", "endpoint", "labels", "behaviour", "lease left", "state", "served at"),
        cells,
        title=f"Fleet: {len(rows)} peer{'s' if len(rows) != 1 else ''} ({where})",
        raw_columns=frozenset(range(7)),  # every cell escaped above
    )


# --- call logs -------------------------------------------------------------------


def calls_html(records: Sequence[CallRecord], *, title: str = "Calls") -> str:
    counts: dict[str, int] = {}
    for r in records:
        counts[r.state] = counts.get(r.state, 0) + 1
    summary = " · ".join(f"{k} {v:,}" for k, v in sorted(counts.items())) or "no calls yet"
    newest = list(reversed(records))
    rows = [
        (
            _e(r.call_id),
            _e(r.peer),
            _badge(r.state, _COLOURS.get(r.state, "#57606a")),
            "" if r.duration_ms is None else _e(f"{r.duration_ms:,} ms"),
            "" if r.response_bytes is None else _e(f"{r.response_bytes:,}"),
            "yes" if r.truncated else "",
            _e(r.error_type or ""),
        )
        for r in newest
    ]
    return table_html(
        ("call", "peer", "state", "duration", "bytes", "truncated", "error"),
        rows,
        title=f"{title}: {len(records):,} ({summary})",
        note="newest first",
        raw_columns=frozenset(range(7)),
    )


# --- CallTree ---------------------------------------------------------------------------


def _tree_summary(tree: CallTree) -> str:
    counts: dict[str, int] = {}
    for r in tree.records:
        counts[r.state] = counts.get(r.state, 0) + 1
    states = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())) or "no calls yet"
    trees = len(tree.roots())
    return f"{len(tree.records):,} calls in {trees:,} tree{'s' if trees != 1 else ''} ({states})"


def _duration(record: CallRecord) -> str:
    return "" if record.duration_ms is None else f"{record.duration_ms:,} ms"


def _plain(name: str) -> str:
    # A name on one line of a text tree: quoted (as repr does) only when it would not be plain.
    cut = name[:_TEXT_CHARS]
    shown = cut if cut.isprintable() and cut.strip() == cut and cut else repr(cut)
    return shown + ("..." if len(name) > _TEXT_CHARS else "")


def _inside(record: CallRecord) -> str:
    """What a call's turn did, in a few words: its steps by kind and its model's tokens."""
    if not record.steps and not record.steps_dropped:
        return ""
    counts: dict[str, int] = {}
    tokens = 0
    for step in record.steps:
        counts[step.kind] = counts.get(step.kind, 0) + 1
        tokens += (step.input_tokens or 0) + (step.output_tokens or 0)
    words = {"chat": "model round", "tool": "tool call", "error": "error"}
    parts = [
        f"{n} {words[k]}{'s' if n != 1 else ''}" for k, n in sorted(counts.items()) if k in words
    ]
    if tokens:
        parts.append(f"{tokens:,} tokens")
    if record.steps_dropped:
        parts.append(f"{record.steps_dropped:,} steps not kept")
    return ", ".join(parts)


def _step_text(step: TurnStep) -> str:
    took = "" if step.kind == "error" else f" {step.duration_ms:.1f} ms"
    tokens = (
        f" {step.input_tokens or 0} in / {step.output_tokens or 0} out"
        if step.input_tokens is not None or step.output_tokens is not None
        else ""
    )
    peer = f" -> {_plain(step.peer)}" if step.peer else ""
    failed = f" failed: {short(step.error)}" if step.error is not None else ""
    return f"· {step.kind} {_plain(step.name)}{peer}{took}{tokens}{failed}"


def tree_text(tree: CallTree) -> str:
    lines = [f"CallTree: {_tree_summary(tree)}"]
    walked = list(tree.walk())
    for prefix, r in walked[:_SHOWN_ROWS]:
        inside = _inside(r)
        extra = " ".join(
            x for x in (_duration(r), r.error_type or "", f"({inside})" if inside else "") if x
        )
        lines.append(f"{prefix}{_plain(r.peer)} {r.state}{' ' + extra if extra else ''}")
        if tree.opened:  # each step on a line of its own, under the call's own line
            below = prefix.replace("├── ", "│   ").replace("└── ", "    ")
            lines += [f"{below}  {_step_text(step)}" for step in r.steps]
    if len(walked) > _SHOWN_ROWS:
        lines.append(f"... and {len(walked) - _SHOWN_ROWS:,} more calls not shown")
    return "\n".join(lines)


_DETAILS = "margin:1px 0 1px 1.1em"
_SUMMARY = "cursor:pointer;white-space:nowrap;overflow:hidden;text-overflow:ellipsis"
_STEP_TEXT = (
    "white-space:pre-wrap;word-break:break-word;background:#f6f8fa;border-radius:3px;"
    "padding:2px 6px;margin:2px 0 2px 1.1em;max-height:8em;overflow:auto"
)
_MUTED = "color:#57606a"
_KIND_COLOURS = {"chat": "#8250df", "tool": "#0969da", "error": "#cf222e"}


def _call_summary(record: CallRecord) -> str:
    bits = [
        f'<span style="font-weight:600">{_e(record.peer)}</span>',
        _badge(record.state, _COLOURS.get(record.state, "#57606a")),
    ]
    facts = [
        _duration(record),
        "" if record.response_bytes is None else f"{record.response_bytes:,} bytes",
        "truncated" if record.truncated else "",
        record.error_type or "",
        _inside(record),
        f"call {record.call_id}",
    ]
    bits.append(f'<span style="{_MUTED}">{_e(" · ".join(f for f in facts if f))}</span>')
    return " ".join(bits)


def _step_summary(step: TurnStep) -> str:
    label = {"chat": "model", "tool": "tool", "error": "error"}.get(step.kind, step.kind)
    name = step.name if not step.peer else f"{step.name} → {step.peer}"
    took = step.duration_ms
    facts = ["" if step.kind == "error" else f"{took:,.0f} ms" if took >= 10 else f"{took:.1f} ms"]
    if step.input_tokens is not None or step.output_tokens is not None:
        facts.append(f"{step.input_tokens or 0:,} in / {step.output_tokens or 0:,} out tokens")
    if step.error is not None and step.kind != "error":
        facts.append("failed")
    shown = " · ".join(f for f in facts if f)
    return f"{_badge(label, _KIND_COLOURS.get(step.kind, '#57606a'))} {_e(name)}" + (
        f' <span style="{_MUTED}">{_e(shown)}</span>' if shown else ""
    )


def _step_body(step: TurnStep) -> str:
    rows = []
    for label, text in (("sent", step.sent), ("received", step.received), ("error", step.error)):
        if text:
            rows.append(
                f'<div style="{_MUTED}">{label}</div><div style="{_STEP_TEXT}">{_e(text)}</div>'
            )
    return "".join(rows)


def tree_html(tree: CallTree) -> str:
    """Each call a collapsed `<details>`: open one to see its turn's steps and sub-calls.

    Built with an explicit stack (a tree thousands deep cannot recurse), and
    bounded to `_SHOWN_ROWS` calls; there is no script, so a saved notebook and
    the docs open each level the same way.
    """
    from .._records._calltree import claim

    children = tree._children()
    opened = " open" if tree.opened else ""
    out = [
        f'<div style="{_BOX}">',
        f'<div style="{_TITLE}">CallTree: {_e(_tree_summary(tree))}</div>',
    ]
    seen: set[int] = set()
    shown = 0
    # Work items: a call to open, a step (with the sub-calls it made) or a closing tag.
    stack: list[tuple[str, Any]] = [("call", r) for r in reversed(children.get(None, []))]
    if not stack and tree.records:  # every record is in a cycle: start anywhere
        stack = [("call", min(tree.records, key=lambda r: (r.started, r.call_id)))]
    while stack:
        kind, item = stack.pop()
        if kind == "close":
            out.append("</details>")
            continue
        if kind == "step":
            step, made = item
            out.append(
                f'<details style="{_DETAILS}"{opened}><summary style="{_SUMMARY}">'
                f"{_step_summary(step)}</summary>{_step_body(step)}"
            )
            stack.append(("close", None))
            stack.extend(("call", k) for k in reversed(made))
            continue
        record = item
        if record.call_id in seen:
            continue
        seen.add(record.call_id)
        if shown >= _SHOWN_ROWS:
            continue
        shown += 1
        out.append(
            f'<details style="{_DETAILS}"{opened}><summary style="{_SUMMARY}">'
            f"{_call_summary(record)}</summary>"
        )
        steps, rest = claim(record, children.get(record.call_id, []))
        stack.append(("close", None))
        stack.extend(("call", k) for k in reversed(rest))
        stack.extend(("step", pair) for pair in reversed(steps))
    hidden = len(tree.records) - shown
    note = (
        "each call under the call whose turn made it, oldest first; open a call to see what "
        "its turn did (model rounds, tool calls) and the calls it made"
        if not tree.opened
        else "one delegation, opened: each call's model rounds and tool calls in the order "
        "they started, each sub-call under the call_peer that made it"
    )
    if not tree.records:
        note = "no calls yet"
    elif hidden > 0:
        note += f"; {hidden:,} more calls not shown"
    out.append(f'<div style="{_NOTE}">{_e(note)}</div></div>')
    return "".join(out)
