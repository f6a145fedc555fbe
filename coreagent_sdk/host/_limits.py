"""The daemon's `http.Server` limits on request headers, as uvicorn serves them.

Pins core-agent `pkg/attach/server.go` `Bind`: `http.Server{ReadHeaderTimeout:
10 * time.Second}` and no `MaxHeaderBytes`, so net/http's defaults hold:

- the request line and headers may take `DefaultMaxHeaderBytes` (1 MiB) plus
  the 4096 bytes of slack net/http reads them with (`initialReadLimitSize`);
  past that the answer is net/http's raw `431 Request Header Fields Too Large`
  and the connection closes. uvicorn's h11 refuses a header only while it
  arrives in pieces, past `h11_max_incomplete_event_size` (16 KiB by
  default), with a 400, and takes any size that arrives in one read: so 17 KiB
  sent in two writes was refused and 70 KB in one write accepted, where the
  daemon takes both. Here the limit is counted on the bytes themselves,
  before h11 sees them, whatever the writes.
- the headers must be in within `READ_HEADER_TIMEOUT` of the connection's
  start (for a later request on a kept-alive connection, of its first byte),
  or the connection closes without an answer (net/http's timeout is a
  "common read error": no reply). uvicorn has no such timeout: a slowloris
  client held its connection for as long as it liked.

Where uvicorn differs and stays so (docs/differences.md): an idle kept-alive
connection closes after `IDLE_TIMEOUT` (30 s); the daemon sets no
`IdleTimeout`, so it keeps one forever. Not uvicorn's default 5 s: a client
pool (the SDK's keeps an idle connection 4 s) counts idleness from when it
read the answer, the server from when it wrote it, so under load a caller
reused connections the host was closing that moment, and the request was
lost in the crossing (at 1,000 calls in flight, hundreds of them). A host
facing the network should still not hold connections nobody uses.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "IDLE_TIMEOUT",
    "MAX_HEADER_BYTES",
    "READ_HEADER_TIMEOUT",
    "GoHeaderLimits",
    "uvicorn_options",
]

MAX_HEADER_BYTES = (1 << 20) + 4096  # DefaultMaxHeaderBytes + net/http's read slack
"""The most bytes a request line and headers may take, as net/http reads them (431 past it)."""
READ_HEADER_TIMEOUT = 10.0  # server.go Bind: ReadHeaderTimeout
"""Seconds a request's line and headers may take to arrive (the daemon's ReadHeaderTimeout)."""
IDLE_TIMEOUT = 30.0  # well past any client pool's expiry; the daemon sets no IdleTimeout
"""Seconds a served host keeps an idle kept-alive connection open (uvicorn's default: 5)."""
# net/http's answer to oversized headers, written raw (server.go conn.serve, errTooLarge).
_TOO_LARGE = (
    b"HTTP/1.0 431 Request Header Fields Too Large\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    b"431 Request Header Fields Too Large"
)
_END = b"\r\n\r\n"
_RST_AVOIDANCE = 0.5  # net/http's rstAvoidanceDelay: the client gets to read the 431


class _HeaderLimits(asyncio.Protocol):
    """net/http's header size limit and `ReadHeaderTimeout`, over either uvicorn parser.

    Counted on the bytes as they arrive, before the parser sees them, while the
    parser says a request's line and headers are being read (`_reading_head`).
    """

    max_header_bytes = MAX_HEADER_BYTES
    read_header_timeout = READ_HEADER_TIMEOUT
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def _limits_init(self) -> None:
        self._header_bytes = 0  # of the request whose headers are being read
        self._tail = b""  # the last bytes seen, to find a "\r\n\r\n" split across reads
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused = False  # a 431 was sent: what else arrives is read and dropped

    def _reading_head(self) -> bool:
        raise NotImplementedError

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._start_header_timer()  # net/http reads the first request at once

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._reading_head():
            if self._header_timer is None:
                self._start_header_timer()  # a kept-alive connection's next request
            seen = self._tail + data
            end = seen.find(_END)
            used = self._header_bytes - len(self._tail) + (end + 4 if end >= 0 else len(seen))
            if used > self.max_header_bytes:
                self._refuse()
                return
            if end >= 0:
                self._header_bytes, self._tail = 0, b""
            else:
                self._header_bytes = used
                self._tail = seen[-3:]
        super().data_received(data)
        if not self._reading_head():
            self._stop_header_timer()

    def _refuse(self) -> None:
        # As net/http's closeWriteAndWait: answer, half-close, keep reading a moment so
        # the client's unread writes do not reset the connection before it reads the 431.
        self._stop_header_timer()
        self._refused = True
        self.transport.write(_TOO_LARGE)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(_RST_AVOIDANCE, self.transport.close)

    def _start_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.read_header_timeout, self._header_late)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_late(self) -> None:
        self._header_timer = None
        if self._reading_head() and not self.transport.is_closing():
            self.transport.close()  # net/http: a read timeout is answered with nothing


class GoHeaderLimits(_HeaderLimits, H11Protocol):
    """uvicorn's h11 protocol with net/http's header size limit and `ReadHeaderTimeout`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits_init()

    def _reading_head(self) -> bool:
        return self.conn.their_state is h11.IDLE


def _http_protocol() -> type[asyncio.Protocol]:
    """httptools' parser (C) where it is installed (the `host` extra brings it), else h11's."""
    try:
        import httptools

        from ._limits_httptools import GoHeaderLimitsHttpTools
    except ImportError:
        return GoHeaderLimits
    # Before 0.6.3 its parser cannot be told to read a request as net/http reads it.
    if not hasattr(httptools.HttpRequestParser, "set_dangerous_leniencies"):
        return GoHeaderLimits
    return GoHeaderLimitsHttpTools


def uvicorn_options() -> dict[str, Any]:
    """`uvicorn.Config` keywords that read request headers as the daemon's `http.Server` does.

    `AgentHost.serve()`, `MultiAgentHost.serve()` and the simulator's
    `Fleet.serve()` use them; pass them when serving a host's `app` with
    uvicorn yourself: ``uvicorn.Config(host.app, **uvicorn_options())``.
    Headers are limited to `MAX_HEADER_BYTES` (431 past it) and must arrive
    within `READ_HEADER_TIMEOUT` seconds (else the connection closes); an idle
    kept-alive connection is kept `IDLE_TIMEOUT` seconds; requests are parsed
    by httptools where it is installed (the `host` extra), else by h11; no
    `X-Forwarded-*` header changes the scheme or the client, as on net/http.
    """
    return {
        "http": _http_protocol(),
        "timeout_keep_alive": IDLE_TIMEOUT,
        # net/http reads no X-Forwarded-* header: the scheme and client are the connection's
        # (uvicorn's default took them from any loopback client's headers).
        "proxy_headers": False,
        # h11 never sees more than the limit (counted above); its own check stays out of the way.
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }
