"""`CallRecord`: one call as its events told it, the value every record of calls is made of.

Apart from the log that collects records (`_calllog`) so that trees, usage and tables can
name it without importing the log, which imports them.
"""

from __future__ import annotations

import attrs

from ._steps import TurnStep

__all__ = ["CallRecord"]


@attrs.frozen
class CallRecord:
    """One call as its events told it.

    ``state`` is running, finished, truncated or failed; ``started`` and
    ``ended`` are seconds on the log's timer since the log was made.

    Attributes:
        call_id: The call's id (`CallPeerEvent.call_id`), unique in the process.
        tool: The name of the tool that made the call.
        peer: The peer the call asked.
        state: running, finished, truncated or failed.
        started: When the call started, in seconds since the log was made.
        ended: When it ended, in the same seconds (None while running).
        session_id: The peer's session ("" until it is opened).
        duration_ms: The call's duration in milliseconds, once it ended.
        response_bytes: UTF-8 bytes of the answer, once it ended with one.
        truncated: True when the answer was cut at the byte cap.
        error_type: The exception's class name, when the call failed.
        error: The error's message, when the call failed.
        parent: The ``call_id`` of the call whose turn made this one (a delegation's
            sub-call), or None for a call from outside (a notebook, an application);
            a simulated fleet's `calls` log fills it in.
        steps: What the called turn did inside (`TurnStep`s: model rounds, tool calls,
            errors), oldest first, when someone recorded it (a simulated fleet does).
        steps_dropped: Steps not kept: past `MAX_STEPS_PER_CALL`, or dropped to keep
            the log's ``max_steps``.
    """

    call_id: int
    tool: str
    peer: str
    state: str
    started: float
    ended: float | None = None
    session_id: str = ""
    duration_ms: int | None = None
    response_bytes: int | None = None
    truncated: bool = False
    error_type: str | None = None
    error: str | None = None
    parent: int | None = None
    steps: tuple[TurnStep, ...] = ()
    steps_dropped: int = 0
