"""A session of the host and its fan-out: its subscribers, its inbox and its turns.

As core-agent's session and `pkg/attach/broadcaster.go`: every event is
written to the host's store (its event log), which numbers it, and only then
queued to each event-stream subscriber; a subscriber that falls
`SUBSCRIBER_QUEUE_LIMIT` frames behind while its client is not reading is
dropped. The session keeps no log of its own: a replay reads the store, so a
session in memory holds only the frames its subscribers have not been sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
import uuid
from typing import TYPE_CHECKING, Any

from starlette.types import Send

from .._attach._wire import AgentEvent, AgentFrame, Content, Part
from .._peer._hops import STARTUP_SESSION  # the session a daemon starts with; never deleted
from .._peer._hops import entering as delegation_hop
from .._scrub import server_text
from ._agents import Turn, TurnAbandoned, TurnFailed, add_tokens
from ._event_json import event_json
from ._gowire import sse as encode_sse
from ._gowire import utf8
from ._inbox import INBOX_CAP, inbox_block
from ._registry import rfc3339
from ._runtimes import run_turn
from ._spans import inject_span_context, turn_span
from ._store import StoredSession, StoreWriteError, _retrieve

if TYPE_CHECKING:
    from ._session_host import SessionHost

__all__ = ["REPLAY_WINDOW", "STARTUP_SESSION", "SUBSCRIBER_QUEUE_LIMIT", "EventNotStored"]

REPLAY_WINDOW = 5_000  # the daemon's maxReplayEvents: newest events a session keeps
"""The newest events of a session a replay sends, and the store keeps (maxReplayEvents)."""
"""The session every daemon starts with; it is never evicted or deleted."""
_log = logging.getLogger("coreagent_sdk.host")
SUBSCRIBER_QUEUE_LIMIT = 256  # core-agent pkg/attach/broadcaster.go subscriberBufferSize
"""Frames waiting for one event-stream subscriber before it is dropped (the daemon's 256).

A subscriber whose write is blocked (its client is not reading) and that has
this many frames queued when another is published is dropped: the frame is not
queued, the ones already queued are still written, then its stream ends
(`broadcaster.send`, a full channel). Its memory is then bounded by this many
frames whatever the session publishes. Frames published while the writer is
not blocked are not counted against it: a daemon's writer runs beside the
turn, while a host's writer waits for the turn to yield, so a turn that
publishes a burst without yielding must not cut a reader that is keeping up.
"""
_CLOSE = None  # queued to a subscriber: end its stream
# What a tap (an in-process reader of turns, `_Tap`) reads; frames of other kinds are
# encoded only while an event stream is subscribed, since nothing else would read them.
_TAPPED = frozenset({"agent", "turn-complete", "turn-error"})
_UNTAPPED = ""  # the kind a turn's opening frames (inbox, status) are fanned out as
TURN_ERROR_MESSAGE_LIMIT = 500  # characters of a raising behaviour's repr a turn-error quotes


class EventNotStored(Exception):
    """An event the store could not write: the turn that made it fails, nothing is sent."""


class _Unsent:
    """An event handed to the store: its place among the session's frames until its commit."""

    __slots__ = ("before", "event", "frame", "settled")

    def __init__(self, event: AgentEvent, before: tuple[bytes, ...]) -> None:
        self.event = event  # what a tap is handed once it is committed
        self.before = before  # frames published with it, sent just ahead of it
        self.frame: bytes | None = None  # its frame, once committed (None: not stored)
        self.settled = False


class _Subscriber:
    """One event stream's frames on their way to its writer."""

    __slots__ = ("blocked", "queue")

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        # True while the writer waits for the client to take bytes: only then do frames
        # count toward SUBSCRIBER_QUEUE_LIMIT (see its docstring).
        self.blocked = False

    async def send(self, send: Send, body: bytes, more_body: bool = True) -> None:
        self.blocked = True
        try:
            await send({"type": "http.response.body", "body": body, "more_body": more_body})
        finally:
            self.blocked = False


class _Tap:
    """An in-process reader of a session's turns (the host's own A2A executor).

    It is handed what it reads of a turn (`_TAPPED`) as the stream would send it, once
    committed and in the same order, but each `agent` frame as its `AgentEvent`: the
    frame's JSON, written a moment ago from that event, need not be read back. A session
    whose only readers are taps encodes none of the frames they do not read (status,
    inbox, usage). Its reader takes each item as it comes, so nothing bounds its queue
    but the turn (as an event stream whose writer is keeping up).
    """

    __slots__ = ("queue",)
    blocked = False  # never waits for a client

    def __init__(self) -> None:
        self.queue: asyncio.Queue[AgentEvent | bytes | None] = asyncio.Queue()


class _Session:
    def __init__(self, daemon: SessionHost, app: str, session_id: str, user: str) -> None:
        self.daemon = daemon
        self.app = app
        self.session_id = session_id
        self.user = user
        # The newest seq sent to this session's subscribers: every event up to it is in the
        # store (a frame leaves after its commit), so a replay reads the store up to here and
        # a subscriber's queue holds what came after.
        self.seq = 0
        self.viewers: tuple[str, ...] = ()  # the ACL a creator may stamp (createSession)
        self.contributors: tuple[str, ...] = ()
        self.subscribers: set[_Subscriber | _Tap] = set()
        self.inject_spans: dict[str, Any] = {}  # queued entry id -> its inject's span context
        self.inbox: list[tuple[str, str]] = []
        # Events handed to the store and not yet committed; the frames waiting to leave, in
        # the order they were published (an event's place held until its commit, so a
        # turn's turn-error or turn-complete never overtakes its events, nor an event a
        # frame published before it); the newest write while one is unsettled (its result
        # holds the event's frame: a session idle until the sweep must not keep its last,
        # 200 KB answer); the write failure that ended this turn.
        self.unsent = 0
        self._outbox: list[tuple[str, bytes] | _Unsent] = []  # (kind, frame) or an event
        self._last_write: asyncio.Future[tuple[int, bytes]] | None = None
        self._write_failed: EventNotStored | None = None
        self.worker: asyncio.Task[None] | None = None
        self.busy = False
        self.last_touched = self.created_at = daemon.clock.now()
        self.tokens_in = 0
        self.tokens_out = 0
        self.turns = 0

    # --- frames -----------------------------------------------------------

    def touch(self) -> None:
        self.last_touched = self.daemon.clock.now()

    def _fanout(self, frame: bytes, kind: str, event: AgentEvent | None = None) -> None:
        self.touch()
        for subscriber in list(self.subscribers):
            if isinstance(subscriber, _Tap):
                if event is not None:
                    subscriber.queue.put_nowait(event)
                elif kind in _TAPPED:
                    subscriber.queue.put_nowait(frame)
                continue
            queue = subscriber.queue
            if subscriber.blocked and queue.qsize() >= SUBSCRIBER_QUEUE_LIMIT:
                # broadcaster.send: a full channel drops the subscriber and this frame;
                # what it has queued is still written, then its stream ends.
                self.subscribers.discard(subscriber)
                queue.put_nowait(_CLOSE)
            else:
                queue.put_nowait(frame)

    def unused(self) -> bool:
        """Whether nothing uses this session now: it may leave memory for the store."""
        return not (self.busy or self.inbox or self.subscribers or self.unsent or self._outbox)

    def a_subscriber_waits(self) -> bool:
        """Whether a subscriber's writer waits for its client to take bytes.

        A turn then yields after each event instead of each burst: a reader that is keeping
        up (an in-process caller reading a long answer) takes a frame per loop pass, and a
        burst committed at once while its writer waits would count whole against
        SUBSCRIBER_QUEUE_LIMIT and cut it. A client that stopped reading is still dropped
        at the limit; only the turn's writes share fewer commits meanwhile.
        """
        # A loop, not any(): asked once per event of every turn, and a generator apiece is
        # garbage the collector's young passes then walk.
        for subscriber in self.subscribers:  # noqa: SIM110
            if subscriber.blocked:
                return True
        return False

    def streamed(self) -> bool:
        """Whether an event stream is subscribed (it reads every kind of frame)."""
        return any(not isinstance(subscriber, _Tap) for subscriber in self.subscribers)

    def reads(self, kind: str) -> bool:
        """Whether any subscriber reads frames of `kind` now (else nobody would see one)."""
        if kind in _TAPPED:
            return bool(self.subscribers)
        return self.streamed()

    def publish(self, event: str, payload: dict[str, Any]) -> None:
        if not self.reads(event):
            # Nobody to send it to: as on the daemon's broadcaster, a frame published with
            # no subscriber is seen by none, so it is not encoded; the session was used.
            self.touch()
            return
        frame = encode_sse(event, payload)
        if self._outbox:
            self.touch()
            self._outbox.append((event, frame))
        else:
            self._fanout(frame, event)

    def log_event(
        self, event: AgentEvent, before: tuple[bytes, ...] = ()
    ) -> asyncio.Future[tuple[int, bytes]]:
        """Hand `event` to the store: it is sent once its commit returns (`_committed`).

        One counter across the host, as the daemon's event log numbers every session's
        events (`gormStream.Append`): a session's seqs increase but neither start at 1 nor
        run contiguously. After a write of this turn failed, nothing more is written: it
        raises that failure (`EventNotStored`). `before`: frames that leave just ahead of
        the event, once its write is settled (stored or not), in the same write to a
        subscriber.
        """
        if self._write_failed is not None:
            raise self._write_failed
        payload = utf8(event_json(event))  # a lone surrogate is U+FFFD
        unsent = _Unsent(event, before)
        self._outbox.append(unsent)
        self.unsent += 1
        written = self.daemon.store.append(
            self.session_id, payload, functools.partial(self._committed, unsent)
        )
        written.add_done_callback(_retrieve)  # its failure is the turn's, through _committed
        self._last_write = written
        return written

    async def publish_agent(self, event: AgentEvent, before: tuple[bytes, ...] = ()) -> AgentFrame:
        """Log `event` and wait for its commit: its frame, with the seq of its written row."""
        written = self.log_event(event, before)
        with contextlib.suppress(StoreWriteError):
            seq, _ = await written
            return AgentFrame(seq=seq, event=event)
        assert self._write_failed is not None  # set by _committed before the future failed
        raise self._write_failed

    async def events_logged(self) -> None:
        """Wait for every event handed to the store; `EventNotStored` if one failed."""
        last = self._last_write
        if last is not None and not last.done():
            with contextlib.suppress(StoreWriteError):
                await last  # commits settle in order: every earlier write is settled too
        if self._write_failed is not None:
            raise self._write_failed

    def _committed(self, unsent: _Unsent, outcome: tuple[int, bytes] | BaseException) -> None:
        # Called at each commit, in commit order: an event's frame leaves only now, with what
        # was published before it, and what was published after it follows, up to the next
        # event still waiting for its commit.
        self.unsent -= 1
        unsent.settled = True
        if isinstance(outcome, BaseException):
            if self._write_failed is None:
                self._write_failed = EventNotStored(f"eventlog: insert overlay row: {outcome}")
        else:
            self.seq, unsent.frame = outcome
        if not self.unsent:
            self._last_write = None  # settled: an idle session keeps no frame
        outbox = self._outbox
        sent = 0
        for head in outbox:
            if isinstance(head, tuple):
                self._fanout(head[1], head[0])
            elif not head.settled:  # commits settle in order: the later ones wait for it
                break
            else:
                for frame in head.before:
                    self._fanout(frame, _UNTAPPED)
                if head.frame is not None:
                    self._fanout(head.frame, "agent", head.event)
            sent += 1
        del outbox[:sent]  # a list (small: a turn yields every 64 events), not a deque

    async def call_peer(self, peer: str, prompt: str) -> dict[str, Any]:
        return await self.daemon.call_peer(peer, prompt)

    def subscribe(self) -> _Subscriber:
        subscriber = _Subscriber()
        self.subscribers.add(subscriber)
        return subscriber

    def tap(self) -> _Tap:
        """Read this session's turns in process (see `_Tap`); `unsubscribe` it when done."""
        tap = _Tap()
        self.subscribers.add(tap)
        return tap

    def unsubscribe(self, subscriber: _Subscriber | _Tap) -> None:
        self.subscribers.discard(subscriber)

    def drop_streams(self) -> None:
        for subscriber in list(self.subscribers):
            subscriber.queue.put_nowait(_CLOSE)
        self.subscribers.clear()

    # --- turns ------------------------------------------------------------

    def enqueue(self, message: str, wake: bool = True) -> str:
        """Queue `message`; with `wake`, start draining the inbox. Returns the entry's id."""
        prompt_id = str(uuid.uuid4())
        if self.streamed():
            self.publish(
                "inbox",
                {"state": "queued", "prompt_id": prompt_id, "queued_at": rfc3339(time.time())},
            )
        else:
            self.touch()
        self.inbox.append((prompt_id, message))
        if len(self.inbox) > INBOX_CAP:
            # As the daemon's inbox.push: drop the oldest, whether it was queued to wake or
            # not, so a stuck turn cannot grow the inbox; the inject is still answered 200.
            # Its id is logged, not its text (that is the caller's, not the host log's).
            dropped, _ = self.inbox.pop(0)
            self.inject_spans.pop(dropped, None)
            _log.warning(
                "AgentHost %r: session %s inbox cap (%d) exceeded, dropped the oldest message "
                "(prompt_id=%s)",
                self.daemon.name,
                self.session_id,
                INBOX_CAP,
                dropped,
            )
        span_context = inject_span_context()  # the inject's SERVER span: the turn links it
        if span_context is not None:
            self.inject_spans[prompt_id] = span_context
        if wake:
            self.wake()
        return prompt_id

    def wake(self) -> None:
        if self.inbox and (self.worker is None or self.worker.done()):
            self.worker = asyncio.get_running_loop().create_task(self._work())
            self.daemon._tasks.add(self.worker)
            self.worker.add_done_callback(self.daemon._tasks.discard)

    async def _work(self) -> None:
        while self.inbox:
            # Everything queued by now drains into one turn, as on a daemon.
            drained, self.inbox = self.inbox, []
            self.busy = True
            try:
                await self._turn(drained)
            finally:
                self.busy = False
                self.touch()
                if not self.daemon.store.temporary:
                    self.save()  # usage as turns end: a named store outlives the host
        # A finished task keeps its request's context: an idle session holds neither.
        self.worker = None

    async def _turn(self, drained: list[tuple[str, str]]) -> None:
        started = time.perf_counter()
        self._write_failed = None  # a failed write ends its own turn, not the next one
        messages = [m for _, m in drained]
        # A daemon runs every turn as Run("") (wakeloop.go), so prependInboxMessages frames
        # the drained batch as the [Inbox] bundle whether it holds one message or several.
        framed = inbox_block(messages)
        prompt = messages[0] if len(messages) == 1 else framed
        # The turn's own id, minted now: not the id any inject answered with.
        prompt_id = str(uuid.uuid4())
        model = self.daemon.model
        # The turn's opening frames leave with its user event, in one write to a subscriber
        # (a frame apiece cost each reader a wake-up and a parse, most of what a call's
        # commit cost it), once that event's write is settled.
        opening = (
            (
                *(encode_sse("inbox", {"state": "dequeued", "prompt_id": e}) for e, _ in drained),
                encode_sse("status-update", {"model": model, "turn_state": "streaming"}),
            )
            if self.streamed()
            else ()  # no event stream to read them (see publish)
        )
        invocation = f"inv-{secrets.token_hex(4)}"
        try:
            # Written before the turn runs: a turn whose ask is not in the log never starts.
            await self.publish_agent(
                AgentEvent(
                    content=Content(role="user", parts=(Part(text=framed),)),
                    id=f"u-{uuid.uuid4()}",
                    timestamp=rfc3339(time.time()),
                    invocation_id=invocation,
                    author="user",
                ),
                opening,
            )
        except EventNotStored as exc:
            self._not_stored(exc)
            self.publish("status-update", {"turn_state": "idle"})
            return
        turn = Turn(
            self,
            agent=self.daemon.name,
            prompt=prompt,
            prompt_id=prompt_id,
            invocation_id=invocation,
            messages=messages,
            model_prompt=framed,
        )
        last_turn = None
        try:
            injects = [self.inject_spans.pop(entry_id, None) for entry_id, _ in drained]
            last_turn = await self._run(turn, framed, started, injects)
        finally:
            self.publish("status-update", {"turn_state": "idle"})
        if last_turn is not None and self.reads("usage-update"):
            # After idle, as the daemon's tracker reports the finished turn (protocol.md).
            self.publish("usage-update", {**self.usage(), "last_turn": last_turn})

    async def _run(
        self, turn: Turn, prompt: str, started: float, injects: list[Any]
    ) -> dict[str, Any] | None:
        """Run the agent; the finished turn's `last_turn` usage, or None when it did not finish."""
        with turn_span(
            self.daemon.name,
            self.session_id,
            turn.prompt_id,
            injects,
            propagate=self.daemon.propagate_trace,
        ) as span:
            try:
                # A caller in this process noted its deadline for this session: the turn's
                # own calls get half of what is left, so a delegation cycle ends (_hops).
                with delegation_hop(self.session_id, turn.agent) as caller:
                    turn.call_id = caller
                    await run_turn(self.daemon, turn)
                await self.events_logged()  # every event in the log before turn-complete
            except TurnFailed as exc:
                span.fail("TurnFailed", str(exc))
                return None
            except TurnAbandoned:
                return None
            except EventNotStored as exc:
                span.fail("EventNotStored", str(exc))
                self._not_stored(exc)
                return None
            except Exception as exc:  # a behaviour bug is the peer's turn error, as on a daemon
                # Scrubbed and bounded: an exception's repr may quote a whole frame, a
                # model's text, or a secret a tool was handed.
                said, cut = server_text(f"behaviour raised {exc!r}", TURN_ERROR_MESSAGE_LIMIT)
                message = said + ("..." if cut else "")
                span.fail(type(exc).__name__, message)
                self.publish(
                    "turn-error", {"kind": "unknown", "message": message, "retryable": False}
                )
                if self.daemon.on_agent_error is not None:
                    self.daemon.on_agent_error(exc)
                return None
        # Whole, >= 0 and within int64 whatever an agent or its model counted: the
        # daemon's TokensIn is a Go int, and a Go client cannot decode a frame past it.
        estimate = max(1, len(prompt) // 4)
        tokens_in = add_tokens(0, turn.tokens_in if turn.tokens_in is not None else estimate)
        tokens_out = add_tokens(0, turn.tokens_out)
        self.tokens_in = add_tokens(self.tokens_in, tokens_in)
        self.tokens_out = add_tokens(self.tokens_out, tokens_out)
        self.turns += 1
        # No cost_usd: the daemon leaves it out and the next usage-update carries cost.
        self.publish(
            "turn-complete",
            {
                "prompt_id": turn.prompt_id,
                "model": self.daemon.model,
                "tokens_in": tokens_in,
                "tokens_out": tokens_out,
                "latency_ms": int((time.perf_counter() - started) * 1000),
            },
        )
        return {
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cost_usd": 0.0,
            "model": self.daemon.model,
        }

    def _not_stored(self, exc: EventNotStored) -> None:
        """The turn fails as a daemon's does when its event log refuses an Append."""
        self.publish("turn-error", {"kind": "unknown", "message": str(exc), "retryable": False})

    def usage(self) -> dict[str, Any]:
        return {
            "tokens_in_total": self.tokens_in,
            "tokens_out_total": self.tokens_out,
            "cost_usd_total": 0.0,
            "turns_total": self.turns,
        }

    def save(self) -> asyncio.Future[None]:
        """Write this session's row (in order with its events); awaited, it is committed."""
        return self.daemon.store.put(
            StoredSession(
                app=self.app,
                session_id=self.session_id,
                user=self.user,
                viewers=self.viewers,
                contributors=self.contributors,
                created_at=self.created_at,
                last_touched=self.last_touched,
                tokens_in=self.tokens_in,
                tokens_out=self.tokens_out,
                turns=self.turns,
            )
        )

    async def close(self) -> None:
        """Free the session: stop its turn and end its streams."""
        self.drop_streams()
        self.inbox.clear()
        self.inject_spans.clear()
        worker, self.worker = self.worker, None
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

    def row(self) -> dict[str, Any]:
        return _listed(self.app, self.user, self.session_id, "active", self.last_touched)


def _listed(app: str, user: str, sid: str, status: str, touched: float) -> dict[str, Any]:
    """A `GET /sessions` row: "active" in memory, "idle" in the store only (`listSessions`)."""
    return {
        "app": app,
        "user": user,
        "sessionID": sid,
        # Every session has an event log, on a daemon too (the store's rows were made so).
        "has_event_log": True,
        "status": status,
        "last_touched_at": rfc3339(touched),
    }
