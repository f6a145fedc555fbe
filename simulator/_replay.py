"""Replaying a recorded session as a simulated peer: `behaviors.replay(path, speed=...)`.

The invariant: a call against the replaying peer reads what the recorded
peer said, in the same order, so it returns the same `CallPeerResult` (text
and truncation). How each rule holds it:

- The recording is split into turns at its injects (a recording without
  injects, such as the daemon's sub-agent events page, is one turn). The
  n-th turn of a session replays the n-th recorded turn; a turn past the end
  fails with a `turn-error` that says so, rather than inventing an answer.
- A turn re-publishes the recorded ADK events that the peer authored (the
  daemon adds its own inbox frames, user echo, `turn-complete` and
  `usage-update` around them, as it does for every behaviour), and a recorded
  `turn-error` as a `turn-error`. It stops where the recorded turn ended.
- The new session's ids replace the recorded ones where ids are: the
  invocation id, and the recorded session id as the whole value of a field
  that holds a session id (`sessionID`, `session`, `session_id`). Text is
  never rewritten: a recording of the session `default` must not turn "the
  default namespace" into something else.
- ``speed`` paces the frames: 1.0 keeps the recorded gaps, 2.0 halves them,
  None replays as fast as possible.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from coreagent_sdk import AgentEvent, AgentFrame, Recording, RecordingEntry
from coreagent_sdk.errors import ProtocolError
from coreagent_sdk.host import Agent as Behavior
from coreagent_sdk.host import Turn

__all__ = ["load_replay", "replay"]

_ENDS = frozenset({"turn-complete", "turn-error"})


@attrs.frozen
class _Step:
    at: float  # seconds after the turn's inject
    event: AgentEvent | None = None
    error: Mapping[str, Any] | None = None


_END = _Step(at=-1.0)  # marks where a recorded turn ended


def _subagent_page(data: Mapping[str, Any]) -> Recording:
    """The daemon's sub-agent events page (fixture rest-subagent-events-v1.json) as one turn."""
    events = data.get("events")
    if not isinstance(events, list):
        raise ValueError("replay: a sub-agent events page needs an 'events' list")
    entries = tuple(
        RecordingEntry(t=0.0, kind="frame", event="agent", data=item)
        for item in events
        if isinstance(item, dict)
    )
    agent = data.get("agent")
    return Recording(
        host="", session_id="", entries=entries, peer=agent if isinstance(agent, str) else ""
    )


def load_replay(source: str | Path | Recording) -> Recording:
    """A `Recording` from a recording, a `.jsonl` recording file, or a sub-agent events page."""
    if isinstance(source, Recording):
        return source
    try:
        text = Path(source).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return Recording.load(source)  # says what the file is and what to do
    first = text.lstrip()[:1]
    if first == "{":
        try:
            whole = json.loads(text)
        except (ValueError, RecursionError):
            whole = None  # JSON lines (several objects), or not JSON: loads says which
        if isinstance(whole, dict) and "events" in whole and "format" not in whole:
            return _subagent_page(whole)
    return Recording.loads(text)


# The fields a daemon's JSON names a session by (`sessionID` in REST answers,
# `session` in inject answers and pauses; `session_id` in tool results).
_SESSION_FIELDS = frozenset({"sessionID", "session", "session_id"})


def _substitute(value: Any, old: str, new: str) -> Any:
    """`value` with `old` replaced by `new` where a session id is a field's whole value."""
    if not old or not isinstance(value, (dict, list)):
        return value
    # Copied as it is walked: the recorded event stays as recorded for the next turn.
    root: list[Any] = [value]
    todo: list[tuple[Any, Any]] = [(root, 0)]
    while todo:  # no recursion: a recorded value may nest deep
        parent, key = todo.pop()
        item = parent[key]
        if isinstance(item, dict):
            fresh: Any = dict(item)
            for field, child in item.items():
                if field in _SESSION_FIELDS and child == old:
                    fresh[field] = new
                elif isinstance(child, (dict, list)):
                    todo.append((fresh, field))
        else:
            fresh = list(item)
            todo += [(fresh, i) for i, c in enumerate(item) if isinstance(c, (dict, list))]
        parent[key] = fresh
    return root[0]


def _turns(recording: Recording) -> list[list[_Step]]:
    turns: list[list[_Step]] = []
    current: list[_Step] | None = None
    since = 0.0
    injects = any(e.kind == "inject" for e in recording.entries)
    if not injects:
        current = []
        turns.append(current)
    for entry in recording.entries:
        if entry.kind == "inject":
            current = []
            turns.append(current)
            since = entry.t
            continue
        if current is None or entry.kind != "frame":
            continue
        if current and current[-1] is _END:
            continue  # this turn is over; later frames belong to no turn
        at = max(0.0, entry.t - since)
        if entry.event == "agent" and isinstance(entry.data, dict):
            try:
                frame = AgentFrame.from_dict(entry.data)
            except (KeyError, TypeError, ValueError, AttributeError, RecursionError, ProtocolError):
                continue  # skipped, as a client skips a frame it cannot read
            event = frame.event
            if event.author in ("user", ""):
                continue  # the daemon echoes the new prompt itself
            current.append(_Step(at=at, event=event))
            if event.turn_complete:
                current.append(_END)
        elif entry.event == "turn-error" and isinstance(entry.data, dict):
            current.append(_Step(at=at, error=entry.data))
            current.append(_END)
        elif entry.event in _ENDS:
            current.append(_END)
    return [[s for s in steps if s is not _END] for steps in turns]


def replay(source: str | Path | Recording, *, speed: float | None = None) -> Behavior:
    """Answer as the recorded peer did: its events, at ``speed`` (None: as fast as possible)."""
    if speed is not None and (
        isinstance(speed, bool) or not isinstance(speed, (int, float)) or not speed > 0
    ):
        raise ValueError(
            f"replay: speed must be a positive number (1.0 is real time) or None (as fast as "
            f"possible), got {speed!r}"
        )
    recording = load_replay(source)
    turns = _turns(recording)
    old_session = recording.session_id
    served: dict[str, int] = {}  # session id -> turns replayed in it

    async def run(turn: Turn) -> None:
        index = served.get(turn.session_id, 0)
        served[turn.session_id] = index + 1
        if index >= len(turns):
            await turn.error(
                "unknown",
                f"replay: the recording has {len(turns)} turn(s) and this session asked for "
                f"turn {index + 1}; record a longer session or open a new one",
            )
        started = time.monotonic()
        for step in turns[index]:
            if speed is not None:
                wait = started + step.at / speed - time.monotonic()
                if wait > 0:
                    await turn.sleep(wait)
            if step.error is not None:
                error = _substitute(dict(step.error), old_session, turn.session_id)
                await turn.error(
                    str(error.get("kind") or "unknown"),
                    str(error.get("message") or ""),
                    bool(error.get("retryable", False)),
                    code=error.get("code") if isinstance(error.get("code"), str) else None,
                    hint=error.get("hint") if isinstance(error.get("hint"), str) else None,
                )
            assert step.event is not None
            event = step.event
            recorded = _substitute(event.to_dict(), old_session, turn.session_id)
            fresh = attrs.evolve(AgentEvent.from_dict(recorded), invocation_id=turn.invocation_id)
            turn.tokens_out += max(1, len(fresh.text) // 4) if fresh.text else 0
            await turn.emit(fresh)

    return run
