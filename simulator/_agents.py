"""Behaviours: what a simulated agent does with a prompt.

A behaviour is an async function of a `Turn`. It speaks through the turn
(`say`, `narrate`, `chunk`, `tool_call`, `tool_result`, `error`), and the
daemon turns each call into frames of the exact wire shapes. The daemon
wraps every turn in `inbox` frames, a `status-update` streaming, the echoed
user event, and after the behaviour returns `turn-complete`, `usage-update`
and a `status-update` idle.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

from coreagent_sdk._wire import (
    AgentEvent,
    AgentFrame,
    Content,
    FunctionCall,
    FunctionResponse,
    Part,
)
from coreagent_sdk._wire import TurnError as TurnErrorFrame

__all__ = [
    "Behavior",
    "Turn",
    "custom",
    "drop_stream",
    "echo",
    "fail",
    "narrate",
    "never_finish",
    "reply",
    "slow",
    "stream",
]

Behavior = Callable[["Turn"], Awaitable[None]]
"""What a simulated agent does with a prompt: an async function of a `Turn`."""


class _Session(Protocol):
    def publish_agent(self, event: AgentEvent) -> AgentFrame: ...

    def publish(self, event: str, payload: dict[str, Any]) -> None: ...

    def drop_streams(self) -> None: ...


class TurnFailed(Exception):
    """Raised by `Turn.error` to end the turn after its `turn-error` frame."""


class TurnAbandoned(Exception):
    """Raised when a behaviour dropped the streams: no `turn-complete` follows."""


_event_ids = itertools.count(1)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class Turn:
    """One turn of a simulated agent: the messages it drained from the inbox, and its answer.

    ``prompt`` is the text the model sees: the message itself, or, when several
    queued messages drain into one turn, an ``[Inbox]`` block with one
    ``- message`` line each (``messages`` keeps them apart). ``prompt_id`` is
    the turn's own id, minted at turn start as a daemon does; it is not the id
    any inject answered with.
    """

    def __init__(
        self,
        session: _Session,
        *,
        agent: str,
        prompt: str,
        prompt_id: str,
        invocation_id: str,
        messages: Sequence[str] = (),
    ) -> None:
        self._session = session
        self.agent = agent
        self.prompt = prompt
        self.prompt_id = prompt_id
        self.invocation_id = invocation_id
        self.messages = tuple(messages) if messages else (prompt,)
        self.tokens_out = 0

    @property
    def session_id(self) -> str:
        """The id of the session this turn runs in (what a caller's `session_opened` saw)."""
        return str(getattr(self._session, "session_id", ""))

    async def emit(self, event: AgentEvent) -> AgentFrame:
        """Publish a ready-made ADK event as is (a replay's recorded events, for instance)."""
        frame = self._session.publish_agent(event)
        await asyncio.sleep(0)
        return frame

    def _event(
        self,
        parts: Sequence[Part],
        *,
        partial: bool = False,
        role: str = "model",
        author: str | None = None,
    ) -> AgentFrame:
        event = AgentEvent(
            content=Content(role=role, parts=tuple(parts)),
            partial=partial,
            id=f"e-{next(_event_ids)}",
            timestamp=_now(),
            invocation_id=self.invocation_id,
            author=self.agent if author is None else author,
        )
        return self._session.publish_agent(event)

    async def say(self, text: str) -> None:
        """The final model answer (non-partial text, no function call): ends the turn's text."""
        self.tokens_out += max(1, len(text) // 4)
        self._event([Part(text=text)])
        await asyncio.sleep(0)

    async def narrate(
        self, text: str, tool: str | None = None, args: dict[str, Any] | None = None
    ) -> None:
        """Narration, optionally with a tool call in the same event (it does not end the turn)."""
        parts = [Part(text=text)]
        if tool is not None:
            parts.append(Part(function_call=FunctionCall(name=tool, args=args or {})))
        self._event(parts)
        await asyncio.sleep(0)

    async def chunk(self, text: str) -> None:
        """A streaming (partial) chunk; consumers skip these for the answer."""
        self._event([Part(text=text)], partial=True)
        await asyncio.sleep(0)

    async def tool_call(
        self, name: str, args: dict[str, Any] | None = None, *, id: str | None = None
    ) -> None:
        """A `functionCall` part; `id` pairs it with its `tool_result` when calls overlap."""
        self._event([Part(function_call=FunctionCall(name=name, args=args or {}, id=id))])
        await asyncio.sleep(0)

    async def tool_result(
        self, name: str, response: dict[str, Any], *, id: str | None = None
    ) -> None:
        """A `functionResponse` part (role user, as ADK records tool results)."""
        self._event(
            [Part(function_response=FunctionResponse(name=name, response=response, id=id))],
            role="user",
        )
        await asyncio.sleep(0)

    async def error(
        self,
        kind: str,
        message: str,
        retryable: bool = False,
        code: str | None = None,
        hint: str | None = None,
    ) -> None:
        """Send `turn-error` and end the turn."""
        frame = TurnErrorFrame(
            kind=kind, message=message, retryable=retryable, code=code, hint=hint
        )
        self._session.publish("turn-error", frame.to_dict())
        raise TurnFailed(message)

    def drop_streams(self) -> None:
        """Close every open event stream of the session now, mid-turn."""
        self._session.drop_streams()
        raise TurnAbandoned()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def echo() -> Behavior:
    """Answer with the prompt itself."""

    async def run(turn: Turn) -> None:
        await turn.say(turn.prompt)

    return run


def reply(text: str) -> Behavior:
    """Answer with a fixed text."""

    async def run(turn: Turn) -> None:
        await turn.say(text)

    return run


def narrate(steps: Sequence[str], answer: str, tool: str = "kubectl") -> Behavior:
    """Narrate each step with a tool call and its result, then answer."""

    async def run(turn: Turn) -> None:
        for i, step in enumerate(steps):
            await turn.narrate(step, tool=tool, args={"step": i})
            await turn.tool_result(
                tool, {"output": f"step {i} ok", "secret_args": "not for callers"}
            )
        await turn.say(answer)

    return run


def stream(total_bytes: int, chunk_bytes: int = 1024, char: str = "x") -> Behavior:
    """A long answer of `total_bytes` UTF-8 bytes (repeating `char`), streamed in chunks."""
    if not char:
        raise ValueError("stream: char must be a non-empty string, such as 'x' or 'é'")
    unit = len(char.encode())
    text = char * (total_bytes // unit)
    per_chunk = max(1, chunk_bytes // unit)

    async def run(turn: Turn) -> None:
        for start in range(0, len(text), per_chunk):
            await turn.chunk(text[start : start + per_chunk])
        await turn.say(text)

    return run


def slow(delay: float, then: Behavior | None = None) -> Behavior:
    """Wait `delay` seconds, then behave as `then` (default: echo)."""
    inner = then if then is not None else echo()

    async def run(turn: Turn) -> None:
        await turn.sleep(delay)
        await inner(turn)

    return run


def never_finish(narration: str = "working on it") -> Behavior:
    """Narrate once (with a tool call, so the turn is not over), then never finish."""

    async def run(turn: Turn) -> None:
        await turn.narrate(narration, tool="wait")
        await asyncio.Event().wait()

    return run


def fail(
    kind: str = "unknown", message: str = "simulated failure", retryable: bool = False
) -> Behavior:
    """End the turn with a `turn-error` of this kind."""

    async def run(turn: Turn) -> None:
        await turn.error(kind, message, retryable)

    return run


def drop_stream(after_frames: int = 0) -> Behavior:
    """Send `after_frames` narration events, then close the event streams mid-turn."""

    async def run(turn: Turn) -> None:
        for i in range(after_frames):
            await turn.narrate(f"step {i}", tool="step")
        turn.drop_streams()

    return run


def custom(fn: Callable[[Turn], Awaitable[str | None]]) -> Behavior:
    """Your own behaviour: `fn(turn)` may speak through the turn; a returned str is the answer."""

    async def run(turn: Turn) -> None:
        answer = await fn(turn)
        if answer is not None:
            await turn.say(answer)

    return run
