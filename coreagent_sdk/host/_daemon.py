"""The agent host: the ASGI app of one daemon's attach server (and, with a registry, of a hub).

It answers with the status codes and shapes of `protocol.md`: 201/204/400/
401/403/404/409/415/429/501 where a real daemon does, SSE frames written
exactly `event: X\\ndata: {json}\\n\\n`, `capabilities` first, then a status
snapshot, the replayed log, then live frames to the subscribers connected at
the time.

Memory is bounded as a daemon's is: a session keeps the newest
`REPLAY_WINDOW` events, a session idle for `session_idle_timeout` is evicted
from memory to the host's store (one with a running turn is never idle) and
resumed from it by the next request, and `DELETE` frees a session at once.
Bodies are counted while they are read and refused past their cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math
import os
import secrets
import sqlite3
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import __version__
from .._agentcard import AGENT_CARD_PATH
from .._call_peer import CallPeer
from .._clock import Clock, SystemClock
from .._directory import Directory, HubDirectory
from .._endpoint import checked_base_url
from .._quote import go_quote
from .._wire import PROTOCOL_VERSION, AgentEvent, AgentFrame, Content, Part
from ..errors import CoreAgentError
from ._agents import Agent, Turn, TurnAbandoned, TurnFailed, echo
from ._card import card_response
from ._gowire import (
    decode_into,
    is_json_media_type,
    json_response,
    origin_allowed,
    parse_since,
    read_json,
)
from ._gowire import sse as encode_sse
from ._ratelimit import SessionRateLimit, SessionRateLimiter
from ._registry import ANONYMOUS, Identity, PeerRegistry, RegistryError, rfc3339
from ._runtimes import Runtimes, run_turn
from ._spans import ServerSpans, inject_span_context, turn_span
from ._store import SessionStore, StoredSession, sweep_period

__all__ = [
    "DEFAULT_SESSION_IDLE_TIMEOUT",
    "INBOX_CAP",
    "MAX_INJECT_BYTES",
    "MAX_REGISTER_BYTES",
    "REPLAY_WINDOW",
    "STARTUP_SESSION",
    "SUBSCRIBER_QUEUE_LIMIT",
    "AgentHost",
    "StreamHook",
]

MAX_INJECT_BYTES = 8 * 1024
"""The largest inject body the host reads; a larger one is answered 400."""
MAX_REGISTER_BYTES = 16 * 1024
"""The largest `POST /peers` body a hub reads; a larger one is answered 400."""
MAX_CREATE_BYTES = 8 * 1024  # the daemon's operatorPostMaxBytes, which caps POST /sessions
REPLAY_WINDOW = 5_000  # the daemon's maxReplayEvents: newest events a session keeps
"""The newest events a session keeps and replays (the daemon's maxReplayEvents)."""
# Seqs a host with a named store records as possibly sent ahead of its events, which are
# written after each turn: a host killed mid-turn then restarts past every seq it sent, as
# the daemon's event log (written as each event is appended) never numbers two events alike.
_SEQ_RESERVE = 1024
DEFAULT_SESSION_IDLE_TIMEOUT = 24 * 3600.0  # the daemon's session_idle_timeout
"""Seconds a session may sit idle before eviction, the daemon's default (24 h)."""
STARTUP_SESSION = "default"  # the session a daemon starts with; it cannot be deleted
"""The session every daemon starts with; it is never evicted or deleted."""
INBOX_CAP = 256  # core-agent pkg/agent/inbox.go defaultInboxCap
"""The most messages a session's inbox holds; one more drops the oldest, as `inbox.push` does."""
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
_VERSION_HEADER = "x-attach-protocol-version"
_EVENT_TYPES = (
    "status-update",
    "usage-update",
    "inbox",
    "turn-complete",
    "turn-error",
    "agent",
    "wake",
    "pause",
)
_MAX_LISTINGS = 64  # encoded GET /peers bodies kept per registry version
_CLOSE = None  # queued to a subscriber: end its stream
_CHUNK_BYTES = 64 * 1024  # frames ready together are written together, up to this much
DEFAULT_GRACE = 5.0  # seconds a stopping host lets running turns finish
DAEMON_RATE_LIMIT = SessionRateLimit()  # a daemon limits POST /sessions unless told not to


class StreamHook(Protocol):
    """A seam on every event stream a host writes (the simulator's faults use it)."""

    def before_frame(self) -> bytes:
        """Bytes written before each frame (b"" for none)."""

    def end_after(self, sent: int) -> bool:
        """True ends the stream cleanly after `sent` frames; raising aborts it mid-body."""


def _text(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    # Go's http.Error: plain text and a newline, and nosniff so no browser reads it as more.
    return PlainTextResponse(
        message + "\n",
        status_code=status,
        headers={"X-Content-Type-Options": "nosniff", **(headers or {})},
    )


# The header a proxy asserts another identity with (core-agent `auth.HeaderAssertedCaller`).
_PROXY_HEADER = "x-asserted-caller"


def _unauthorized(message: str) -> Response:
    # `writeUnauthorized`: the per-caller layer's 401, its realm distinct from the transport
    # token's `realm="attach"` so a client can tell which layer refused it.
    return _text(401, message, {"WWW-Authenticate": 'Bearer realm="attach-multisession"'})


# What a store that cannot be read raises (see _store: sqlite3, the file, a closed store).
_STORE_ERRORS = (sqlite3.Error, OSError, ValueError, RuntimeError)


class _StoreUnreadable(Exception):
    """A lookup's store read failed: answered 400, as `writeLookupError` answers an error
    that is neither a miss (404) nor an ambiguous id (409)."""


def _unreadable(daemon: str, sid: str, exc: BaseException) -> _StoreUnreadable:
    # The caller gets SQLite's own words (fixed texts: "no such table: sessions"), never a
    # path or a Python error's text; the host's log gets the whole error.
    _log.warning("AgentHost %r: resuming session %s: the store failed: %r", daemon, sid, exc)
    reason = str(exc) if isinstance(exc, sqlite3.Error) else type(exc).__name__
    return _StoreUnreadable(
        f"attach: resume {go_quote(sid)}: the session store could not be read ({reason})"
    )


def _answer_unreadable(request: Request, exc: Exception) -> Response:
    return _text(400, str(exc))


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


class _Session:
    def __init__(self, daemon: AgentHost, app: str, session_id: str, user: str) -> None:
        self.daemon = daemon
        self.app = app
        self.session_id = session_id
        self.user = user
        self.seq = 0  # the last seq this session logged (seqs come from the host's counter)
        self.viewers: tuple[str, ...] = ()  # the ACL a creator may stamp (createSession)
        self.contributors: tuple[str, ...] = ()
        # Only the newest REPLAY_WINDOW events are kept: a daemon replays no more.
        self.log: deque[tuple[int, bytes]] = deque(maxlen=REPLAY_WINDOW)
        self.subscribers: set[_Subscriber] = set()
        self.inject_spans: dict[str, Any] = {}  # queued entry id -> its inject's span context
        self.inbox: list[tuple[str, str]] = []
        self.worker: asyncio.Task[None] | None = None
        self.busy = False
        self.last_touched = self.created_at = daemon.clock.now()
        self.saved_seq = 0  # the newest seq in the host's store
        self.tokens_in = 0
        self.tokens_out = 0
        self.turns = 0

    # --- frames -----------------------------------------------------------

    def touch(self) -> None:
        self.last_touched = self.daemon.clock.now()

    def _fanout(self, frame: bytes) -> None:
        self.touch()
        for subscriber in list(self.subscribers):
            queue = subscriber.queue
            if subscriber.blocked and queue.qsize() >= SUBSCRIBER_QUEUE_LIMIT:
                # broadcaster.send: a full channel drops the subscriber and this frame;
                # what it has queued is still written, then its stream ends.
                self.subscribers.discard(subscriber)
                queue.put_nowait(_CLOSE)
            else:
                queue.put_nowait(frame)

    def publish(self, event: str, payload: dict[str, Any]) -> None:
        self._fanout(encode_sse(event, payload))

    def publish_agent(self, event: AgentEvent) -> AgentFrame:
        # One counter across the host, as the daemon's event log numbers every session's
        # events: a session's seqs increase but neither start at 1 nor run contiguously.
        self.seq = next(self.daemon._seqs)
        self.daemon._reserve_seqs(self.seq)
        frame = AgentFrame(seq=self.seq, event=event)
        data = encode_sse("agent", frame.to_dict())
        self.log.append((self.seq, data))
        self._fanout(data)
        return frame

    async def call_peer(self, peer: str, prompt: str) -> dict[str, Any]:
        return await self.daemon.call_peer(peer, prompt)

    def subscribe(self) -> _Subscriber:
        subscriber = _Subscriber()
        self.subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: _Subscriber) -> None:
        self.subscribers.discard(subscriber)

    def drop_streams(self) -> None:
        for subscriber in list(self.subscribers):
            subscriber.queue.put_nowait(_CLOSE)
        self.subscribers.clear()

    # --- turns ------------------------------------------------------------

    def enqueue(self, message: str, wake: bool = True) -> str:
        """Queue `message`; with `wake`, start draining the inbox. Returns the entry's id."""
        prompt_id = str(uuid.uuid4())
        self.publish(
            "inbox", {"state": "queued", "prompt_id": prompt_id, "queued_at": rfc3339(time.time())}
        )
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
                    self.save()  # a named store is written as turns end: it outlives the host

    async def _turn(self, drained: list[tuple[str, str]]) -> None:
        started = time.perf_counter()
        for entry_id, _ in drained:
            self.publish("inbox", {"state": "dequeued", "prompt_id": entry_id})
        messages = [m for _, m in drained]
        # A daemon runs every turn as Run("") (wakeloop.go), so prependInboxMessages frames
        # the drained batch as the [Inbox] bundle whether it holds one message or several.
        framed = inbox_block(messages)
        prompt = messages[0] if len(messages) == 1 else framed
        # The turn's own id, minted now: not the id any inject answered with.
        prompt_id = str(uuid.uuid4())
        model = self.daemon.model
        self.publish("status-update", {"model": model, "turn_state": "streaming"})
        invocation = f"inv-{secrets.token_hex(4)}"
        self.publish_agent(
            AgentEvent(
                content=Content(role="user", parts=(Part(text=framed),)),
                id=f"u-{uuid.uuid4()}",
                timestamp=rfc3339(time.time()),
                invocation_id=invocation,
                author="user",
            )
        )
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
        if last_turn is not None:
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
                await run_turn(self.daemon, turn)
            except TurnFailed as exc:
                span.fail("TurnFailed", str(exc))
                return None
            except TurnAbandoned:
                return None
            except Exception as exc:  # a behaviour bug is the peer's turn error, as on a daemon
                message = f"behaviour raised {exc!r}"
                span.fail(type(exc).__name__, message)
                self.publish(
                    "turn-error", {"kind": "unknown", "message": message, "retryable": False}
                )
                if self.daemon.on_agent_error is not None:
                    self.daemon.on_agent_error(exc)
                return None
        tokens_in = turn.tokens_in if turn.tokens_in is not None else max(1, len(prompt) // 4)
        self.tokens_in += tokens_in
        self.tokens_out += turn.tokens_out
        self.turns += 1
        # No cost_usd: the daemon leaves it out and the next usage-update carries cost.
        self.publish(
            "turn-complete",
            {
                "prompt_id": turn.prompt_id,
                "model": self.daemon.model,
                "tokens_in": tokens_in,
                "tokens_out": turn.tokens_out,
                "latency_ms": int((time.perf_counter() - started) * 1000),
            },
        )
        return {
            "tokens_in": tokens_in,
            "tokens_out": turn.tokens_out,
            "cost_usd": 0.0,
            "model": self.daemon.model,
        }

    def usage(self) -> dict[str, Any]:
        return {
            "tokens_in_total": self.tokens_in,
            "tokens_out_total": self.tokens_out,
            "cost_usd_total": 0.0,
            "turns_total": self.turns,
        }

    def save(self) -> None:
        """Write this session's row and its events not yet stored (off the loop, in order)."""
        unsaved = [(seq, data) for seq, data in self.log if seq > self.saved_seq]
        self.daemon.store.put(
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
            ),
            unsaved,
        )
        self.saved_seq = self.seq

    async def close(self) -> None:
        """Free the session: stop its turn and end its streams."""
        self.drop_streams()
        self.inbox.clear()
        self.inject_spans.clear()
        worker, self.worker = self.worker, None
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        self.log.clear()

    def row(self) -> dict[str, Any]:
        return _listed(self.app, self.user, self.session_id, "active", self.last_touched)


def _cancel_anywhere(task: asyncio.Task[None]) -> None:
    """Cancel a task of this loop or another one (a closed loop's tasks are gone already)."""
    other = task.get_loop()
    if other is asyncio.get_running_loop():
        task.cancel()
    elif not other.is_closed():
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            other.call_soon_threadsafe(task.cancel)


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


INBOX_GUIDANCE = (
    "How to handle the bundle:\n"
    "- Variants of the same ask or signal \u2192 treat as ONE; don't re-do work per message.\n"
    "- Corroborating detail on something you already handled \u2192 acknowledge it and move "
    "on; do not re-open the work.\n"
    "- Mid-task adjustments \u2192 adapt your next step.\n"
    "- Separate asks during an active task \u2192 capture with `todo`, continue what you were "
    "doing.\n"
    "- After a completed task (the latest message is a checkpoint summary) \u2192 treat the "
    "bundle as the next request and respond once."
)
"""The daemon's guidance under a bundle of queued messages (`pkg/agent/inbox.go`)."""


def inbox_block(messages: list[str]) -> str:
    """Several queued messages as the model sees them in one turn.

    Pins core-agent `pkg/agent/inbox.go` `formatInboxBundle("[Inbox]", ...)`:
    a header, one `- message` line each, a blank line, then the guidance.
    """
    return "[Inbox]\n" + "".join(f"- {m}\n" for m in messages) + "\n" + INBOX_GUIDANCE


# What Go's strings.TrimSpace trims (unicode.IsSpace). Python's str.strip() trims U+001C to
# U+001F as well, so a version a daemon refuses as malformed was read as a number here.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def protocol_major(version: str) -> int | None:
    """The leading integer of a declared version (`1`, `v1`, `1.4.0-rc.1`), None without one.

    Pins core-agent `pkg/attach/protocol.go` `protocolMajor`.
    """
    v = version.strip(_GO_SPACE)
    v = v[1:] if v.startswith("v") else v
    for i, c in enumerate(v):
        if c in ".-+":
            v = v[:i]
            break
    if not (v.isascii() and v.isdigit()):
        return None  # Atoi refuses it
    digits = v.lstrip("0") or "0"  # Atoi reads leading zeros: 00…01 is 1
    if len(digits) > 19:
        return None  # past int64 (and Python's int() refuses 4,300+ digits)
    major = int(digits)
    return major if major < 2**63 else None


class _EventsEndpoint:
    """`GET .../events` as a raw ASGI app, so the subscription is made before 200 is sent
    and released on every way out (disconnect, cancel, drop)."""

    def __init__(self, daemon: AgentHost) -> None:
        self.daemon = daemon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        daemon = self.daemon
        # The session is looked up first: an unknown one is 404 whatever the version says.
        session = await daemon.lookup_session(request)
        if session is None:
            await _text(404, "session not found")(scope, receive, send)
            return
        refused = negotiate_version(request)
        if refused is not None:
            await refused(scope, receive, send)
            return
        # url.Values.Get: the first of a repeated parameter (Starlette's get keeps the last).
        given = request.query_params.getlist("since")
        since = parse_since(given[0] if given else None)
        subscriber = session.subscribe()
        queue = subscriber.queue
        watcher = asyncio.get_running_loop().create_task(self._watch_disconnect(receive, queue))
        hook = daemon.stream_hook
        sent = 0
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"),
                        (b"x-attach-protocol-version", PROTOCOL_VERSION.encode()),
                    ],
                }
            )
            opening = [daemon.capabilities_frame(request), daemon.status_frame(session)]
            if session.turns:
                opening.append(encode_sse("usage-update", session.usage()))
            opening.extend(data for seq, data in session.log if seq > since)
            pending: deque[bytes | None] = deque(opening)
            if hook is None:
                await self._stream(pending, subscriber, send)
                return
            while True:
                data = pending.popleft() if pending else await queue.get()
                if data is _CLOSE:
                    break
                prefix = hook.before_frame() if hook is not None else b""
                if prefix:
                    await subscriber.send(send, prefix)
                await subscriber.send(send, data)
                sent += 1
                if hook is not None and hook.end_after(sent):
                    break
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write
        finally:
            session.unsubscribe(subscriber)
            watcher.cancel()

    @staticmethod
    async def _stream(pending: deque[bytes | None], subscriber: _Subscriber, send: Send) -> None:
        """Write frames as they come, every frame ready at the time in one body chunk.

        The SSE stream is bytes: frames published together (a turn's last
        frames, the opening snapshot) cost one write and one read instead of
        one each, which under load was most of what the host cost over a bare
        app. No frame waits for another: what is ready is sent at once.
        """
        queue = subscriber.queue
        while True:
            if not pending:
                pending.append(await queue.get())
            while not queue.empty():
                pending.append(queue.get_nowait())
            while pending:
                chunk: list[bytes] = []
                size = 0
                # Bounded: a 5,000-event replay goes out in pieces, never one copy of it all.
                while pending and size < _CHUNK_BYTES:
                    data = pending.popleft()
                    if data is _CLOSE:
                        pending.clear()
                        pending.append(_CLOSE)
                        break
                    chunk.append(data)
                    size += len(data)
                if chunk:
                    await subscriber.send(send, b"".join(chunk))
                if pending and pending[0] is _CLOSE:
                    await subscriber.send(send, b"", more_body=False)
                    return

    @staticmethod
    async def _watch_disconnect(receive: Receive, queue: asyncio.Queue[bytes | None]) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                queue.put_nowait(_CLOSE)
                return


