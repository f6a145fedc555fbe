"""Transports: an in-process ASGI transport that streams, and routing by host.

httpx's own `httpx.ASGITransport` collects the whole response body before it
returns, so an SSE stream that never ends never returns. `ASGITransport` here
hands back the response as soon as the app has sent its headers and feeds the
body through as the app produces it; closing the response cancels the app.
Like a socket, it pushes back: an app's body write waits while more than
256 KiB are buffered that the client has not read, so an app
that streams to a reader that stopped sees a write that blocks, as it would
on the network, instead of filling memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from ..errors import ASGIAppError, NoRouteError

__all__ = ["ASGITransport", "RoutingTransport"]

_Message = dict[str, Any]

_DONE = object()  # the app finished sending the body

_HIGH_WATER = 256 * 1024  # about what a loopback connection's kernel buffers hold unread
_LOW_WATER = _HIGH_WATER // 4  # and resumes once the client has read down to this


class _Buffer:
    """A response body's chunks between the app and the client, with a socket's push-back."""

    __slots__ = ("_waiter", "queue", "unread")

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.unread = 0
        self._waiter: asyncio.Future[None] | None = None  # the app's write, while it waits

    def put(self, item: Any) -> None:
        if isinstance(item, bytes):
            self.unread += len(item)
        self.queue.put_nowait(item)

    def taken(self, item: Any) -> None:
        """The client took `item`: wake a waiting write once the backlog is low."""
        if isinstance(item, bytes):
            self.unread -= len(item)
            waiter = self._waiter
            if waiter is not None and self.unread <= _LOW_WATER:
                self._waiter = None
                if not waiter.done():
                    waiter.set_result(None)

    async def drain(self) -> None:
        while self.unread > _HIGH_WATER:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter


class _ASGIResponseStream(httpx.AsyncByteStream):
    def __init__(self, queue: _Buffer, task: asyncio.Task[None], app_name: str) -> None:
        self._queue = queue
        self._task: asyncio.Task[None] | None = task
        self._app_name = app_name

    async def __aiter__(self) -> AsyncIterator[bytes]:
        queue = self._queue
        while True:
            item = await queue.queue.get()
            queue.taken(item)
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise ASGIAppError(
                    f"asgi: {self._app_name} raised {item!r} while streaming the body; "
                    "the response is incomplete (see the chained exception)"
                ) from item
            yield item

    async def aclose(self) -> None:
        # Let go of the app once it is stopped: a body iterator the reader left unfinished
        # lives on until a garbage collection finalizes it, holding this stream, and a
        # cancelled task keeps its cancellation's traceback (the app's frames, and all they
        # served: a session, its log) for as long as it is referenced.
        task, self._task = self._task, None
        if task is not None:
            await _stop(task)


async def _stop(task: asyncio.Task[None]) -> None:
    if not task.done():
        task.cancel()
    # Wait for the app's own cancellation handling without raising its outcome here:
    # `await task` would re-raise the cancellation into this frame, and the exception's
    # traceback (this frame, which holds the task, which holds the exception) would keep
    # the app's frames, and whatever they served, alive. What the app raised has already
    # been reported through the queue, or is the cancellation itself.
    await asyncio.wait((task,))
    if not task.cancelled():
        task.exception()  # retrieved: asyncio logs nothing for it


class ASGITransport(httpx.AsyncBaseTransport):
    """Run an ASGI app in-process and stream its responses.

    The response is returned once the app has sent `http.response.start`; the
    body arrives chunk by chunk as the app sends it. Closing the response (or
    leaving `client.stream(...)`) tells the app the client disconnected and
    cancels it, so no task outlives the response. An app that raises before
    answering raises `ASGIAppError` (an `httpx.TransportError`). As a socket
    does, it holds at most about 256 KiB the client has not read: past that the
    app's body write waits until the client reads.

    Attributes:
        app: The ASGI app requests go to.
    """

    def __init__(self, app: Any, *, client: tuple[str, int] = ("127.0.0.1", 123)) -> None:
        self.app = app
        self._client = client
        self._name = getattr(app, "__name__", type(app).__name__)

    def __repr__(self) -> str:
        return f"ASGITransport({self._name})"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Run the app on `request`; the response streams as the app sends its body."""
        body = await request.aread()
        url = request.url
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "scheme": url.scheme,
            "path": url.path,
            "raw_path": url.raw_path.split(b"?", 1)[0],
            "query_string": url.query,
            "server": (url.host, url.port or (443 if url.scheme == "https" else 80)),
            "client": self._client,
            "root_path": "",
            "state": {},
        }
        body_sent = False
        disconnected = asyncio.Event()

        async def receive() -> _Message:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await disconnected.wait()
            return {"type": "http.disconnect"}

        started: asyncio.Future[_Message] = asyncio.get_running_loop().create_future()
        queue = _Buffer()

        async def send(message: _Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                if not started.done():
                    started.set_result(message)
            elif kind == "http.response.body":
                chunk = message.get("body", b"")
                if chunk:
                    queue.put(chunk if isinstance(chunk, bytes) else bytes(chunk))
                if not message.get("more_body", False):
                    queue.put(_DONE)
                    disconnected.set()
                elif queue.unread > _HIGH_WATER:  # checked here: most writes never wait
                    await queue.drain()

        async def run() -> None:
            try:
                await self.app(scope, receive, send)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not started.done():
                    started.set_exception(exc)
                else:
                    queue.put(exc)
                return
            finally:
                disconnected.set()
            if not started.done():
                started.set_exception(
                    RuntimeError("the app returned without sending http.response.start")
                )
            queue.put(_DONE)

        task = asyncio.get_running_loop().create_task(run())
        try:
            start = await started
        except asyncio.CancelledError:
            await _stop(task)
            raise
        except Exception as exc:
            await _stop(task)
            raise ASGIAppError(
                f"asgi: {self._name} raised {exc!r} before answering {request.method} "
                f"{url.path}; fix the app (see the chained exception)"
            ) from exc
        return httpx.Response(
            status_code=start["status"],
            headers=[(k, v) for k, v in start.get("headers", [])],
            stream=_ASGIResponseStream(queue, task, self._name),
            extensions={"http_version": b"HTTP/1.1"},
        )


class RoutingTransport(httpx.AsyncBaseTransport):
    """Pick a transport by the request's host (`"hub.sim"` or `"127.0.0.1:8844"`).

    One client can then reach many in-process daemons by URL. A host with no
    route goes to `default`, or raises `NoRouteError` naming the known hosts.

    Attributes:
        routes: Transports by host (lower case, optionally ``host:port``).
        default: Where a host with no route goes (None: `NoRouteError`).
    """

    def __init__(
        self,
        routes: Mapping[str, httpx.AsyncBaseTransport] | None = None,
        default: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.routes: dict[str, httpx.AsyncBaseTransport] = {
            k.lower(): v for k, v in (routes or {}).items()
        }
        self.default = default

    def __repr__(self) -> str:
        return f"RoutingTransport(hosts={sorted(self.routes)!r})"

    def mount(self, host: str, transport: httpx.AsyncBaseTransport) -> None:
        """Route `host` (optionally `host:port`) to `transport`."""
        self.routes[host.lower()] = transport

    def unmount(self, host: str) -> None:
        """Remove the route of `host` (nothing if there is none)."""
        self.routes.pop(host.lower(), None)

    def _pick(self, url: httpx.URL) -> httpx.AsyncBaseTransport:
        host = url.host
        if url.port is not None:
            found = self.routes.get(f"{host}:{url.port}")
            if found is not None:
                return found
        found = self.routes.get(host)
        if found is not None:
            return found
        if self.default is not None:
            return self.default
        raise NoRouteError(
            f"routing: no transport for host {host!r} (routes: "
            f"{', '.join(sorted(self.routes)) or 'none'}); add a route or pass default="
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the transport of its host."""
        return await self._pick(request.url).handle_async_request(request)

    async def aclose(self) -> None:
        """Close nothing: the routes are shared, and whoever made one closes it."""
        # Routes (and the default) are shared by every client of a fleet:
        # closing one client must not close them for the others. Whoever made
        # a network default closes it.
        return None
