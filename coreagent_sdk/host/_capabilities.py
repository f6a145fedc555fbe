"""The `capabilities` frame an event stream opens with, encoded once per kind of host.

Every host encoded its own frame on its first stream (and one per caller and
address): a fleet of 10,000 daemons called at random encoded the same nested
payload 10,000 times, differing only in a few strings. The frame is now encoded
once per kind (hub or not, multi-session or not, with a caller or without) with
markers where those strings go, and each host's frame is that template with its
strings encoded into it. JSON encodes a string the same wherever it stands, and
the HTML-safe escapes are per character, so the bytes are those of encoding the
whole payload (pinned by a test against the whole encoding).
"""

from __future__ import annotations

import functools
from typing import Any

from .._attach._wire import PROTOCOL_VERSION
from ._gowire import go_json, utf8

__all__ = ["EVENT_TYPES", "capabilities_frame", "capabilities_payload"]

EVENT_TYPES = (
    "status-update",
    "usage-update",
    "inbox",
    "turn-complete",
    "turn-error",
    "agent",
    "wake",
    "pause",
)
# Stand-ins for the strings a host fills in: control characters no name or address holds
# unescaped, so each stands in the encoded template exactly once, as its own JSON string.
_FIELDS = ("name", "description", "model", "url", "caller")
_MARK = {field: f"\x00{field}\x00" for field in _FIELDS}


def capabilities_payload(
    *,
    name: str,
    model: str,
    url: str,
    multi_session: bool,
    hub: bool,
    caller: str | None,
) -> dict[str, Any]:
    """The frame's payload: what a daemon advertises (fixture capabilities-v1.4.0.json)."""
    payload: dict[str, Any] = {
        "protocol_version": PROTOCOL_VERSION,
        "event_types": list(EVENT_TYPES),
        "server": "coreagent-sdk-simulator/0.1.0",
        # The feature names a daemon advertises (fixture capabilities-v1.4.0.json).
        "features": {
            "cost_ceiling": False,
            "cross_daemon": hub,
            "interrupt": False,
            "mcp": False,
            "multi_session": multi_session,
            "observer_mode": False,
            "perms_stream": False,
            "specialists": False,
        },
        "slash_commands": ["compact", "done"],
        "agent": {
            "name": name,
            "version": "v0.1.0-sim",
            "description": f"Simulated core-agent daemon {name!r}.",
            "model": model,
            "url": url,
        },
    }
    if caller is not None:
        payload["caller_id"] = caller
    return payload


@functools.cache
def _template(multi_session: bool, hub: bool, caller: bool) -> tuple[tuple[str, str | None], ...]:
    """The encoded frame cut at each filled-in string: (text before it, its field), in order."""
    payload = capabilities_payload(
        name=_MARK["name"],
        model=_MARK["model"],
        url=_MARK["url"],
        multi_session=multi_session,
        hub=hub,
        caller=_MARK["caller"] if caller else None,
    )
    payload["agent"]["description"] = _MARK["description"]
    text = f"event: capabilities\ndata: {go_json(payload)}\n\n"
    marks = {go_json(mark): field for field, mark in _MARK.items()}
    pieces: list[tuple[str, str | None]] = []
    while True:
        found = [(text.find(m), m) for m in marks if m in text]
        if not found:
            pieces.append((text, None))
            return tuple(pieces)
        at, mark = min(found)
        pieces.append((text[:at], marks[mark]))
        text = text[at + len(mark) :]


def capabilities_frame(
    *, name: str, model: str, url: str, multi_session: bool, hub: bool, caller: str | None
) -> bytes:
    """`sse("capabilities", capabilities_payload(...))`, from the kind's template."""
    values = {
        "name": name,
        "description": f"Simulated core-agent daemon {name!r}.",
        "model": model,
        "url": url,
        "caller": caller,
    }
    parts: list[str] = []
    for before, field in _template(bool(multi_session), bool(hub), caller is not None):
        parts.append(before)
        if field is not None:
            parts.append(go_json(values[field]))
    return utf8("".join(parts))
