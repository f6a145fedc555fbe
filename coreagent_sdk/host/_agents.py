"""Agents and their turns: what a hosted agent does with a prompt.

An agent is an async function of a `Turn`. It speaks through the turn
(`say`, `narrate`, `chunk`, `tool_call`, `tool_result`, `error`), and the
host turns each call into frames of the exact wire shapes. The host wraps
every turn in `inbox` frames, a `status-update` streaming, the echoed user
event, and after the agent returns `turn-complete`, `usage-update` and a
`status-update` idle.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

from coreagent_sdk._attach._wire import (
    AgentEvent,
    AgentFrame,
    Content,
    FunctionCall,
    FunctionResponse,
    Part,
)
from coreagent_sdk._attach._wire import TurnError as TurnErrorFrame
from coreagent_sdk._records._steps import TurnStep, report

from ..models._protocol import TOKENS_MAX, token_count

__all__ = ["Agent", "Behavior", "Turn", "TurnAbandoned", "TurnFailed", "echo"]

Agent = Callable[["Turn"], Awaitable[None]]
"""What a hosted agent does with a prompt: an async function of a `Turn`."""
Behavior = Agent  # the simulator's name for an agent
CALL_PEER_TOOL = "call_peer"  # the tool's name in the events a turn records


class _Session(Protocol):
    unsent: int

    async def publish_agent(self, event: AgentEvent) -> AgentFrame: ...

    def log_event(self, event: AgentEvent) -> Any: ...

    async def call_peer(self, peer: str, prompt: str) -> dict[str, Any]: ...

    def publish(self, event: str, payload: dict[str, Any]) -> None: ...

    def drop_streams(self) -> None: ...

    def a_subscriber_waits(self) -> bool: ...


class TurnFailed(Exception):
    """Raised by `Turn.error` to end the turn after its `turn-error` frame."""


class TurnAbandoned(Exception):
    """Raised when a behaviour dropped the streams: no `turn-complete` follows."""


_event_ids = itertools.count(1)
_BURST = 64  # events a turn writes before it yields so they are committed and sent


def add_tokens(total: int, more: object) -> int:
    """`total + more` as a token count the wire can carry (see `token_count`): the sum stops
    at `TOKENS_MAX` rather than go onto a frame a Go client cannot decode."""
    return min(total + token_count(more), TOKENS_MAX)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class Turn:
    """One turn of a hosted agent: the messages it drained from the inbox, and its answer.

    ``prompt`` is the ask: the message itself, or, when several queued messages
    drain into one turn, the ``[Inbox]`` block with one ``- message`` line each
    (``messages`` keeps them apart). ``model_prompt`` is the text the model
    sees, as a daemon frames it: the ``[Inbox]`` bundle with the daemon's
    handling guidance, even for one message (a daemon runs every turn as
    ``Run("")``, so the drained inbox is the whole turn). ``prompt_id`` is
    the turn's own id, minted at turn start as a daemon does; it is not the id
    any inject answered with.

    Attributes:
        agent: The hosted agent's name (the author of its events).
        prompt: The ask: the one message drained, or the `[Inbox]` block of several.
        model_prompt: The text the model sees: the drained messages as the daemon's
            `[Inbox]` bundle, guidance included, one message or several.
        prompt_id: The turn's own id.
        invocation_id: The invocation id its events carry.
        messages: The queued messages the turn drained, one per entry.
        tokens_out: Output tokens counted so far (what `turn-complete` reports).
        runtime: The agent's runtime (what its host's `RuntimeCache` built from its
            persona, skills and secrets), leased for this turn; None when the host has
            no runtimes.
        tokens_in: Input tokens a model reported (`add_usage`); None: the host estimates them.
        on_step: Called with each `TurnStep` the turn takes (a model round, a tool call,
            its error) when someone records the turn (a simulated fleet's `calls` does);
            None: nothing is recorded.
        call_id: The ``call_id`` (as `CallPeerEvent` gives it) of the `CallPeer` call of
            this process that asked for this turn, over attach or A2A: the call that
            opened its session, or sent its A2A message; None for a caller elsewhere, and
            for the later turns of a session.
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
        model_prompt: str | None = None,
    ) -> None:
        self._session = session
        self.agent = agent
        self.prompt = prompt
        self.model_prompt = prompt if model_prompt is None else model_prompt
        self.prompt_id = prompt_id
        self.invocation_id = invocation_id
        self.messages = tuple(messages) if messages else (prompt,)
        self.tokens_out = 0
        self.runtime: Any = None
        self.tokens_in: int | None = None
        self.on_step: Callable[[TurnStep], None] | None = None
        self.call_id: int | None = None

    def add_usage(self, input_tokens: int, output_tokens: int) -> None:
        """Count tokens a model reported: `turn-complete` then carries these, not estimates.

        Counts are made fit for the wire (`add_tokens`): a whole number, never
        below 0, never past the daemon's int64.
        """
        if self.tokens_in is None:  # the first report replaces the estimates made so far
            self.tokens_in, self.tokens_out = 0, 0
        self.tokens_in = add_tokens(self.tokens_in, input_tokens)
        self.tokens_out = add_tokens(self.tokens_out, output_tokens)

    @property
    def session_id(self) -> str:
        """The id of the session this turn runs in (what a caller's `session_opened` saw)."""
        return str(getattr(self._session, "session_id", ""))

    async def emit(self, event: AgentEvent) -> AgentFrame:
        """Publish a ready-made ADK event as is (a replay's recorded events, for instance)."""
        return await self._session.publish_agent(event)

    async def _event(
        self,
        parts: Sequence[Part],
        *,
        partial: bool = False,
        role: str = "model",
        author: str | None = None,
        finish_reason: str = "",
    ) -> None:
        event = AgentEvent(
            content=Content(role=role, parts=tuple(parts)),
            partial=partial,
            finish_reason=finish_reason,
            id=f"e-{next(_event_ids)}",
            timestamp=_now(),
            invocation_id=self.invocation_id,
            author=self.agent if author is None else author,
        )
        # Written, then sent once committed: the turn goes on meanwhile, so the events of a
        # turn that speaks in a burst share a commit. It yields every _BURST events (the
        # commit of those pending runs then) so it shares the loop; its turn-complete waits
        # for the last commit, and a failed write ends the turn at its next event.
        self._session.log_event(event)
        if self._session.unsent >= _BURST or self._session.a_subscriber_waits():
            await asyncio.sleep(0)

    async def say(self, text: str, *, finish_reason: str = "") -> None:
        """The final model answer (non-partial text, no function call): ends the turn's text.

        ``finish_reason`` is the event's `FinishReason`, as ADK copies the model's:
        ``"MAX_TOKENS"`` tells a reader the answer was cut at the model's output limit.
        """
        if self.tokens_in is None:  # no model reported usage: estimate it
            self.tokens_out += max(1, len(text) // 4)
        await self._event([Part(text=text)], finish_reason=finish_reason)

    async def narrate(
        self, text: str, tool: str | None = None, args: dict[str, Any] | None = None
    ) -> None:
        """Narration; with `tool=`, a tool call in the same event, and the turn goes on.

        Without `tool=` this is a text-only model event, which is what
        `call_peer` (like the daemon's own `collect`) reads as the turn's
        answer: a caller stops reading there, even though the behaviour may go
        on. Narrate mid-turn with `tool=`; end with `say`.
        """
        parts = [Part(text=text)]
        if tool is not None:
            parts.append(Part(function_call=FunctionCall(name=tool, args=args or {})))
        await self._event(parts)

    async def chunk(self, text: str) -> None:
        """A streaming (partial) chunk; consumers skip these for the answer."""
        await self._event([Part(text=text)], partial=True)

    async def tool_call(
        self, name: str, args: dict[str, Any] | None = None, *, id: str | None = None
    ) -> None:
        """A `functionCall` part; `id` pairs it with its `tool_result` when calls overlap."""
        await self._event([Part(function_call=FunctionCall(name=name, args=args or {}, id=id))])

    async def tool_result(
        self, name: str, response: dict[str, Any], *, id: str | None = None
    ) -> None:
        """A `functionResponse` part (role user, as ADK records tool results)."""
        await self._event(
            [Part(function_response=FunctionResponse(name=name, response=response, id=id))],
            role="user",
        )

    async def call_peer(self, peer: str, prompt: str) -> dict[str, Any]:
        """Ask a peer, by name, as the model's `call_peer` tool call; returns its response.

        The turn records a function call and, when the call is over, its
        function response, as ADK writes a tool call. The response is the
        call's result (`peer`, `session_id`, `response`, `duration_ms`,
        `truncated`) or, when the call fails (unknown peer, gate, timeout,
        the peer's turn error), `{"error": "..."}`: the failure goes back as
        the tool's answer and the turn goes on. Calls go through the host's
        own `CallPeer` (its directory, its `token_env`).
        """
        return (await self.call_peers([(peer, prompt)]))[0]

    async def call_peers(
        self,
        calls: Sequence[tuple[str, str]],
        *,
        text: str = "",
        ids: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Several `call_peer` calls at once: one model event with every function call (as a
        model asks for parallel tools), one event with every response, in the same order.
        `text`, when given, is the model's words in the calls' event, before them; `ids`, the
        model's ids of the calls (minted when not given), pair each call with its response."""
        if ids is None or len(ids) != len(calls) or not all(ids):
            ids = [f"call-{uuid.uuid4().hex[:16]}" for _ in calls]
        await self._event(
            ([Part(text=text)] if text else [])
            + [
                Part(
                    function_call=FunctionCall(
                        name=CALL_PEER_TOOL, args={"peer": peer, "prompt": prompt}, id=call_id
                    )
                )
                for (peer, prompt), call_id in zip(calls, ids, strict=True)
            ]
        )
        responses = await self.ask_peers(calls)
        await self._event(
            [
                Part(
                    function_response=FunctionResponse(
                        name=CALL_PEER_TOOL, response=response, id=call_id
                    )
                )
                for response, call_id in zip(responses, ids, strict=True)
            ],
            role="user",
        )
        return responses

    async def ask_peers(self, calls: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        """`call_peer` calls at once, recording no events: for an agent that writes its own.

        A `ModelAgent` writes one event with every call of a model reply (peers and
        Python tools together) and one with every response, as ADK does, so it asks
        its peers here. Each response is as `call_peer` returns it, in order.
        """
        return list(await asyncio.gather(*(self._call(peer, asked) for peer, asked in calls)))

    async def _call(self, peer: str, prompt: str) -> dict[str, Any]:
        started = time.perf_counter()
        response = await self._session.call_peer(peer, prompt)
        if self.on_step is not None:
            said = response.get("response", "") if "error" not in response else ""
            report(
                self,
                TurnStep(
                    "tool",
                    CALL_PEER_TOOL,
                    duration_ms=(time.perf_counter() - started) * 1000,
                    sent=json.dumps({"peer": peer, "prompt": prompt}, ensure_ascii=False),
                    received=said if isinstance(said, str) else json.dumps(said, default=str),
                    error=None if "error" not in response else str(response["error"]),
                    peer=peer,
                    session_id=str(response.get("session_id", "")),
                ),
            )
        return response

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
        report(self, TurnStep("error", kind, error=message))
        raise TurnFailed(message)

    def drop_streams(self) -> None:
        """Close every open event stream of the session now, mid-turn."""
        self._session.drop_streams()
        raise TurnAbandoned()

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` inside the turn (a slow model, in a behaviour)."""
        await asyncio.sleep(seconds)


def echo() -> Agent:
    """Answer with the prompt itself (the agent of a host given none)."""

    async def run(turn: Turn) -> None:
        await turn.say(turn.prompt)

    return run
