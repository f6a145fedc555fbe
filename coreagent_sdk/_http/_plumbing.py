"""Shared HTTP plumbing: client construction, bounded reads, status errors, scrubbing."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
import weakref
from collections.abc import Callable
from typing import Any

import httpx

from .._scrub import scrub_chain, server_text, slack
from ..errors import (
    BadRequestError,
    CoreAgentError,
    PayloadTooLargeError,
    ProtocolError,
    RateLimitedError,
    TransportFailure,
    status_error_class,
)
from ._inflate import body_chunks
from ._network import NetworkTransport, mocked
from ._rate_limit import retry_after_seconds
from ._requests import Requests
from ._transport import ASGITransport, RoutingTransport

__all__ = [
    "ERROR_EXCERPT_BYTES",
    "MAX_JSON_BYTES",
    "make_http_client",
    "own_requests",
    "parse_json",
    "read_bounded",
    "read_json_bytes",
    "status_error",
    "transport_failure",
]

_TOO_LARGE = "request body too large"  # Go's MaxBytesReader, as core-agent's readJSON words it
ERROR_EXCERPT_BYTES = 512
MAX_JSON_BYTES = 4 * 1024 * 1024

# A delegation holds its event stream open while it injects, so two
# connections per call are in use at once; httpx's default pool of 100 would
# deadlock past 50 concurrent calls. Streams are bounded by deadlines instead.
# httpx's own pool (the host's transport, `_LIMITS`) keeps few idle connections:
# httpcore scans (and probes) every pooled connection on every request, which
# made 250 concurrent calls on loopback 3x slower with 128 kept. The SDK's own
# clients use `NetworkTransport`, whose steps cost O(1), and keep more. Idle
# ones expire before common server keep-alive timeouts (uvicorn: 5 s), so a
# reused connection is never one being closed.
_KEEPALIVE = 32
_KEEPALIVE_EXPIRY = 4.0
_LIMITS = httpx.Limits(
    max_connections=None, max_keepalive_connections=_KEEPALIVE, keepalive_expiry=_KEEPALIVE_EXPIRY
)
_IDLE = 256  # idle connections the SDK's own pool keeps when its connections are not capped
DEFAULT_HTTP_TIMEOUT = httpx.Timeout(30.0)


_ssl_lock = threading.Lock()
_ssl_context: ssl.SSLContext | None = None


def _shared_ssl_context() -> ssl.SSLContext:
    """The process's one client SSL context, built on first use.

    Loading the CA bundle costs tens to hundreds of ms of CPU, and httpx does
    it for every client it makes, even one that only ever dials http://. A
    sync call makes fresh clients on a loop of its own each time, so it paid
    that twice per call. A context is safe to share across clients, loops and
    threads; this one is what httpx would build (certifi's bundle, verified).
    """
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            import certifi  # httpx's own dependency, and its default bundle

            _ssl_context = ssl.create_default_context(cafile=certifi.where())
        return _ssl_context


def make_http_client(
    transport: httpx.AsyncBaseTransport | None,
    max_connections: int | None = None,
    wrap: Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport] | None = None,
) -> httpx.AsyncClient:
    """An AsyncClient over `transport` (None: the real network); `max_connections` caps its pool.

    A request waiting for a free connection waits without a timer of its own:
    the caller's deadline bounds the wait, as it bounds everything else.
    """
    if transport is None:
        # The real network: a pool whose steps cost O(1) however many connections it holds
        # (httpx's own walks them all per request), so it may keep as many idle as it caps.
        transport = NetworkTransport(
            max_connections=max_connections,
            max_idle=_IDLE if max_connections is None else max(max_connections, _KEEPALIVE),
            keepalive_expiry=_KEEPALIVE_EXPIRY,
            verify=_shared_ssl_context(),
        )
    if wrap is not None:  # a layer over the pool, such as the A2A path's body bounds
        transport = wrap(transport)
    return _Client(transport=transport, timeout=DEFAULT_HTTP_TIMEOUT, trust_env=False)


class _NoCookies(httpx.Cookies):
    """A jar that keeps nothing a server sets."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def set(self, name: str, value: str, domain: str = "", path: str = "/") -> None:
        raise AttributeError("http: the SDK's own clients keep no cookies")


_HTTPX_LOG = logging.getLogger("httpx")


# The SDK's own transports, whose requests need none of httpx's client layers (see _Client).
_STRAIGHT = (NetworkTransport, ASGITransport, RoutingTransport)


class _Client(httpx.AsyncClient):
    """httpx's client without a cookie jar, as the daemon's Go client has none.

    A jar would keep a peer's `Set-Cookie` and send it to every peer on the same
    host, whatever its port (cookies ignore ports); and reading each answer's
    headers for cookies cost a tenth of a delegation's CPU.

    Over `NetworkTransport` and the in-process transports, a streamed request
    goes straight to the transport: httpx's auth, redirect and hook layers
    have nothing to do for the SDK's own requests (no auth object, no
    redirects followed, no hooks) and cost a twentieth of a delegation. In
    process they also left every answer in a reference cycle (httpx's
    response and the stream wrapper that points back at it), about 40
    objects a delegation that only the collector's passes freed. Whenever
    one of those layers could act (hooks or auth set, redirects followed, a
    test library patching httpx's transport), the request takes httpx's
    whole path as before. httpx's request log line is
    written here as httpx writes it.
    """

    def __init__(self, *, transport: httpx.AsyncBaseTransport, **options: Any) -> None:
        super().__init__(transport=transport, **options)
        self._network = transport if isinstance(transport, _STRAIGHT) else None

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        network = self._network
        if (
            network is None
            or not stream
            or auth is not httpx.USE_CLIENT_DEFAULT
            or follow_redirects is not httpx.USE_CLIENT_DEFAULT
            or not self._plain()
        ):
            return await super().send(
                request, stream=stream, auth=auth, follow_redirects=follow_redirects
            )
        if self.is_closed:
            raise RuntimeError("http: the client is closed; make a new one")
        request.extensions.setdefault("timeout", self.timeout.as_dict())
        response = await network.handle_async_request(request)
        response.request = request
        if _HTTPX_LOG.isEnabledFor(logging.INFO):
            _HTTPX_LOG.info(
                'HTTP Request: %s %s "%s %d %s"',
                request.method,
                request.url,
                response.http_version,
                response.status_code,
                response.reason_phrase,
            )
        return response

    def _plain(self) -> bool:
        """Nothing of httpx's client layers would act on a request (see the class)."""
        hooks = self.event_hooks
        return (
            self.auth is None
            and not self.follow_redirects
            and not hooks["request"]
            and not hooks["response"]
            and not mocked()
        )

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        raise AttributeError("http: the SDK's own clients keep no cookies")


_NO_COOKIES = _NoCookies()


def own_requests(client: httpx.AsyncClient, base_url: str) -> Requests | None:
    """Requests to `base_url` built the fast way, for a client the SDK made (None: not one).

    A client handed in by a user may have its headers changed at any time, so
    its requests are built by its own `build_request`.
    """
    return Requests(client, base_url) if type(client) is _Client else None


async def read_bounded(response: httpx.Response, limit: int) -> tuple[bytearray, bool]:
    """Up to `limit` bytes of a streamed (inflated if need be) body, and whether there was more.

    Holds at most `limit` plus one chunk: the body grows in place and is cut
    where it passes the limit, and is handed back as it is, never copied.
    """
    body = bytearray()
    async for chunk in body_chunks(response):
        body += chunk
        if len(body) > limit:
            del body[limit:]
            return body, True
    return body, False


async def read_json_bytes(response: httpx.Response, what: str) -> bytearray:
    """A JSON answer's body, undecoded; over `MAX_JSON_BYTES` is a ProtocolError."""
    body, more = await read_bounded(response, MAX_JSON_BYTES)
    if more:
        raise ProtocolError(
            f"attach: the {what} answer from {response.url.host!r} is over "
            f"{MAX_JSON_BYTES} bytes; refusing to buffer it"
        )
    return body


def parse_json(body: bytes | bytearray, host: str, what: str) -> Any:
    """`body` decoded; what is not JSON is a ProtocolError quoting a scrubbed excerpt."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        pass
    # Raised outside the handler: the decoder's error holds the whole body as
    # `doc`, and would otherwise ride along as __context__.
    excerpt, cut = server_text(body[: ERROR_EXCERPT_BYTES + slack()], ERROR_EXCERPT_BYTES)
    raise ProtocolError(
        f"attach: the {what} answer from {host!r} is not JSON: "
        f"{excerpt!r}{'...' if cut else ''}; is that URL an attach-mode daemon?"
    )


async def status_error(response: httpx.Response, component: str, hint: str = "") -> CoreAgentError:
    """The typed error for a non-2xx answer, with a bounded, scrubbed body excerpt."""
    # Read past the cut by the longest secret's length: the scrub must see it whole.
    raw, more = await read_bounded(response, ERROR_EXCERPT_BYTES + slack())
    text, cut = server_text(raw, ERROR_EXCERPT_BYTES)
    body = text + ("..." if more or cut else "")
    request = response.request
    cls = status_error_class(response.status_code)
    if cls is BadRequestError and body.lstrip().startswith(_TOO_LARGE):
        cls = PayloadTooLargeError  # the daemon's 400 for a body over its cap
    message = (
        f"{component}: {request.method} {request.url.path} on {request.url.host!r} answered "
        f"{response.status_code} {response.reason_phrase}"
    )
    if body.strip():
        message += f": {body.strip()}"
    if hint:
        message += f"; {hint}"
    if cls is RateLimitedError:
        retry_after = retry_after_seconds(response.headers.get("retry-after"))
        return RateLimitedError(
            message, status_code=response.status_code, body=body, retry_after=retry_after
        )
    return cls(message, status_code=response.status_code, body=body)


def transport_failure(exc: Exception, url: str, component: str) -> CoreAgentError:
    """An httpx transport failure as our error (ours already are; keep them)."""
    if isinstance(exc, CoreAgentError):
        return exc
    scrub_chain(exc)  # it stays the __cause__, in httpx's words
    said = str(exc).strip() or _SILENT.get(type(exc).__name__, "no detail given")
    return TransportFailure(
        f"{component}: could not reach {url} ({type(exc).__name__}: {said}); "
        "is the daemon running and the URL right?"
    )


# What httpx's errors mean when they come with no text (`ReadError()` from a reset
# connection, say), so a message never ends in an empty "(ReadError: )".
_SILENT = {
    "ConnectError": "the connection could not be opened",
    "ConnectTimeout": "the connection took too long to open",
    "ReadError": "the connection broke while reading the answer",
    "ReadTimeout": "the answer took too long to arrive",
    "WriteError": "the connection broke while sending the request",
    "WriteTimeout": "the request took too long to send",
    "PoolTimeout": "no free connection in the pool in time",
    "RemoteProtocolError": "the server closed the connection or broke HTTP",
    "LocalProtocolError": "the request could not be sent as valid HTTP",
    "ProxyError": "the proxy refused the request",
}


class LoopBoundClient:
    """One pooled `httpx.AsyncClient` per event loop, made on first use.

    Pooled connections belong to the loop that opened them, and closing them
    must happen on that loop. A tool used from several loops (an app's, and
    the loop thread its sync calls run on) gets one client per loop, and one
    loop's client is never dropped unclosed because another loop used the tool
    (its connections would be finalised later on no loop at all). `aclose()`
    releases the current loop's client; clients of loops that have closed are
    forgotten (nothing can close them any more; their loop closed their
    sockets). Safe from many threads at once: the table is only touched under
    a lock, so one thread's cleanup never trips over another's new client.
    ``max_connections`` caps each client's pool (None: no cap).
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None,
        max_connections: int | None = None,
        wrap: Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport] | None = None,
    ) -> None:
        self._transport = transport
        self._wrap = wrap
        self.max_connections = max_connections
        self._lock = threading.Lock()
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                self._forget_closed()
                client = make_http_client(self._transport, self.max_connections, self._wrap)
                self._clients[loop] = client
            return client

    def _forget_closed(self) -> None:
        for other in [k for k in list(self._clients.keys()) if k.is_closed()]:
            self._clients.pop(other, None)

    async def aclose(self) -> None:
        with self._lock:
            client = self._clients.pop(asyncio.get_running_loop(), None)
            self._forget_closed()
        if client is not None:
            await client.aclose()
