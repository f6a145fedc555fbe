"""`NetworkTransport`: HTTP/1.1 to the real network, with a pool whose steps cost O(1).

httpx's default transport (httpcore over anyio) walks every connection of
its pool on each request and again on each response close, so 200
delegations in flight (400 connections) spent most of the caller's CPU in
that walk. Here each origin keeps a stack of idle connections: a request
pops one (or dials), a response read to its end pushes its connection back,
a response closed before its end (an event stream cut after the turn it was
opened for) closes its connection, and nothing walks the rest. HTTP is
h11's, the parser httpcore itself uses, so what a server may send is read
by the same rules; sockets are asyncio's own, without anyio's layers.

A body the reader has not taken is held up to `_HIGH_WATER` bytes, then the
socket stops being read (as a kernel buffer fills), so a server that floods
a stream nobody reads costs bounded memory.

Only what the SDK's own clients need: http and https, no proxies (they are
built with ``trust_env=False``), no HTTP/2. Timeouts come from the request's
``timeout`` extension as httpx sets them; a caller's deadline (which cancels)
works as with any transport: a request cancelled midway closes its connection.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import h11
import httpcore
import httpx

from ._request_bytes import request_bytes

__all__ = ["NetworkTransport", "mocked"]

_MAX_HEAD = 100 * 1024  # bytes of a response head (httpcore's bound)
_HIGH_WATER = 256 * 1024  # body bytes held unread before the socket stops being read
_LOW_WATER = _HIGH_WATER // 4

_Origin = tuple[bytes, bytes, int]


class _Connection(asyncio.Protocol):
    """One socket and its h11 state; `wait()` blocks until more bytes, EOF or an error."""

    def __init__(self, origin: _Origin) -> None:
        self.origin = origin
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None  # the socket's error, if it broke (not a clean close)
        self.closed = False
        self.gone = False  # closed and no longer counted as open by the pool
        self.idle_until = 0.0  # monotonic time past which an idle one is not reused
        self._chunks: collections.deque[bytes] = collections.deque()
        self._held = 0  # bytes in _chunks
        self._eof = False
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None  # set while writes are paused

    # -- asyncio's callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._held += len(data)
        if self._held > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.lost = exc
        self._eof = True
        self._wake()
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- used by the transport
    @property
    def reusable(self) -> bool:
        """Open, and nothing arrived unasked (a server's close, or bytes past the answer)."""
        return (
            not self.closed and not self._chunks and not self._eof and not self.h11.trailing_data[0]
        )

    async def write(self, data: bytes) -> None:
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            raise ConnectionResetError("the connection is closed")
        transport.write(data)
        if self._drained is not None:
            await self._drained
            if self.closed:
                raise ConnectionResetError("the connection closed while sending")

    async def next_event(self, timeout: float | None) -> Any:
        """h11's next event, feeding it held bytes and waiting for more as needed."""
        conn = self.h11
        fed_eof = False
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            if fed_eof:  # h11 ends a closed stream with an event or an error; never loop
                raise h11.RemoteProtocolError("the server closed the connection midway")
            if self._chunks:
                data = self._chunks.popleft()
                self._held -= len(data)
                if self._paused and self._held <= _LOW_WATER and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                conn.receive_data(data)
            elif self._eof:
                if self.lost is not None:
                    raise self.lost  # a reset, say: a read error, as with any socket
                conn.receive_data(b"")  # h11 says what an early close means here
                fed_eof = True
            else:
                await self._wait(timeout)

    async def _wait(self, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        if timeout is None:
            await waiter
            return
        timer = loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
            self.transport = None


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Body(httpx.AsyncByteStream):
    """A response body; read to its end it hands its connection back to the pool."""

    def __init__(
        self, pool: NetworkTransport, conn: _Connection, request: httpx.Request, read: float | None
    ) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self._request = request
        self._read = read

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return
        try:
            while True:
                event = await _mapped(conn.next_event(self._read), self._request, "read")
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:  # ConnectionClosed, or something h11 should never hand a client here
                    raise httpx.RemoteProtocolError(
                        "the server closed the connection before the body ended",
                        request=self._request,
                    )
        except BaseException:
            self._conn = None
            self._pool.discard(conn)
            raise
        self._conn = None
        self._pool.release(conn)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:  # closed before its end: the rest of the body is never read
            self._pool.discard(conn)


async def _mapped(coro: Any, request: httpx.Request, step: str) -> Any:
    """`await coro`, its socket and protocol errors raised as httpx's own transport raises them."""
    try:
        return await coro
    except (TimeoutError, asyncio.TimeoutError):
        kind: type[httpx.TransportError] = {
            "connect": httpx.ConnectTimeout,
            "write": httpx.WriteTimeout,
            "pool": httpx.PoolTimeout,
        }.get(step, httpx.ReadTimeout)
        raise kind(f"timed out ({step})", request=request) from None
    except h11.RemoteProtocolError as exc:
        raise httpx.RemoteProtocolError(str(exc), request=request) from exc
    except h11.LocalProtocolError as exc:
        raise httpx.LocalProtocolError(str(exc), request=request) from exc
    except (OSError, ssl.SSLError) as exc:
        kind = {"connect": httpx.ConnectError, "write": httpx.WriteError}.get(step, httpx.ReadError)
        raise kind(str(exc) or type(exc).__name__, request=request) from exc


def _original(owner: type, module: str) -> Any:
    """`owner.handle_async_request` if it is the library's own (None: already patched)."""
    method = owner.handle_async_request  # type: ignore[attr-defined]
    return method if getattr(method, "__module__", None) == module else None


_HTTPX_SEND = _original(httpx.AsyncHTTPTransport, "httpx._transports.default")
_HTTPCORE_SEND = _original(httpcore.AsyncConnectionPool, "httpcore._async.connection_pool")


def mocked() -> bool:
    """Whether a test library has patched httpx's or httpcore's network path (respx does).

    Such a library expects every request of a default client to go through
    what it patched; sending around it would reach the real network.
    """
    return (
        httpx.AsyncHTTPTransport.handle_async_request is not _HTTPX_SEND
        or httpcore.AsyncConnectionPool.handle_async_request is not _HTTPCORE_SEND
    )


class NetworkTransport(httpx.AsyncHTTPTransport):
    """HTTP/1.1 over asyncio sockets with an O(1) pool of idle connections per origin.

    ``max_connections`` caps open connections (None: no cap; past it a
    request waits, or closes an idle connection of another origin);
    ``max_idle`` caps the idle ones kept; an idle connection is reused for
    ``keepalive_expiry`` seconds. ``verify`` is the SSL context for https.

    While a test library has patched httpx's own transport or httpcore's pool
    (respx, pytest-httpx, a recording patch), requests take httpx's own path
    (its `AsyncHTTPTransport`, which this subclasses), so the patch sees them.

    Attributes:
        dialed: Connections opened so far (a count, for tests and benchmarks).
    """

    def __init__(
        self,
        *,
        max_connections: int | None = None,
        max_idle: int = 100,
        keepalive_expiry: float = 4.0,
        verify: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # httpx's own path, taken only while it is patched (see mocked); builds no socket.
        super().__init__(
            verify=verify if verify is not None else True,
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=min(max_idle, 32),
                keepalive_expiry=keepalive_expiry,
            ),
            trust_env=False,
        )
        self._max = max_connections
        self._max_idle = max_idle
        self._expiry = keepalive_expiry
        self._ssl = verify
        self._clock = clock
        # Idle connections by origin, most recently used last; and all idle ones in the
        # order they went idle (the oldest first), so expiry and eviction are O(1).
        self._idle: dict[_Origin, dict[_Connection, None]] = {}
        self._idle_all: dict[_Connection, None] = {}
        self._open = 0  # connections dialled or dialling, not yet closed
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False
        self.dialed = 0

    def __repr__(self) -> str:
        return f"NetworkTransport(open={self._open}, idle={len(self._idle_all)})"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` on an idle connection of its origin, or a new one."""
        if mocked():
            return await httpx.AsyncHTTPTransport.handle_async_request(self, request)
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpx.UnsupportedProtocol(
                f"network: the URL's scheme {url.scheme!r} is not http or https", request=request
            )
        port = url.port or (443 if scheme == b"https" else 80)
        origin: _Origin = (scheme, url.raw_host, port)
        timeouts = request.extensions.get("timeout", {})
        conn = await self._acquire(origin, request, timeouts)
        try:
            await _mapped(_send(conn, request), request, "write")
            read = timeouts.get("read")
            while True:
                event = await _mapped(conn.next_event(read), request, "read")
                if isinstance(event, h11.Response):
                    break
                if not isinstance(event, h11.InformationalResponse):
                    raise httpx.RemoteProtocolError(
                        "the server closed the connection without answering", request=request
                    )
        except BaseException:
            self.discard(conn)
            raise
        return httpx.Response(
            status_code=event.status_code,
            headers=event.headers.raw_items(),
            stream=_Body(self, conn, request, read),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": event.reason},
        )

    async def _acquire(
        self, origin: _Origin, request: httpx.Request, timeouts: dict[str, Any]
    ) -> _Connection:
        if self._closed:
            raise RuntimeError("network: the transport is closed; make a new client")
        self._expire()
        conn = self._take_idle(origin)
        if conn is not None:
            return conn
        while self._max is not None and self._open >= self._max:
            if self._idle_all:  # an idle one of another origin makes room
                self.discard(next(iter(self._idle_all)))
                continue
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await _mapped(_bounded(waiter, timeouts.get("pool")), request, "pool")
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            conn = self._take_idle(origin)  # one of this origin may have gone idle meanwhile
            if conn is not None:
                return conn
        self._open += 1
        self.dialed += 1
        try:
            dialed: _Connection = await _mapped(
                _bounded(self._dial(origin), timeouts.get("connect")), request, "connect"
            )
        except BaseException:
            self._open -= 1
            self._wake_one()
            raise
        return dialed

    def _take_idle(self, origin: _Origin) -> _Connection | None:
        """The most recently used idle connection of `origin` still fit for a request."""
        idle = self._idle.get(origin)
        found = None
        while idle:
            conn, _ = idle.popitem()
            del self._idle_all[conn]
            if conn.reusable:
                found = conn
                break
            self._gone(conn)
        if idle is not None and not idle:
            del self._idle[origin]  # an origin with nothing idle keeps no entry
        return found

    async def _dial(self, origin: _Origin) -> _Connection:
        scheme, host, port = origin
        name = host.decode("ascii")
        loop = asyncio.get_running_loop()
        secure = scheme == b"https"
        context = None
        if secure:
            context = self._ssl if self._ssl is not None else ssl.create_default_context()
        _, conn = await loop.create_connection(
            lambda: _Connection(origin),
            name,
            port,
            ssl=context,
            server_hostname=name if secure else None,
        )
        return conn

    def release(self, conn: _Connection) -> None:
        """A response read to its end: keep its connection idle, or close it."""
        h = conn.h11
        if (
            self._closed
            or h.our_state is not h11.DONE
            or h.their_state is not h11.DONE
            or not conn.reusable
            or len(self._idle_all) >= self._max_idle
        ):
            self.discard(conn)
            return
        h.start_next_cycle()
        conn.idle_until = self._clock() + self._expiry
        self._idle.setdefault(conn.origin, {})[conn] = None
        self._idle_all[conn] = None
        self._wake_one()

    def discard(self, conn: _Connection) -> None:
        """Close `conn` (cut mid-answer, failed, or not worth keeping)."""
        self._unidle(conn)
        self._gone(conn)

    def _unidle(self, conn: _Connection) -> None:
        if self._idle_all.pop(conn, 0) is None:
            idle = self._idle[conn.origin]
            del idle[conn]
            if not idle:
                del self._idle[conn.origin]  # an origin with nothing idle keeps no entry

    def _gone(self, conn: _Connection) -> None:
        if not conn.gone:
            conn.gone = True
            conn.close()
            self._open -= 1
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _expire(self) -> None:
        """Close idle connections past their expiry, oldest first (they expire in order)."""
        if not self._idle_all:
            return
        now = self._clock()
        while self._idle_all:
            oldest = next(iter(self._idle_all))
            if oldest.idle_until > now and not oldest.closed:
                return
            self.discard(oldest)

    async def aclose(self) -> None:
        """Close every idle connection; ones in use close as their responses close."""
        self._closed = True
        for conn in list(self._idle_all):
            self.discard(conn)
        await super().aclose()

    async def __aexit__(self, *exc_info: Any) -> None:
        # httpx's client, leaving its `async with`, exits its transport's context rather
        # than calling aclose(); httpx's own transport would close only its unused pool.
        await self.aclose()


async def _send(conn: _Connection, request: httpx.Request) -> None:
    h = conn.h11
    whole = request_bytes(h, request)
    if whole is not None:  # a small request in memory: one write
        await conn.write(whole)
        return
    await conn.write(
        h.send(
            h11.Request(
                method=request.method, target=request.url.raw_path, headers=request.headers.raw
            )
        )
    )
    async for chunk in request.stream:  # type: ignore[union-attr]
        if chunk:
            await conn.write(h.send(h11.Data(data=chunk)))
    await conn.write(h.send(h11.EndOfMessage()))


async def _bounded(aw: Any, timeout: float | None) -> Any:
    if timeout is None:
        return await aw
    return await asyncio.wait_for(aw, timeout)