def negotiate_version(request: Request) -> Response | None:
    """400 for a declared version without a leading integer, 409 for another major.

    The query (`?protocol=`) is read before the header. Pins core-agent
    `pkg/attach/protocol.go` `negotiateProtocolVersion` and `clientProtocolVersion`.
    """
    # URL.Query().Get is the first value; Starlette's query_params.get is the last.
    declared = next(iter(request.query_params.getlist("protocol")), "").strip(_GO_SPACE)
    if not declared:
        declared = request.headers.get(_VERSION_HEADER, "").strip(_GO_SPACE)
    if not declared:
        return None
    headers = {"X-Attach-Protocol-Version": PROTOCOL_VERSION}
    theirs, ours = protocol_major(declared), protocol_major(PROTOCOL_VERSION)
    if theirs is None:
        return _text(
            400,
            f"malformed protocol version {_q(declared)} (expected semver like "
            f"{_q(PROTOCOL_VERSION)})",
            headers,
        )
    if theirs != ours:
        return _text(
            409,
            f"protocol version mismatch: client speaks {_q(declared)} (major {theirs}), server "
            f"speaks {_q(PROTOCOL_VERSION)} (major {ours}); upgrade the client or connect to a "
            "compatible daemon",
            headers,
        )
    return None


def _q(value: str) -> str:
    # Go's %q as the daemon's messages use it (JSON left U+2028, U+202E, DEL raw), cut:
    # what a client declared is not ours to echo whole.
    return go_quote(value)


