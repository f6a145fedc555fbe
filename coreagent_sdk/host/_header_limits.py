"""The header limits both of the host's HTTP parsers count (h11's in `_limits`, httptools' in
`_limits_httptools`): the bytes of a request's head, the time it may take, idle connections.

Apart from both so that each parser's module imports it and neither imports the other; the
rules they pin are in `_limits`' docstring.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["IDLE_TIMEOUT", "MAX_HEADER_BYTES", "READ_HEADER_TIMEOUT"]

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
