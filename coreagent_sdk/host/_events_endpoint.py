"""`GET .../events`: a session's event stream, as core-agent `pkg/attach/handlers.go` streams it.

The capabilities frame first, then the session's status snapshot, its usage
once it has run a turn, the replayed log past `?since=` (read from the host's
store a page at a time, as the daemon's `replayThenTail` reads its event log),
then live frames as the session publishes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from .._attach._wire import PROTOCOL_VERSION
from ._gowire import parse_since
from ._gowire import sse as encode_sse
from ._protocol import negotiate_version
from ._replies import _text
from ._session import _CLOSE, _Session, _Subscriber
from ._store_errors import STORE_ERRORS

if TYPE_CHECKING:
    from ._daemon import Daemon

__all__: list[str] = []

_CHUNK_BYTES = 64 * 1024  # frames ready together are written together, up to this much
_log = logging.getLogger("coreagent_sdk.host")


class _ReplayFailed(Exception):
    """A replay's store read failed: the stream ends, as the daemon detaches the subscriber."""


async def _replay(
    daemon: Daemon, session: _Session, since: int, upto: int
) -> AsyncIterator[list[bytes]]:
    """A session's logged frames after `since` up to `upto`, read from the store in pages.

    Pins core-agent `pkg/attach/broadcaster.go` `replayThenTail` (`Stream.Since`) after
    `clampReplaySince`: the cursor is first raised to the session's newest
    `REPLAY_WINDOW` events. A page is about 64 KiB (at least one event), so a replay
    holds a page, not the log. A read that fails ends the stream (`_ReplayFailed`).
    """
    first = True
    while since < upto:
        try:
            since, page = await daemon.store.page(session.session_id, since, upto, first)
        except STORE_ERRORS as exc:
            sid = session.session_id
            _log.warning("AgentHost %r: replaying session %s failed: %r", daemon.name, sid, exc)
            raise _ReplayFailed from exc
        first = False
        if not page:
            return
        since = page[-1][0]
        yield [frame for _, frame in page]


class _EventsEndpoint:
    """`GET .../events` as a raw ASGI app, so the subscription is made before 200 is sent
    and released on every way out (disconnect, cancel, drop)."""

    def __init__(self, daemon: Daemon) -> None:
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
        # Every event up to here is in the store and reaches this subscriber as replay; every
        # later one is sent to its queue: nothing twice, nothing missed.
        upto = session.seq
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
            pages = _replay(daemon, session, since, upto)
            if hook is None:
                ahead = opening
                async for page in pages:  # a page at a time: memory is a page, not the log
                    await subscriber.send(send, b"".join(ahead + page))
                    ahead = []
                await self._stream(deque(ahead), subscriber, send)
                return
            pending: deque[bytes | None] = deque(opening)
            replaying = True
            while True:
                if not pending and replaying:
                    page = await anext(pages, [])  # a page is never empty: [] is the end
                    pending.extend(page)
                    replaying = bool(page)
                    continue
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
        except _ReplayFailed:
            with contextlib.suppress(OSError):
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