def _identities(names: list[str] | None) -> tuple[str, ...]:
    """An ACL list as `SessionACL.Normalized` keeps it: trimmed, no blanks, no repeats."""
    out: dict[str, None] = {}
    for name in names or ():
        if isinstance(name, str) and name.strip():
            out.setdefault(name.strip(), None)
    return tuple(out)


def _content_length(request: Request) -> int:
    # A hostile or malformed Content-Length reads as no body, never as a 500.
    raw = request.headers.get("content-length", "")
    return int(raw) if raw.isascii() and raw.isdigit() else 0


async def read_capped(request: Request, limit: int) -> bytes | Response:
    """The body, counted while it is read: past `limit` the rest is never read (400).

    Pins Go's `http.MaxBytesReader` as core-agent `pkg/attach/handlers.go` `readJSON` uses it.
    """
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _text(400, f"request body too large (max {limit} bytes)")
            chunks.append(chunk)
    except ClientDisconnect:
        # The caller left mid-body: nobody reads this answer, and it is no server error
        # (uncaught, each such caller was a traceback in the host's log).
        return _text(400, "request body incomplete: the client disconnected")
    return b"".join(chunks)


class _Guard:
    """Auth and the JSON content type, checked once in front of every route."""

    def __init__(self, app: ASGIApp, daemon: AgentHost) -> None:
        self.app = app
        self.daemon = daemon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        daemon = self.daemon
        if scope["type"] == "http" and scope["path"] == AGENT_CARD_PATH and daemon.description:
            # The card bypasses auth, as the daemon's cardBypass routes it: discovery is public.
            await daemon.card(Request(scope))(scope, receive, send)
            return
        if scope["type"] == "http":
            if not daemon._ready():
                await daemon.open()
            refused = self.daemon.refuse(Request(scope))
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


