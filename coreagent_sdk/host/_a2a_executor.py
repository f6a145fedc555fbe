"""The A2A agent executor of a host: one A2A message is one turn in a fresh session.

The invariant: an A2A task tells what the attach wire tells a `call_peer` of the
same turn, in A2A's shapes, and nothing more. How each rule holds it:

- A message opens a fresh session owned by the caller, as `POST /sessions` does
  (the same rate limit per caller, 501's multi-session rule, the row written before
  anything runs), subscribes to it in-process, and only then queues the text: the
  order `call_peer` keeps ("subscribe before inject"), so no frame of the turn is missed.
- What the task says is read from what the host sends an event stream, each item handed
  over once its event is in the store: nothing is told over A2A that is not written. The
  executor reads through a tap (`_Session.tap`): the same items in the same order, its
  `agent` events as objects rather than JSON to parse again.
- The answer is collected by `call_peer`'s rule (protocol.md, "What a delegation
  reads"): non-partial model text, joined by a blank line, trimmed; the task completes
  where a `call_peer` stops reading. Streaming chunks are appended to the artifact
  "answer" while the turn runs; the answer then replaces them (``append=False``,
  ``lastChunk``), so the completed task's artifact is the answer and only the answer.
  Narration (model text beside a tool call) is a `working` status message as well.
- A `turn-error` is a failed task: its status message is the error's text, and the
  message's metadata (and the status update's) carries `kind` and `retryable`, with
  `code` and `hint` when set. A stream the host ends first (the turn dropped its
  streams, the host closed, the reader fell `SUBSCRIBER_QUEUE_LIMIT` frames behind)
  fails the task with kind "unknown": never a completed task with a partial answer.
- `CancelTask` stops the session's turn (its worker is cancelled, as `DELETE` stops
  it) before the SDK cancels `execute()`; the session stays, holding no running turn.
- The task's artifact and status metadata name the session (`session_id`), where
  `call_peer`'s result names it, so an operator can read the turn on the attach wire.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import TaskState

from .._attach._wire import AgentEvent, TurnComplete, TurnError, decode_frame
from .._peer import _hops as delegation
from .._peer._results import ANSWER_SEPARATOR as _SEPARATOR
from ._daemon import Daemon
from ._registry import ANONYMOUS, Identity
from ._session import _CLOSE
from ._session_handlers import open_session
from ._store import StoreWriteError

if TYPE_CHECKING:
    from ._session import _Session

__all__ = ["ANSWER_ARTIFACT", "A2AHost", "TurnExecutor"]

ANSWER_ARTIFACT = "answer"
"""The id (and name) of the artifact a task's answer is in, its chunks while it streams."""


class A2AHost(Daemon, Protocol):
    """What A2A serving uses of its host (a Protocol: the host imports this module's users)."""

    description: str
    external_url: str | None
    skills: dict[str, str]
    tokens: dict[str, Identity] | None
    _attach_token: str | None


def _frame(item: AgentEvent | bytes) -> AgentEvent | TurnComplete | TurnError | None:
    """What a tap handed over: an `agent` event as it is, a turn-complete or turn-error frame
    decoded (`decode_frame`, the typed reading every client of the wire uses)."""
    if isinstance(item, AgentEvent):
        return item
    # Every frame a session queues is one as `encode_sse` wrote it: `event: X\ndata: {json}\n\n`.
    head, _, rest = item.partition(b"\n")
    frame = decode_frame(head[7:].decode(), rest[6:].rstrip(b"\n").decode())
    return frame if isinstance(frame, TurnComplete | TurnError) else None


