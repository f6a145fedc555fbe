"""What one delegation returns and reports, and what a call in flight knows so far.

Apart from `CallPeer` so that what reads a call's answer again (`_read_back`) and the records
of calls (`_records`) can name these values without importing the tool itself.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from .._attach._sse import MAX_EVENT_BYTES
from . import _hops

__all__ = ["ANSWER_SEPARATOR", "MAX_TIMEOUT", "CallPeerEvent", "CallPeerResult", "event_bound"]

# Past this many bytes of JSON an event is read from its two ends (`_oversized`), and
# its first bytes must hold `cap` bytes of text: Go writes <, > and & as 6-byte \u escapes.
_EVENT_MARGIN = 64 * 1024


def event_bound(cap: int) -> int:
    """The bytes one event (or one A2A body) may take when `cap` bytes of answer are wanted."""
    return max(MAX_EVENT_BYTES, 6 * cap + _EVENT_MARGIN)


MAX_TIMEOUT = 900.0
"""The largest `timeout=` a `CallPeer` accepts, in seconds."""
ANSWER_SEPARATOR = "\n\n"
"""Between the pieces of an answer (the daemon's call_peer joins its answer events so): one
literal for every reader of answers, attach's, A2A's and the A2A host's."""


@attrs.frozen(repr=False)
class CallPeerResult:
    """A peer's answer. `truncated` says the byte cap cut it; the rest is in `session_id`.

    ``max_response_bytes`` is the cap the call ran with (None when unknown); it
    is not part of the wire JSON. In a notebook the result shows as a card:
    bytes against the cap, a truncation badge and the answer in a scrolling box.

    Attributes:
        peer: The name of the peer that answered.
        session_id: The peer's session the call ran in (read the rest of a truncated
            answer there).
        response: The peer's answer as text, cut to the byte cap without splitting a
            UTF-8 character.
        duration_ms: How long the whole call took, in milliseconds.
        truncated: True when the answer was longer than the cap and was cut.
        max_response_bytes: The byte cap the call ran with; None when unknown.
    """

    peer: str
    session_id: str
    response: str
    duration_ms: int
    truncated: bool = False
    max_response_bytes: int | None = attrs.field(default=None, kw_only=True)

    def __repr__(self) -> str:
        from .._display import _render as _display  # at display time only

        # A 16 KiB answer printed whole is one unreadable line: show its head and its size.
        return _display.result_text(self)

    def _repr_html_(self) -> str:
        from .._display import _render as _display  # at display time only

        return _display.result_html(self)

    def to_dict(self) -> dict[str, Any]:
        """The wire JSON a tool returns to the model (`truncated` only when true)."""
        out: dict[str, Any] = {
            "peer": self.peer,
            "session_id": self.session_id,
            "response": self.response,
            "duration_ms": self.duration_ms,
        }
        if self.truncated:
            out["truncated"] = True
        return out


@attrs.frozen
class CallPeerEvent:
    """What `on_event` receives: kind is started, session_opened, truncated, finished or failed.

    ``call_id`` tells concurrent calls apart (unique in the process);
    ``response_bytes`` (UTF-8 bytes of the answer) comes with truncated and
    finished; ``error_type`` (the exception's class name) with failed.

    Attributes:
        kind: started, session_opened, truncated, finished or failed.
        tool: The name of the tool that made the call (`CallPeer.name`).
        peer: The peer's name as the caller gave it.
        session_id: The peer's session, once opened ("" before).
        duration_ms: Milliseconds since the call started (None on started).
        error: The error's message, on failed (scrubbed of tokens).
        call_id: Tells concurrent calls apart; unique in the process.
        response_bytes: UTF-8 bytes of the answer, on truncated and finished.
        error_type: The exception's class name, on failed.
    """

    kind: str
    tool: str
    peer: str
    session_id: str = ""
    duration_ms: int | None = None
    error: str | None = None
    call_id: int = 0
    response_bytes: int | None = None
    error_type: str | None = None


_call_ids = itertools.count(1)


class _Call:
    """What one call knows so far, for errors and events."""

    __slots__ = (
        "abandon",
        "budget",
        "forget",
        "id",
        "injected",
        "peer",
        "resolved",
        "session_id",
        "started",
        "waiting",
    )

    def __init__(self, peer: str, budget: _hops.Budget | None = None) -> None:
        self.id = next(_call_ids)
        self.peer = peer
        self.session_id = ""
        self.started = time.perf_counter()
        # The call's time: the tool's timeout, or less inside a delegation (see _hops).
        self.budget = budget if budget is not None else _hops.Budget(MAX_TIMEOUT, (), True)
        # Whether the prompt may have reached the peer: from then on a retry may run it twice.
        self.injected = False
        self.resolved = False  # the directory knew the name (metrics name only such peers)
        self.waiting = False  # waiting for a free connection (see max_connections)
        # Deletes the session after the answer (delete_sessions=True); None: nothing to do.
        self.forget: Callable[[], Awaitable[None]] | None = None
        # Cancels an A2A task the call stopped reading before it ended; None: nothing to do.
        self.abandon: Callable[[], Awaitable[None]] | None = None

    def elapsed_ms(self) -> int:
        return int((time.perf_counter() - self.started) * 1000)
