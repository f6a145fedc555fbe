"""Reading a delegation's whole answer back from the peer's session, bounded.

A call cut at its byte cap stops reading, but the peer finishes its turn in
its own session, whose event log the daemon keeps. `CallPeer.read_answer`
reads that log again and rebuilds the answer by the rule the call itself
follows. The invariant: reading back is exactly as bounded and as guarded as
a call, and never returns a partial answer that looks whole.

- The peer is found by *name* through the tool's directory, its endpoint is
  checked, the gate and ``allowed_hosts`` apply, and the token is read at
  call time, as for a call: a result cannot point the tool at an address.
- The session id goes into a URL, so it must be a plain path segment.
- One deadline covers the whole read (the tool's timeout unless given) and a
  byte cap of its own stops reading (`truncated` then says so, as on a call).
- The log is replayed from its start (``since=0``). A session's log opens with
  the prompt the caller injected; a log that does not (the daemon replays its
  newest 5,000 events only) has lost the answer's beginning, and reading it
  fails instead of returning the tail as if it were the answer.
- An A2A agent's task is read with `GetTask` instead (`_a2a_call.read_task`), under
  the same lookup, endpoint check, token, deadline and cap.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

from .._attach._client import AttachClient
from .._attach._oversized import OversizedFrame
from .._attach._wire import AgentFrame, checked_segment
from .._http._deadline import governed, within
from ..errors import (
    CallPeerError,
    CoreAgentError,
    InvalidArgumentError,
    PeerRequestError,
    PeerTimeoutError,
    ProtocolError,
)
from ._a2a_call import CallPeer as A2ACaller
from ._a2a_call import read_task
from ._directory import Peer, read_token
from ._results import MAX_TIMEOUT, CallPeerResult, _Call, event_bound

__all__ = ["DEFAULT_READ_BACK_BYTES", "MAX_READ_BACK_BYTES", "read_answer"]

DEFAULT_READ_BACK_BYTES = 1024 * 1024
"""The byte cap of `CallPeer.read_answer` unless ``max_response_bytes=`` says otherwise."""
MAX_READ_BACK_BYTES = 64 * 1024 * 1024
"""The largest ``max_response_bytes=`` `CallPeer.read_answer` accepts."""

# Only agent events are in a session's log; a turn still running ends with these.
_READ_TYPES = frozenset({"agent", "turn-complete", "turn-error"})


class CallPeer(A2ACaller, Protocol):
    """What reading an answer back uses of the `CallPeer` it reads for (no import of the tool)."""

    name: str
    timeout: float
    token_env: str | None
    _environ: Any

    async def _check_gate(self, peer: str) -> None: ...
    async def _resolve(self, name: str) -> Peer: ...
    async def _a2a_target(self, call: _Call, target: Peer) -> Peer: ...
    def _client_for(self, peer: str, target: Peer, token: str | None, cap: int) -> AttachClient: ...
    async def _read(self, call: _Call, frames: Any, cap: int | None = None) -> tuple[str, bool]: ...
    def _request_error(self, call: _Call, exc: CoreAgentError, step: str) -> CallPeerError: ...


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _checked(tool: CallPeer, result: object, cap: object, timeout: object) -> tuple[int, float]:
    if not isinstance(result, CallPeerResult):
        raise InvalidArgumentError(
            f"{tool.name}: read_answer takes the CallPeerResult of a call, got "
            f"{type(result).__name__}; pass what acall() returned"
        )
    if isinstance(cap, bool) or not isinstance(cap, int) or not 0 < cap <= MAX_READ_BACK_BYTES:
        raise ValueError(
            f"{tool.name}: read_answer's max_response_bytes must be an int in "
            f"(0, {MAX_READ_BACK_BYTES}], got {cap!r}; the default is {DEFAULT_READ_BACK_BYTES}"
        )
    if timeout is None:
        timeout = tool.timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        timeout = -1.0
    if not 0 < timeout <= MAX_TIMEOUT:
        raise ValueError(
            f"{tool.name}: read_answer's timeout must be seconds in (0, {MAX_TIMEOUT:g}], got "
            f"{timeout!r}; None uses the tool's own ({tool.timeout:g})"
        )
    # A session id goes into an attach URL, an A2A task id into GetTask: both are checked
    # before the peer is even looked up, so only a plain path segment is taken.
    try:
        checked_segment(result.session_id, "session id")
    except ProtocolError:
        shown = result.session_id[:80]
        raise InvalidArgumentError(
            f"{tool.name}: session id {shown!r} is not a plain path segment, so it is not put "
            "into a URL; pass the CallPeerResult the call returned"
        ) from None
    return cap, float(timeout)


async def _from_the_prompt(call: _Call, tool: CallPeer, frames: Any) -> AsyncIterator[Any]:
    """The frames, once the log is known to start with the caller's prompt."""
    first = True
    async for frame in frames:
        if first and isinstance(frame, (AgentFrame, OversizedFrame)):
            inner = frame.frame if isinstance(frame, OversizedFrame) else frame
            author = inner.event.author if isinstance(inner, AgentFrame) else None
            if author != "user":
                raise PeerRequestError(
                    f"{tool.name}: the log of session {call.session_id} on peer {_q(call.peer)} "
                    "no longer starts with the prompt (a daemon replays only its newest 5,000 "
                    "events), so the answer's beginning is gone; no partial answer is returned. "
                    "Ask the peer again for a shorter answer"
                )
            first = False
        yield frame


async def read_answer(
    tool: CallPeer, result: CallPeerResult, max_response_bytes: int, timeout: float | None
) -> CallPeerResult:
    """See `CallPeer.read_answer`."""
    cap, seconds = _checked(tool, result, max_response_bytes, timeout)
    call = _Call(result.peer)
    call.session_id = result.session_id
    await tool._check_gate(result.peer)
    token = read_token(tool.token_env, tool._environ, tool.name)

    async def read() -> tuple[str, str, bool]:
        target = await tool._a2a_target(call, await tool._resolve(result.peer))
        if target.a2a is not None:  # an A2A agent: the task's own answer, by GetTask
            text, truncated = await read_task(tool, call, target, token, cap, event_bound(cap))
            return target.name, text, truncated
        client = tool._client_for(result.peer, target, token, cap)
        step = "GET events"
        try:
            path = f"/sessions/{result.session_id}"
            async with client.events(path, 0, types=_READ_TYPES, cut_oversized=True) as frames:
                step = "the session's log"
                text, truncated = await tool._read(call, _from_the_prompt(call, tool, frames), cap)
        except CallPeerError:
            raise
        except CoreAgentError as exc:
            raise tool._request_error(call, exc, step) from exc
        return target.name, text, truncated

    try:
        with governed():
            name, text, truncated = await within(seconds, read())
    except asyncio.TimeoutError:
        raise PeerTimeoutError(
            f"{tool.name}: the answer in session {result.session_id} on peer "
            f"{_q(result.peer)} did not end within {seconds:.3g} s (the turn may still be "
            "running, or it failed); no partial answer is returned. Try again later, or pass "
            "a longer timeout="
        ) from None
    return CallPeerResult(
        peer=name,
        session_id=result.session_id,
        response=text,
        duration_ms=call.elapsed_ms(),
        truncated=truncated,
        max_response_bytes=cap,
    )
