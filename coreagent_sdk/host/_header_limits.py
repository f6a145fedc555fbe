"""The header limits both of the host's HTTP parsers count (h11's in `_limits`, httptools' in
`_limits_httptools`): the bytes of a request's head, the time it may take, idle connections.

Apart from both so that each parser's module imports it and neither imports the other; the
rules they pin are in `_limits`' docstring.

Besides the limits, how a connection is read between requests, as net/http reads it
(`server.go` `conn.serve`): the next request is read only once the one before it is
answered, and meanwhile at most `READ_AHEAD` bytes are read ahead (net/http's 4 KiB
`bufio.Reader`; one socket read here, up to 256 KiB), then the connection is not read
until the answer is done; the bytes held are then read as the next request's head, counted
and timed as any. So a client pipelining behind an open event stream holds a read of the
host's memory, not what it sends (uvicorn's httptools protocol parsed and kept it all).
A request refused while another is unanswered is answered after it, in order.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl

from ._chunk_lines import ChunkLines

__all__ = ["IDLE_TIMEOUT", "MAX_HEADER_BYTES", "READ_AHEAD", "READ_HEADER_TIMEOUT"]

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
READ_AHEAD = 4096  # net/http's bufio.Reader: what it may have read of the next request
"""Bytes of the next request a connection reads while the one before it is unanswered."""
_END = b"\r\n\r\n"
_RST_AVOIDANCE = 0.5  # net/http's rstAvoidanceDelay: the client gets to read the answer


def read_body_refused(text: str) -> bytes:
    """The daemon's answer to a body net/http could not read (`handlers.go` `readJSON`)."""
    body = f"read body: {text}\n".encode()
    return (
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"X-Content-Type-Options: nosniff\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


class _HeldFlow(FlowControl):
    """uvicorn's flow control, which leaves reading paused while the next request is held."""

    def __init__(self, transport: asyncio.Transport, holds: Any) -> None:
        super().__init__(transport)
        self._holds = holds

    def resume_reading(self) -> None:
        if not self._holds():
            super().resume_reading()


class _HeaderLimits(asyncio.Protocol):
    """net/http's header size limit and `ReadHeaderTimeout`, over either uvicorn parser.

    Counted on the bytes as they arrive, before the parser sees them, while the
    parser says a request's line and headers are being read (`_reading_head`).
    While a request whose body is read is unanswered (`_holding`), what follows is
    held, not parsed; a chunked body's lines are measured before the parser sees them.
    """

    max_header_bytes = MAX_HEADER_BYTES
    read_header_timeout = READ_HEADER_TIMEOUT
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    flow: FlowControl

    def _limits_init(self) -> None:
        self._header_bytes = 0  # of the request whose headers are being read
        self._tail = b""  # the last bytes seen, to find a "\r\n\r\n" split across reads
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused = False  # a refusal was sent: what else arrives is read and dropped
        self._held = bytearray()  # the next request's first bytes, while one is unanswered
        self._chunks: ChunkLines | None = None  # the chunked body being read, measured
        self._answer: bytes | None = None  # net/http's refusal of the request just parsed

    def _reading_head(self) -> bool:
        raise NotImplementedError

    def _holding(self) -> bool:
        """Whether a request is unanswered and its body read: what comes is the next one."""
        raise NotImplementedError

    def _holds_enough(self) -> bool:
        return len(self._held) >= READ_AHEAD and self._holding()

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.flow = _HeldFlow(transport, self._holds_enough)
        self._start_header_timer()  # net/http reads the first request at once

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused or self.transport.is_closing():
            return
        if self._holding():
            self._held += data
            if len(self._held) >= READ_AHEAD:
                self.flow.pause_reading()  # and kept paused until the answer is done
            return
        if self._held:  # held while the last request was unanswered: they come first
            data, self._held = bytes(self._held) + data, bytearray()
        if self._reading_head():
            if self._header_timer is None:
                self._start_header_timer()  # a kept-alive connection's next request
            seen = self._tail + data
            end = seen.find(_END)
            used = self._header_bytes - len(self._tail) + (end + 4 if end >= 0 else len(seen))
            if used > self.max_header_bytes:
                self._refuse()
                return
            if end < 0:
                self._header_bytes = used
                self._tail = seen[-3:]
            else:
                self._header_bytes, self._tail = 0, b""
                head = end + 4 - (len(seen) - len(data))
                if head < len(data):  # the head alone first: what follows is its body, or
                    self._feed(data[:head])  # the next request, held if this is unanswered
                    self.data_received(data[head:])
                    return
        elif self._chunks is not None:
            error = self._chunks.feed(data)
            if error is not None:
                self._refuse_body(error)
                return
            if self._chunks.done:
                end, self._chunks = self._chunks.end, None
                if end < len(data):
                    self._feed(data[:end])
                    self.data_received(data[end:])
                    return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        super().data_received(data)
        if not self._reading_head():
            self._stop_header_timer()

    def _replay(self) -> None:
        """An answer is done: read what was held, and read on."""
        if self._holding() or self.transport.is_closing():
            return
        if self._held:
            held, self._held = bytes(self._held), bytearray()
            self.data_received(held)
        if not self._holds_enough():
            self.flow.resume_reading()

    def _refuse_body(self, error: str) -> None:
        """net/http's chunked reader failed: the daemon answers 400 `read body:`, then closes."""
        self._refused = True
        cycle: Any = getattr(self, "cycle", None)
        if cycle is not None:  # the handler reads a disconnect, never the body
            answer = not cycle.response_started and self._only_unanswered()
            cycle.disconnected = True
            cycle.message_event.set()
            if answer:
                self._answer_and_close(read_body_refused(error))
                return
        self.transport.close()

    def _only_unanswered(self) -> bool:
        """Whether the request being read is the only one unanswered (answers keep order)."""
        return True

    def _refuse(self) -> None:
        self._answer_and_close(_TOO_LARGE)

    def _answer_and_close(self, answer: bytes) -> None:
        """Write net/http's refusal and close, reading and dropping whatever else arrives."""
        # As net/http's closeWriteAndWait: answer, half-close, keep reading a moment so
        # the client's unread writes do not reset the connection before it reads the answer.
        self._stop_header_timer()
        self._refused = True
        self.transport.write(answer)
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
