"""Reading an event too large to hold, from its first and last bytes.

Invariant: an oversized event is never held whole, and what is read from it is
never invented: its text is a true prefix of the event's text, cut only
between whole characters and whole escapes, and its other fields are ones
the event really has, or the frame is reported unreadable (`frame is None`).

How: the event stream's decoder (`_sse`) keeps an oversized event's first
bytes (a prefix of its JSON, cut anywhere) and its last bytes. The prefix is
closed into a JSON document: a string cut short ends at its last whole
character or escape (Go writes `<` as `\\u003c`: never half of one), a key cut
short is dropped, open objects and arrays are closed. The daemon writes an
event's own fields after its `Content` (`Author`, `Partial`, `TurnComplete`),
so those are read from the last bytes: JSON never has `,"` inside a string
(a quote there is escaped), so each `,"` there starts a key; the first from
which the rest parses as an object ending exactly where the event ends starts
the event's trailing fields.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from ..errors import ProtocolError
from ._wire import AgentFrame, Frame, decode_frame, event_kind

__all__ = ["OversizedFrame", "head_readable", "read_oversized"]

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
# A string cut short: whole characters and whole escapes only, no closing quote.
_STRING_PREFIX = re.compile(r'"[^"\\]*(?:(?:\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})[^"\\]*)*')
# An escaped high surrogate at the end wants its low half, which the cut took.
_HIGH_ESCAPE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LITERAL = re.compile(r"-?[0-9][0-9.eE+-]*|true|false|null")
_SPACE = re.compile(r"\s*")
_KEY_START = re.compile(r',\s*"')  # never inside a JSON string, where a quote is escaped
_MAX_DEPTH = 64
_MAX_TRIES = 256  # keys tried in the last bytes before giving up


@attrs.frozen
class OversizedFrame:
    """An event over the reader's bound, read from its first and last bytes.

    ``event_type`` is its SSE event type and ``size`` its bytes of data. ``frame``
    is the `AgentFrame` read from its two ends, whose text is only the part
    the first bytes held (a prefix of the whole); None when it could not be
    read (not an `agent` event, or its ends are not the daemon's JSON).

    Attributes:
        event_type: The event's SSE event type.
        size: The bytes of data the event held.
        frame: The `AgentFrame` read from its two ends, or None.
    """

    event_type: str
    size: int
    frame: AgentFrame | None = None


def _without_lone_high(piece: str) -> str:
    """`piece` without an escaped high surrogate at its very end (its pair was cut off)."""
    if not _HIGH_ESCAPE.fullmatch(piece, len(piece) - 6):
        return piece
    slashes = len(piece) - 6 - len(piece[: len(piece) - 6].rstrip("\\"))
    return piece[:-6] if slashes % 2 == 0 else piece  # an odd run escapes the backslash


def _close_prefix(text: str) -> Any:
    """The JSON document `text` is a prefix of, closed where it was cut; None if not JSON."""
    out: list[str] = []
    stack: list[str] = []
    expect = "value"  # value, key, colon or comma (a value just ended)
    pos, end = 0, len(text)
    while True:
        pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= end:
            break
        c = text[pos]
        if c == '"':
            whole = _STRING.match(text, pos)
            if whole is None:  # the cut is inside this string
                if expect == "value":
                    piece = _STRING_PREFIX.match(text, pos).group()  # type: ignore[union-attr]
                    out.append(_without_lone_high(piece) + '"')
                    expect = "comma"
                elif expect != "key":
                    return None
                break
            if expect not in ("key", "value"):
                return None
            out.append(whole.group())
            expect = "colon" if expect == "key" else "comma"
            pos = whole.end()
        elif c in "{[":
            if expect != "value" or len(stack) >= _MAX_DEPTH:
                return None
            stack.append(c)
            out.append(c)
            expect = "key" if c == "{" else "value"
            pos += 1
        elif c in "}]":
            if not stack or stack.pop() != ("{" if c == "}" else "["):
                return None
            if expect == "colon" or out[-1] in (",", ":"):
                return None
            out.append(c)
            expect = "comma"
            pos += 1
            if not stack:
                break
        elif c == ":":
            if expect != "colon":
                return None
            out.append(c)
            expect = "value"
            pos += 1
        elif c == ",":
            if expect != "comma" or not stack:
                return None
            out.append(c)
            expect = "key" if stack[-1] == "{" else "value"
            pos += 1
        else:
            literal = _LITERAL.match(text, pos)
            if literal is None or literal.end() >= end:
                if end - pos <= 24:  # a number or true/false/null the cut shortened
                    break
                return None
            if expect != "value":
                return None
            out.append(literal.group())
            expect = "comma"
            pos = literal.end()
    if expect == "colon":
        out.pop()  # a key with no value: drop it
    if out and out[-1] == ",":
        out.pop()
    elif out and out[-1] == ":":
        out.append("null")
    out += ["}" if opener == "{" else "]" for opener in reversed(stack)]
    try:
        return json.loads("".join(out))
    except (ValueError, RecursionError):
        return None


def _trailer(text: str) -> dict[str, Any] | None:
    """The event's fields that follow its text, from the event's last bytes; None if not found."""
    decoder = json.JSONDecoder()
    for tries, comma in enumerate(_KEY_START.finditer(text)):
        if tries >= _MAX_TRIES:
            break
        at = comma.start() + 1
        try:
            fields, used = decoder.raw_decode("{" + text[at:])
        except (ValueError, RecursionError):
            continue
        # The object must end where the event does: only the frame's own `}` may follow.
        if isinstance(fields, dict) and text[at + used - 1 :].strip() == "}":
            return fields
    return None


def head_readable(event: str, head: bytes) -> bool:
    """Whether an oversized event's first bytes could be an agent frame's (worth reading on)."""
    if event_kind(event) != "agent":
        return False
    doc = _close_prefix(head.decode("utf-8", "ignore"))
    return isinstance(doc, dict) and isinstance(doc.get("event"), dict)


def read_oversized(
    event: str, head: bytes, tail: bytes, size: int
) -> Frame | OversizedFrame | None:
    """What an oversized event's two ends say: the whole frame if they cover it, else a cut one."""
    if size <= len(head) + len(tail):  # nothing was discarded: the two ends are the event
        return decode_frame(event, (head + tail).decode("utf-8", "replace"))
    if event_kind(event) != "agent":
        return OversizedFrame(event, size)
    # "ignore": a character the cut split is dropped, not turned into U+FFFD.
    doc = _close_prefix(head.decode("utf-8", "ignore"))
    body = doc.get("event") if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        return OversizedFrame(event, size)
    trailer = _trailer(tail.decode("utf-8", "ignore"))
    if trailer is None and not ("Author" in body or "author" in body):
        return OversizedFrame(event, size)  # who wrote it is unknown: it cannot be counted
    fields = {**body, **{k: v for k, v in (trailer or {}).items() if k not in body}}
    try:
        frame = AgentFrame.from_dict({"seq": doc.get("seq"), "event": fields})
    except (ProtocolError, RecursionError):
        return OversizedFrame(event, size)
    return OversizedFrame(event, size, frame)