class TurnExecutor(AgentExecutor):
    """Runs each A2A message as one turn of `host`'s agent (see the module's rules)."""

    def __init__(self, host: A2AHost) -> None:
        self.host = host
        self._sessions: dict[str, _Session] = {}  # task id -> the session running its turn
        self._cancelling: set[str] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task_id, context_id = context.task_id or "", context.context_id or ""
        if message is None or not task_id:  # the SDK's handler always sets both
            raise ValueError("a2a: execute() without a message or task id")
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(message))
        updater = TaskUpdater(event_queue, task_id, context_id)
        refused = self._refusal(context)
        if refused is not None:
            kind, text, retryable = refused
            if kind == "rejected":
                await updater.reject(updater.new_agent_message([new_text_part(text)]))
            else:
                await self._fail(updater, kind, text, retryable)
            return
        who: Identity = context.call_context.state.get("identity") or ANONYMOUS
        try:
            session = await open_session(self.host, who.name)
        except StoreWriteError as exc:
            await self._fail(updater, "unknown", f"a2a: the session could not be stored: {exc}")
            return
        self._sessions[task_id] = session
        # A CallPeer of this process that sent the message noted it: its deadline and its
        # call reach the turn as a session's do over attach (_hops).
        delegation.hand_on(message.message_id, session.session_id)
        subscriber = session.tap()  # before the message is queued, as call_peer
        try:
            await updater.update_status(
                TaskState.TASK_STATE_WORKING, metadata={"session_id": session.session_id}
            )
            session.enqueue(context.get_user_input().strip())
            await self._follow(updater, subscriber.queue, session.session_id)
        finally:
            session.unsubscribe(subscriber)
            self._sessions.pop(task_id, None)
            self._cancelling.discard(task_id)

    def _refusal(self, context: RequestContext) -> tuple[str, str, bool] | None:
        """Why this message opens no session: (kind, text, retryable), or None."""
        host = self.host
        if not context.get_user_input().strip():
            return (
                "rejected",
                "a2a: the message has no text; send the prompt as a text part",
                False,
            )
        if host.draining:
            return (
                "transient_network",
                "a2a: the daemon is shutting down; queued messages would be lost, retry after "
                "restart",
                True,
            )
        who: Identity = context.call_context.state.get("identity") or ANONYMOUS
        if host.rate_limiter is not None:  # as POST /sessions: checked before the 501
            allowed, wait = host.rate_limiter.allow("" if who is ANONYMOUS else who.name)
            if not allowed:
                return (
                    "rate_limited",
                    f"a2a: rate limited: each message opens a session; retry after {wait} s",
                    True,
                )
        if not host.multi_session:
            return (
                "config_error",
                "a2a: multi-session is not enabled: each A2A message runs in a fresh session; "
                "start the daemon with attach.multi_session.enabled: true",
                False,
            )
        return None

    async def _follow(
        self, updater: TaskUpdater, queue: asyncio.Queue[AgentEvent | bytes | None], sid: str
    ) -> None:
        """Turn the session's frames into task events until the turn's answer is whole."""
        pieces: list[str] = []
        chunked = False
        while True:
            raw = await queue.get()
            if raw is _CLOSE:
                if updater.task_id in self._cancelling:
                    await asyncio.Future()  # the SDK cancels this execute() next
                await self._fail(
                    updater,
                    "unknown",
                    "a2a: the turn's event stream ended before the turn did; no partial answer "
                    f"is returned (session {sid})",
                    sid=sid,
                )
                return
            frame = _frame(raw)
            if isinstance(frame, AgentEvent):
                event = frame
                if event.author in ("", "user"):  # the echoed prompt, tool results
                    continue
                text = event.text
                if event.partial:
                    if text:
                        await updater.add_artifact(
                            [new_text_part(text)],
                            artifact_id=ANSWER_ARTIFACT,
                            name=ANSWER_ARTIFACT,
                            append=chunked,
                            last_chunk=False,
                        )
                        chunked = True
                    continue
                if text:
                    pieces.append(text if pieces else text.lstrip())
                    if event.has_function:
                        await updater.update_status(
                            TaskState.TASK_STATE_WORKING,
                            updater.new_agent_message([new_text_part(text)]),
                        )
                if event.turn_complete or (text and not event.has_function):
                    break
            elif isinstance(frame, TurnComplete):
                break
            elif isinstance(frame, TurnError):
                await self._fail(
                    updater,
                    frame.kind,
                    frame.message,
                    frame.retryable,
                    sid=sid,
                    code=frame.code,
                    hint=frame.hint,
                )
                return
        await updater.add_artifact(
            [new_text_part(_SEPARATOR.join(pieces).strip())],
            artifact_id=ANSWER_ARTIFACT,
            name=ANSWER_ARTIFACT,
            append=False,
            last_chunk=True,
            metadata={"session_id": sid},
        )
        await updater.complete()

    @staticmethod
    async def _fail(
        updater: TaskUpdater,
        kind: str,
        text: str,
        retryable: bool = False,
        *,
        sid: str | None = None,
        code: str | None = None,
        hint: str | None = None,
    ) -> None:
        meta: dict[str, Any] = {"kind": kind, "retryable": retryable}
        if code:
            meta["code"] = code
        if hint:
            meta["hint"] = hint
        if sid:
            meta["session_id"] = sid
        await updater.update_status(
            TaskState.TASK_STATE_FAILED,
            updater.new_agent_message([new_text_part(text)], metadata=meta),
            metadata=meta,
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Stop the task's turn, then say so: the SDK cancels `execute()` after this."""
        task_id = context.task_id or ""
        session = self._sessions.get(task_id)
        if session is not None:
            self._cancelling.add(task_id)
            await session.close()  # cancels the turn's worker and waits for it
        await TaskUpdater(event_queue, task_id, context.context_id or "").cancel()