class AgentHost:
    """Serves an agent on the attach wire as a core-agent daemon does; a hub with a `registry`.

    ``tokens`` maps bearer tokens to identities; None is an open daemon that
    accepts anonymous callers (and redacts nothing). With tokens, a caller sees
    only its own sessions (an admin sees all). ``multi_session=False`` answers
    501 to `POST /sessions`, as a daemon without a session factory; every
    daemon has its startup session, `default`. ``session_rate_limit`` limits
    `POST /sessions` per caller: on by default with the daemon's defaults
    (burst 5, then 10 a minute), as on a daemon; None turns it off.
    ``session_idle_timeout`` evicts sessions idle that long from memory
    (seconds; 0 disables): an evicted session stays listed as `idle` and the
    next request resumes it from ``store``, a SQLite file (the file you name
    keeps the sessions for a host started on it again; None is a private
    temporary file, made on the first eviction and removed by `aclose()`).
    ``refuse_foreign_reregistration`` makes a hub refuse (403) a
    registration of a name another identity owns; a real hub does not.
    ``description`` turns on the A2A discovery card at
    `/.well-known/agent-card.json` (public, as a daemon serves it), listing
    ``skills`` (name -> description) as the agent's skills.
    ``stream_hook`` sees every event stream's frames and ``middleware`` wraps
    the ASGI app (the simulator's faults use both). ``on_agent_error`` is
    called with an exception the agent raised (not `Turn.error`), once its
    turn-error (kind "unknown") is sent: the caller never sees the traceback,
    so a host logs it there, and the simulator's ``raise_behavior_errors``
    re-raises it in the test. ``runtimes`` (a `RuntimeCache`) gives each turn
    the agent's runtime as `turn.runtime`, built on first use under
    ``agent_id`` (default: ``name``) and leased for the turn, so the cache
    never closes it mid-turn; `MultiAgentHost` serves many agents this way.
    ``propagate_trace`` (on by default) lets a `call_peer` made inside a turn
    send `traceparent`, so the callee's trace continues this one; a daemon's
    does not, and False behaves as it does (docs/guides/tracing.md).

    Attributes:
        name: The agent's name: its card's name, and a simulated fleet's peer name.
        behavior: The agent: an async function of a `Turn` (echo() when none is given).
        multi_session: False answers 501 to `POST /sessions`, as a daemon without a
            session factory.
        tokens: Bearer tokens to identities, or None for an open daemon.
        registry: The hub's `PeerRegistry` when this host is a hub, else None.
        clock: The clock of leases, rate limits and idle eviction.
        app_name: The app every session belongs to (`/sessions/{app}/{sid}`).
        model: The model name the capabilities and status frames report.
        provider: The provider name the capabilities frame reports.
        session_idle_timeout: Seconds a session may sit idle before it is evicted
            (0: never).
        refuse_foreign_reregistration: True makes the hub answer 403 to a registration
            of a name another identity owns.
        rate_limiter: The `POST /sessions` rate limiter, or None when it is off.
        sessions: The sessions in memory, by session id (`default` always among them);
            evicted ones are in `store`.
        store: Where sessions are kept when evicted, and across restarts with a named file.
        app: The ASGI app to serve (the attach routes behind the host's guard and
            any `middleware`).
        stream_hook: Sees every event stream's frames (the simulator's faults), or None.
        on_agent_error: Called with an exception an agent raised, after its turn-error
            is sent, or None.
        description: The agent card's description ("" serves no card).
        skills: The card's skills of this host's agent, name to description.
        register_to: The hub `serve()` joins, or None.
        endpoint: The URL the hub gives callers (None: where `serve()` listens).
        labels: The labels the host registers with.
        ttl: The lease `serve()` asks of the hub, in seconds (heartbeats at a third of it).
        token_env: The environment variable holding the host's token (read when used).
        directory: Where `turn.call_peer` looks peers up (the joined hub by default).
        peer_transport: The transport of the host's own calls (None: the network).
        peer_tool: Makes the `CallPeer` of `turn.call_peer` (None: one over `directory`).
        draining: True while a stopping host refuses new work (503).
        runtimes: The `RuntimeCache` each turn leases this agent's runtime from
            (`turn.runtime`), or None: turns get no runtime.
        agent_id: The agent's id in `runtimes` (its name unless given).
        propagate_trace: True when calls made inside a turn send `traceparent`.
    """

    def __init__(
        self,
        name: str,
        *,
        behavior: Agent | None = None,
        multi_session: bool = True,
        tokens: Mapping[str, Identity] | None = None,
        registry: PeerRegistry | None = None,
        clock: Clock | None = None,
        app_name: str = "core-agent",
        model: str = "sim-model",
        provider: str = "sim",
        session_rate_limit: SessionRateLimit | None = DAEMON_RATE_LIMIT,
        session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
        refuse_foreign_reregistration: bool = False,
        description: str = "",
        skills: Mapping[str, str] | None = None,
        register_to: str | None = None,
        endpoint: str | None = None,
        labels: Mapping[str, str] | None = None,
        ttl: float = 60,
        token_env: str | None = None,
        directory: Directory | None = None,
        peer_transport: httpx.AsyncBaseTransport | None = None,
        peer_tool: Callable[[], CallPeer] | None = None,
        stream_hook: StreamHook | None = None,
        middleware: Callable[[ASGIApp], ASGIApp] | None = None,
        on_agent_error: Callable[[Exception], None] | None = None,
        runtimes: Runtimes | None = None,
        agent_id: str | None = None,
        store: str | os.PathLike[str] | None = None,
        propagate_trace: bool = True,
    ) -> None:
        if (
            isinstance(session_idle_timeout, bool)
            or not isinstance(session_idle_timeout, (int, float))
            or not session_idle_timeout >= 0
        ):
            raise ValueError(
                f"AgentHost: session_idle_timeout must be seconds >= 0 (0 disables eviction), "
                f"got {session_idle_timeout!r}; the daemon's default is "
                f"{DEFAULT_SESSION_IDLE_TIMEOUT:g}"
            )
        if session_rate_limit is not None and not isinstance(session_rate_limit, SessionRateLimit):
            # Refused here: taken, it made every POST /sessions answer 500.
            raise ValueError(
                f"AgentHost: session_rate_limit must be a SessionRateLimit(...) or None (off), "
                f"got {session_rate_limit!r}; SessionRateLimit() is the daemon's defaults"
            )
        self.name = name
        self.behavior: Agent = behavior if behavior is not None else echo()
        self.runtimes = runtimes
        self.agent_id = agent_id if agent_id is not None else name
        self.multi_session = multi_session
        self.tokens = dict(tokens) if tokens is not None else None
        self.registry = registry
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.stream_hook = stream_hook
        self.on_agent_error = on_agent_error
        self.propagate_trace = bool(propagate_trace)
        self.app_name = app_name
        self.model = model
        self.provider = provider
        self.session_idle_timeout = float(session_idle_timeout)
        self.refuse_foreign_reregistration = refuse_foreign_reregistration
        self.description = description
        self.skills = dict(skills or {})
        # Joining a fleet (see _serve): the hub, where callers reach this host, and the
        # environment variable holding its token (read when used, never stored).
        self.register_to = checked_base_url(register_to, "AgentHost") if register_to else None
        if endpoint is not None:
            checked_base_url(endpoint, "AgentHost")
        self.endpoint = endpoint
        self.labels = dict(labels or {})
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf:
            raise ValueError(
                f"AgentHost: ttl must be a positive number of seconds (the lease asked of the "
                f"hub), got {ttl!r}; the default is 60"
            )
        self.ttl = float(ttl)
        self.token_env = token_env
        self.peer_transport = peer_transport
        # The simulator's fleets hand their own (recorded) CallPeer to their daemons' turns.
        self.peer_tool = peer_tool
        self._own_directory: HubDirectory | None = None
        if directory is None and self.register_to is not None:
            directory = self._own_directory = HubDirectory(
                self.register_to, transport=peer_transport, token_env=token_env
            )
        self.directory = directory
        self._peer_tool: CallPeer | None = None
        self.draining = False  # set while the host shuts down: writes answer 503
        self._stop: asyncio.Event | None = None  # set by serve() while it runs
        self.rate_limiter = (
            SessionRateLimiter(session_rate_limit, self.clock)
            if session_rate_limit is not None
            else None
        )
        self.sessions: dict[str, _Session] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._seqs = itertools.count(1)  # every session's event seqs, as one event log's
        self._listings: dict[tuple[str, tuple[tuple[str, str], ...]], bytes] = {}
        self._listing_version = -1
        self.store = SessionStore(store, window=REPLAY_WINDOW)
        self._seq_reserved = 0  # seqs the store records as possibly sent (0: none, temporary)
        self._opening: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._sweep_anchor = self.clock.now()
        self._resuming: dict[str, asyncio.Task[None]] = {}
        events = _EventsEndpoint(self)
        routes = [
            Route("/sessions", self._create_session, methods=["POST"]),
            Route("/sessions", self._list_sessions, methods=["GET"]),
            Route("/whoami", self._whoami, methods=["GET"]),
        ]
        for prefix in ("/sessions/{app}/{sid}", "/sessions/{sid}"):
            routes += [
                Route(f"{prefix}/inject", self._inject, methods=["POST"]),
                Route(f"{prefix}/wake", self._wake, methods=["POST"]),
                Route(f"{prefix}/events", events, methods=["GET"]),
                Route(prefix, self._delete_session, methods=["DELETE"]),
            ]
        if registry is not None:  # elsewhere /peers is the router's own 404
            routes += [
                Route("/peers", self._list_peers, methods=["GET"]),
                Route("/peers", self._register, methods=["POST"]),
                Route("/peers/{rid}/heartbeat", self._heartbeat, methods=["POST"]),
                Route("/peers/{rid}", self._deregister, methods=["DELETE"]),
            ]
        # The daemon's otelhttp wraps everything it serves, the card and refusals too.
        # A store that cannot be read is 400 on every session route, as `writeLookupError`.
        router = Starlette(routes=routes, exception_handlers={_StoreUnreadable: _answer_unreadable})
        app: ASGIApp = ServerSpans(_Guard(router, self))
        self.app = middleware(app) if middleware is not None else app
        # Every daemon starts with one session of its own; it is never evicted or deleted.
        self.sessions[STARTUP_SESSION] = _Session(self, app_name, STARTUP_SESSION, ANONYMOUS.name)

    def __repr__(self) -> str:
        kind = "hub" if self.registry is not None else "daemon"
        return f"AgentHost({self.name!r}, {kind}, sessions={len(self.sessions)})"

    async def call_peer(self, peer: str, prompt: str) -> dict[str, Any]:
        """One `call_peer` made by a turn: the result's JSON, or `{"error": ...}` on failure.

        Made with the host's own `CallPeer` (its directory: the hub it joined
        unless given one; its `token_env`), so a peer sees this host's
        identity. A failure is the tool's answer, as a daemon returns it to
        the model, never an exception out of the turn.
        """
        tool = self._peer_tool
        if tool is None:
            if self.peer_tool is not None:
                tool = self.peer_tool()
            elif self.directory is not None:
                tool = CallPeer(
                    self.directory, transport=self.peer_transport, token_env=self.token_env
                )
            else:
                return {
                    "error": f"call_peer: host {self.name!r} has no directory of peers; give "
                    "AgentHost register_to= (the hub it joins) or directory="
                }
            self._peer_tool = tool
        try:
            result = await tool.acall(peer=peer, prompt=prompt)
        except (CoreAgentError, ValueError) as exc:
            return {"error": str(exc)}
        return result.to_dict()

    def card(self, request: Request) -> Response:
        """The host's A2A agent card (see `_card`), as answered to `request`."""
        return card_response(
            request,
            name=self.name,
            description=self.description,
            version=__version__,
            skills=self.skills,
        )

    # --- auth and checks --------------------------------------------------

    def identify(self, request: Request) -> Identity | None:
        """The caller's identity; None for a bad or missing token on a protected daemon."""
        if self.tokens is None:
            return ANONYMOUS
        token = request.headers.get("x-attach-token")
        if not token:
            auth = request.headers.get("authorization", "")
            scheme, _, value = auth.partition(" ")
            token = value.strip() if scheme.lower() == "bearer" else ""
        return self.tokens.get(token) if token else None

    def refuse(self, request: Request) -> Response | None:
        """401 for a caller without a valid token or asserting another, then the write guard.

        Pins core-agent `pkg/attach/caller_middleware.go` `callerMiddlewareWithConfig`:
        the host's `tokens` are a per-caller daemon's users (`BearerTokenAuth`, enforced),
        so a missing or unknown token is `writeUnauthorized`'s 401, not a shared
        `--attach-token`'s (`checkAttachToken`, `realm="attach"`), which a host has not;
        then an `X-Asserted-Caller` header is refused, as `resolveProxyAssertion` refuses
        a caller not allowed to proxy (a host allows none; an open daemon's anonymous
        caller cannot either). Then `pkg/attach/csrf.go` `browserWriteGuard` (after the
        token check, as `Server.Bind` orders them): a write from a foreign
        browser Origin is 403, a write that is not `application/json` is 415.
        """
        if self.identify(request) is None:
            return _unauthorized("unauthorized: no valid credential")
        if request.headers.get(_PROXY_HEADER):
            return _unauthorized(
                "asserted-caller header rejected: caller is not permitted to proxy"
            )
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            origin = request.headers.get("origin", "")
            host = request.headers.get("host", "")
            if origin and not origin_allowed(origin, host):
                return _text(
                    403,
                    f"cross-origin request rejected: Origin {_q(origin)} is neither a loopback "
                    f"origin nor this listener ({_q(host)}); browser pages may not drive the "
                    "attach API cross-site. Native clients should omit the Origin header.",
                )
            if not is_json_media_type(request.headers.get("content-type", "")):
                return _text(
                    415,
                    'unsupported media type: state-changing attach endpoints require "Content-'
                    'Type: application/json" (browser cross-site request forgery protection; '
                    "add the header even when the request has no body)",
                )
        return None

    def _caller(self, request: Request) -> Identity | None:
        """The identity for owner checks: None on an open daemon (everyone may)."""
        return None if self.tokens is None else self.identify(request)

    async def _json_value(self, request: Request, limit: int) -> Any | Response:
        """The body as JSON (any value), or its 400 as `readJSON` words it."""
        body = await read_capped(request, limit)
        if isinstance(body, Response):
            return body
        if not body:
            return _text(400, "request body is empty")
        value, error = read_json(body)
        return _text(400, f"malformed JSON: {error}") if error is not None else value

    async def _json_body(
        self, request: Request, limit: int, struct: str, fields: Mapping[str, type]
    ) -> dict[str, Any] | Response:
        """The body decoded into a Go struct of `fields`, or its 400.

        Pins core-agent `pkg/attach/handlers.go` `readJSON`: capped while read,
        an empty body (zero bytes, not blank) is "request body is empty", and
        every decoding error is "malformed JSON: ..." (see `_gowire`).
        """
        value = await self._json_value(request, limit)
        if isinstance(value, Response):
            return value
        fields_set, error = decode_into(value, struct, fields, nullable=frozenset({"wake"}))
        return _text(400, f"malformed JSON: {error}") if error is not None else fields_set

    def visible(
        self, session: _Session | StoredSession, who: Identity | None, action: str = "read"
    ) -> bool:
        """Whether `who` may `read`, `write` or `admin` the session (else it is a 404).

        With multi-session auth, as core-agent `pkg/auth/authorize.go`
        `Authorize` decides: an admin may do anything; the owner too; the
        session's contributors may read and write; its viewers may read.
        """
        if self.tokens is None or who is None:
            return True
        if who.admin or session.user == who.name:
            return True
        if action == "read":
            return who.name in session.viewers or who.name in session.contributors
        return action == "write" and who.name in session.contributors

    def find_session(self, request: Request, action: str = "read") -> _Session | None:
        """The session in memory the path names, if the caller may `action` it (else None)."""
        sid = request.path_params["sid"]
        session = self.sessions.get(sid)
        app = request.path_params.get("app")
        if session is None or (app is not None and app != session.app):
            return None
        if not self.visible(session, self.identify(request), action):
            return None
        session.touch()
        return session

    async def lookup_session(self, request: Request, action: str = "read") -> _Session | None:
        """The session the path names, resumed from the store if it was evicted (else None: 404).

        Pins core-agent `pkg/attach/registry.go` `lookupGated` / `LookupSingle` and
        `resumeAndRegister`: a memory hit is touched (the shortcut form finds it by
        id alone, whatever its app; a shortcut miss resumes only a session of the
        host's `app_name`, as Go's resumes under its one app); on a miss the stored
        row is checked against the caller first (a caller who may not read
        it learns nothing and costs no resume), concurrent misses share one
        resume, and the session comes back with its owner, viewers,
        contributors, usage and newest `REPLAY_WINDOW` events.
        """
        sid = request.path_params["sid"]
        if sid in self.sessions or not self.store.opened:
            return self.find_session(request, action)
        try:
            row = await self.store.get(sid)
        except _STORE_ERRORS as exc:
            raise _unreadable(self.name, sid, exc) from exc
        # The shortcut form names no app: it resumes a session of the host's own app only,
        # as `LookupSingle` resumes under the daemon's one app (`resumerDefaultApp`).
        app = request.path_params.get("app", self.app_name)
        if row is None or app != row.app:
            return None
        who = self.identify(request)
        if not self.visible(row, who, "read"):  # the resume gate reads, as `resumeGateFor`
            return None
        flight = self._resuming.get(sid)
        if flight is None:
            flight = asyncio.get_running_loop().create_task(self._resume(row))
            self._resuming[sid] = flight
            flight.add_done_callback(lambda _: self._resuming.pop(sid, None))
        try:
            await asyncio.shield(flight)
        except _STORE_ERRORS as exc:
            raise _unreadable(self.name, sid, exc) from exc
        return self.find_session(request, action)

    async def _resume(self, row: StoredSession) -> None:
        events = await self.store.events(row.session_id)
        if row.session_id in self.sessions:  # resumed meanwhile, or created again
            return
        session = _Session(self, row.app, row.session_id, row.user)
        self._restore(session, row, events)
        self.sessions[row.session_id] = session
        self._sweep_soon()

    @staticmethod
    def _restore(session: _Session, row: StoredSession, events: list[tuple[int, bytes]]) -> None:
        session.viewers, session.contributors = row.viewers, row.contributors
        session.created_at = row.created_at
        session.tokens_in, session.tokens_out, session.turns = (
            row.tokens_in,
            row.tokens_out,
            row.turns,
        )
        session.log.extend(events)
        session.seq = session.saved_seq = events[-1][0] if events else 0

    def sweep(self) -> list[str]:
        """Evict the sessions idle past `session_idle_timeout` to the store; their ids.

        Pins core-agent `pkg/attach/registry.go` `SessionRegistry.EvictBefore(now -
        idleAfter)`: a session last touched strictly before the cutoff leaves
        memory whether or not a message is queued; its queued messages go with
        it, as a daemon's inbox goes with its evicted agent, and its event
        streams end. Its row, usage and newest events stay in the store, so it
        stays listed (`idle`) and the next request resumes it. The startup
        session and a session running a turn are never evicted (see
        differences.md). The host runs this every `sweep_period()`.
        """
        timeout = self.session_idle_timeout
        if timeout <= 0:
            return []
        cutoff = self.clock.now() - timeout
        gone = [
            sid
            for sid, session in self.sessions.items()
            if sid != STARTUP_SESSION and not session.busy and session.last_touched < cutoff
        ]
        for sid in gone:
            session = self.sessions.pop(sid)
            session.drop_streams()
            session.inbox.clear()
            session.save()
            session.log.clear()
        return gone

    def _ready(self) -> bool:
        """Whether `open()` has run."""
        return self._opening is not None and self._opening.done()

    async def open(self) -> None:
        """Open the store; the first request and `serve()` call it.

        A named store's sessions come back: the startup session's log and
        usage at once, the others listed as idle until a request resumes
        them; event seqs and session ids go on from the last ones it holds.
        """
        loop = asyncio.get_running_loop()
        opening = self._opening
        if (
            opening is None
            or (opening.done() and (opening.cancelled() or opening.exception() is not None))
            or (not opening.done() and opening.get_loop() is not loop)
        ):
            opening = self._opening = loop.create_task(self._open())
            # The sweeps tick from here on, every sweep_period(), as the daemon's ticker
            # from `Bind`; the task runs only while a session could be evicted.
            self._sweep_anchor = self.clock.now()
        if opening.done():
            opening.result()
        else:
            await asyncio.shield(opening)

    def _sweep_soon(self) -> None:
        """Run the idle sweep (a session that may be evicted is in memory)."""
        if self.session_idle_timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        sweeper = self._sweeper
        if sweeper is None or sweeper.done() or sweeper.get_loop() is not loop:
            # A host called from another loop (a sync call's) sweeps on the loop in use now.
            if sweeper is not None:
                _cancel_anywhere(sweeper)
            self._sweeper = loop.create_task(self._sweep_forever())

    def _reserve_seqs(self, seq: int) -> None:
        """Keep the store's reservation of sent seqs well ahead of `seq` (named stores)."""
        if self._seq_reserved and seq > self._seq_reserved - _SEQ_RESERVE // 2:
            # Extended half a block early, so the write is done long before it is needed.
            self._seq_reserved = seq + _SEQ_RESERVE
            self.store.reserve(self._seq_reserved)

    async def _open(self) -> None:
        if self.store.temporary:
            return
        last_seq, last_id = await self.store.open()
        # Counting on from the store, never back from where this host already is.
        first = max(next(self._seqs), last_seq + 1)
        self._seqs = itertools.count(first)
        self._seq_reserved = first + _SEQ_RESERVE
        await asyncio.wrap_future(self.store.reserve(self._seq_reserved))
        self._ids = itertools.count(max(next(self._ids), last_id + 1))
        startup = self.sessions[STARTUP_SESSION]
        row = await self.store.get(STARTUP_SESSION)
        if row is not None and not startup.log and not startup.turns:
            self._restore(startup, row, await self.store.events(STARTUP_SESSION))

    async def _sweep_forever(self) -> None:
        """Sweep every `sweep_period()` on the host's clock, as the daemon's `SweepIdle` ticks.

        The ticks keep the grid the host opened on; the task ends once no session
        in memory could be evicted (the next one created or resumed starts it again).
        """
        period = sweep_period(self.session_idle_timeout)
        now = self.clock.now()
        tick = self._sweep_anchor + period * ((now - self._sweep_anchor) // period + 1)
        while any(sid != STARTUP_SESSION for sid in self.sessions):
            await self.clock.sleep(tick - self.clock.now())
            self.sweep()
            # A ticker drops the ticks a slow receiver missed: the next one is still ahead.
            tick += period
            now = self.clock.now()
            if tick <= now:
                tick += period * ((now - tick) // period + 1)

    def capabilities_frame(self, request: Request) -> bytes:
        """The `capabilities` frame an event stream opens with, as this caller sees it."""
        who = self.identify(request)
        host = request.headers.get("host", f"{self.name}.sim")
        payload: dict[str, Any] = {
            "protocol_version": PROTOCOL_VERSION,
            "event_types": list(_EVENT_TYPES),
            "server": "coreagent-sdk-simulator/0.1.0",
            # The feature names a daemon advertises (fixture capabilities-v1.4.0.json).
            "features": {
                "cost_ceiling": False,
                "cross_daemon": self.registry is not None,
                "interrupt": False,
                "mcp": False,
                "multi_session": self.multi_session,
                "observer_mode": False,
                "perms_stream": False,
                "specialists": False,
            },
            "slash_commands": ["compact", "done"],
            "agent": {
                "name": self.name,
                "version": "v0.1.0-sim",
                "description": f"Simulated core-agent daemon {self.name!r}.",
                "model": self.model,
                "url": f"{request.url.scheme}://{host}",
            },
        }
        if who is not None and who is not ANONYMOUS:
            payload["caller_id"] = who.name
        return encode_sse("capabilities", payload)

    def status_frame(self, session: _Session) -> bytes:
        """The boot `status-update` frame of a session: the model and its turn state."""
        # The daemon's boot snapshot carries the model and the turn state only.
        state = "streaming" if session.busy else "idle"
        return encode_sse("status-update", {"model": self.model, "turn_state": state})

    # --- sessions ---------------------------------------------------------

    def _rejects_draining(self) -> Response | None:
        """503 while the host drains, as the daemon's `rejectDraining` answers writes."""
        if not self.draining:
            return None
        return _text(
            503,
            "daemon is shutting down; queued messages would be lost \u2014 retry after restart",
            {"Retry-After": "5"},
        )

    async def _create_session(self, request: Request) -> Response:
        who = self.identify(request) or ANONYMOUS
        if self.rate_limiter is not None:  # checked before the 501, as on a daemon
            allowed, wait = self.rate_limiter.allow("" if who is ANONYMOUS else who.name)
            if not allowed:
                return json_response(
                    {"error": "rate limited", "retry_after_seconds": wait},
                    status_code=429,
                    headers={"Retry-After": str(wait)},
                )
        if not self.multi_session:
            return _text(
                501,
                "multi-session is not enabled: start the daemon with "
                "attach.multi_session.enabled: true",
            )
        acl = await self._session_acl(request, who)
        if isinstance(acl, Response):
            return acl
        sid = f"s-{next(self._ids):04d}{secrets.token_hex(3)}"
        session = self.sessions[sid] = _Session(self, self.app_name, sid, who.name)
        session.viewers, session.contributors = acl
        if not self.store.temporary:
            session.save()  # the row is written at creation, as `registerWithACL` persists it
        self._sweep_soon()
        host = request.headers.get("host")
        path = f"/sessions/{self.app_name}/{sid}"
        url = f"{request.url.scheme}://{host}{path}" if host else path
        return json_response(
            {"app": self.app_name, "user": who.name, "sessionID": sid, "url": url},
            status_code=201,
        )

    async def _session_acl(
        self, request: Request, who: Identity
    ) -> tuple[tuple[str, ...], tuple[str, ...]] | Response:
        """The optional create body's viewers and contributors, or its 400.

        Pins core-agent `pkg/attach/handlers_create_session.go` `createSession`
        (body read as `decodePOSTOptional`): no body is fine, `owner` is
        refused unless it names the caller, and the lists are normalized as
        `SessionACL.Normalized` does (trimmed, blanks and repeats dropped).
        """
        body = await read_capped(request, MAX_CREATE_BYTES)
        if isinstance(body, Response):
            return _text(400, "create session: http: request body too large")
        if not body:
            return (), ()
        value, error = read_json(body)
        fields: dict[str, Any] = {}
        if error is None:
            fields, error = decode_into(
                value,
                "sessionACLRequest",
                {"owner": str, "viewers": list, "contributors": list},
                nullable=frozenset({"owner", "viewers", "contributors"}),
            )
        if error is not None:
            return _text(400, f"create session: {error}")
        owner = fields.get("owner")
        if owner is not None and owner != who.name:
            return _text(
                400,
                "create session: owner is not settable (the new session is owned by the "
                f"authenticated caller {_q(who.name)}, request said {_q(owner)}); omit the field",
            )
        return _identities(fields.get("viewers")), _identities(fields.get("contributors"))

    async def _list_sessions(self, request: Request) -> Response:
        who = self.identify(request)
        # In memory: sorted by app, user, id, as `SessionRegistry.List` sorts them.
        live = sorted(
            (s for s in self.sessions.values() if self.visible(s, who)),
            key=lambda s: (s.app, s.user, s.session_id),
        )
        rows = [s.row() for s in live]
        if self.multi_session:  # the store's half, as `listSessions` adds it with multi-session
            try:
                stored = await self.store.rows(skip=frozenset(self.sessions))
            except _STORE_ERRORS as exc:
                # Best effort, as `listSessions`: a store hiccup must not empty the list.
                _log.warning("AgentHost %r: listing stored sessions failed: %r", self.name, exc)
                stored = []
            rows += [
                _listed(r.app, r.user, r.session_id, "idle", r.last_touched)
                for r in stored
                if self.visible(r, who)
            ]
        return json_response({"sessions": rows})

    async def _inject(self, request: Request) -> Response:
        # A draining host refuses first, as `routeSessionDrainGated` does: no lookup, so no
        # resume of an evicted session the answer would throw away (and again below, as
        # `doInject` checks once more after the body).
        draining = self._rejects_draining()
        if draining is not None:
            return draining
        # The session is looked up before the body is read, as on a daemon.
        session = await self.lookup_session(request, "write")
        if session is None:
            return _text(404, "session not found")
        body = await self._json_body(
            request, MAX_INJECT_BYTES, "InjectRequest", {"message": str, "wake": bool}
        )
        if isinstance(body, Response):
            return body
        message: str = body.get("message", "")
        wake: bool = body.get("wake", True)  # omitted or null means true
        if message == "":
            return _text(400, "inject: message is required")
        draining = self._rejects_draining()
        if draining is not None:
            return draining
        prompt_id = session.enqueue(message, wake=wake)
        return json_response(
            {
                "injected": message,
                "session": session.session_id,
                "woke": wake,
                "prompt_id": prompt_id,
            }
        )

    async def _wake(self, request: Request) -> Response:
        draining = self._rejects_draining()  # first, as `routeSessionDrainGated`
        if draining is not None:
            return draining
        session = await self.lookup_session(request, "write")
        if session is None:
            return _text(404, "session not found")
        prompt = ""
        if _content_length(request) > 0:  # the body is optional, as `doWake` reads it
            body = await self._json_body(
                request, MAX_INJECT_BYTES, "wakeRequest", {"target": str, "prompt": str}
            )
            if isinstance(body, Response):
                return body
            if body.get("target"):
                return _text(
                    501,
                    "wake: per-subagent target is not yet implemented; omit 'target' to wake "
                    "the session",
                )
            prompt = body.get("prompt", "")
        draining = self._rejects_draining()
        if draining is not None:
            return draining
        answer: dict[str, Any] = {"woken": session.session_id, "prompt": prompt}
        if prompt:
            answer["prompt_id"] = session.enqueue(prompt, wake=False)
        session.wake()
        return json_response(answer)

    async def _delete_session(self, request: Request) -> Response:
        session = await self.lookup_session(request, "admin")
        if session is None:
            return _text(404, "session not found")
        if session.session_id == STARTUP_SESSION:
            return _text(403, "the daemon's startup session cannot be deleted")
        self.sessions.pop(session.session_id, None)
        await session.close()
        self.store.delete(session.session_id)  # `HardDelete`: it cannot be resumed
        return Response(status_code=204)

    async def _whoami(self, request: Request) -> Response:
        who = self.identify(request) or ANONYMOUS
        if who is ANONYMOUS:
            return json_response({"identity": "anon", "source": "anonymous"})
        # `whoAmIResponse.Admin` is omitempty: a caller who is not an admin has no "admin" key.
        answer: dict[str, Any] = {"identity": who.name}
        if who.admin:
            answer["admin"] = True
        answer["source"] = "bearer"
        return json_response(answer)

    # --- peers (hub only) -------------------------------------------------

    async def _list_peers(self, request: Request) -> Response:
        assert self.registry is not None  # the /peers routes exist on hubs only
        labels: dict[str, str] = {}
        for raw in request.query_params.getlist("label"):
            key, sep, value = raw.partition("=")
            if sep:  # an item without '=' is skipped, as core-agent's parseLabelFilters does
                labels[key] = value
        body = self._peer_listing(labels, self._caller(request))
        return Response(body, media_type="application/json")

    def _peer_listing(self, labels: dict[str, str], caller: Identity | None) -> bytes:
        """`GET /peers`' body, encoded once per registry version, label filter and view.

        Encoding 10,000 records on every request made the roster lookup the
        cost of a delegation; an unchanged roster is served from here instead.
        """
        assert self.registry is not None
        version = self.registry.version()
        if version != self._listing_version:
            self._listings.clear()
            self._listing_version = version
        # Who sees which registration ids: everyone (open hub, admin) or an owner's own.
        view = "all" if caller is None or caller.admin else "owner:" + caller.name
        key = (view, tuple(sorted(labels.items())))
        body = self._listings.get(key)
        if body is None:
            # Row by row, each kept encoded on its entry: byte for byte what encoding
            # {"peers": [records]} whole gives, with only the changed rows re-encoded.
            rows = [
                e.row(redact=not self.registry.may_manage(e, caller))
                for e in self.registry.peers(labels)
            ]
            encoded = ('{"peers":[' + ",".join(rows) + "]}\n").encode()
            if len(self._listings) >= _MAX_LISTINGS:  # callers choose filters: stay bounded
                self._listings.clear()
            self._listings[key] = body = encoded
        return body

    async def _register(self, request: Request) -> Response:
        assert self.registry is not None  # the /peers routes exist on hubs only
        body = await self._json_value(request, MAX_REGISTER_BYTES)
        if isinstance(body, Response):
            return body
        if not isinstance(body, dict):
            return _text(400, "malformed JSON: the body must be an object")
        ttl = body.get("heartbeat_ttl_sec")
        # The daemon's field is a Go int: 60.0, NaN, true or "60" do not decode into it.
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, int) or not -(2**63) <= ttl < 2**63
        ):
            return _text(
                400,
                f"malformed JSON: heartbeat_ttl_sec must be an integer number of seconds, "
                f"got {json.dumps(ttl)}",
            )
        caller = self._caller(request)
        if self.refuse_foreign_reregistration and caller is not None and not caller.admin:
            name = body.get("name")
            held = self.registry.get(name) if isinstance(name, str) else None
            if held is not None and held.owner != caller.name:
                return _text(
                    403,
                    f"peer name {_q(held.name)} is registered by another identity; this hub "
                    "refuses re-registration by anyone but its owner or an admin",
                )
        try:
            entry = self.registry.register(
                body.get("name"),
                body.get("endpoint"),
                body.get("labels"),
                body.get("heartbeat_ttl_sec"),
                owner=caller.name if caller is not None else None,
            )
        except RegistryError as exc:
            return _text(400, str(exc))
        return json_response(entry.record(redact=False), status_code=201)

    async def _heartbeat(self, request: Request) -> Response:
        assert self.registry is not None  # the /peers routes exist on hubs only
        entry = self.registry.heartbeat(request.path_params["rid"])
        if entry is None:
            return _text(404, "registration not found; register again")
        return json_response(entry.record(redact=False))

    async def _deregister(self, request: Request) -> Response:
        assert self.registry is not None  # the /peers routes exist on hubs only
        if not self.registry.deregister(request.path_params["rid"], self._caller(request)):
            return _text(
                403,
                "forbidden: peer registrations may only be deregistered by their owner or an admin",
            )
        return Response(status_code=204)

    # --- lifecycle --------------------------------------------------------

    def close_streams(self) -> None:
        """End every open event stream (used before a server shuts down)."""
        for session in self.sessions.values():
            session.drop_streams()

    def busy(self) -> int:
        """How many sessions are running a turn (or have one queued) right now."""
        return sum(1 for s in self.sessions.values() if s.busy or s.inbox)

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        grace: float = DEFAULT_GRACE,
        on_ready: Callable[[str], None] | None = None,
        handle_signals: bool = True,
    ) -> None:
        """Serve this host on `host:port` until SIGTERM/SIGINT or `stop()`, then drain.

        See `coreagent_sdk.host._serve.serve`: it joins the fleet's hub when
        the host has `register_to`, calls `on_ready(url)` once listening, and
        on the way out drains running turns for up to `grace` seconds,
        deregisters and closes, within 10 s whatever a hub or peer does.
        """
        from ._serve import serve

        await serve(self, host, port, grace=grace, on_ready=on_ready, handle_signals=handle_signals)

    def stop(self) -> None:
        """Ask a running `serve()` to drain and return (as SIGTERM does)."""
        if self._stop is not None:
            self._stop.set()

    async def aclose(self) -> None:
        """Stop running turns and end every stream (sessions stay listed)."""
        if self._peer_tool is not None:
            await self._peer_tool.aclose()
            self._peer_tool = None
        if self._own_directory is not None:
            await self._own_directory.aclose()
        self.close_streams()
        sweeper, self._sweeper = self._sweeper, None
        tasks = list(self._tasks)
        if sweeper is not None:
            if sweeper.get_loop() is asyncio.get_running_loop():
                tasks.append(sweeper)
            else:
                _cancel_anywhere(sweeper)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if not self.store.temporary and self.store.opened:
            for session in self.sessions.values():
                session.save()  # usage and last touch as they are now, for the next start
            if self._seq_reserved:
                self.store.release(next(self._seqs) - 1)  # closed cleanly: no gap next time
                self._seq_reserved = 0
        await self.store.aclose()
        self._opening = None
