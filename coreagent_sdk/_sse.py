"""Reading an event stream: a bounded SSE decoder and typed frames.

Invariant: whatever a peer sends, reading its stream holds at most one
event's worth of bytes (`max_event_bytes`, 1 MiB by default) plus one network
chunk. An event is every line up to the blank line that ends it (`event:`,
each `data:`, comments), so neither one endless line, nor endless `data:`
lines, nor endless comments can grow the reader: each raises
`FrameTooLargeError` as soon as the event passes the bound, before more is
read. A compressed stream (which is not asked for) is inflated in bounded
steps first (`_inflate`).

The decoder follows the SSE spec's parsing rules (lines end in LF, CRLF or
CR; `field: value` with one optional space; a leading BOM is dropped; an event
cut off by the end of the stream is discarded) and works on bytes, decoding
UTF-8 once per event, so a character split across chunks survives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection

import httpx

from ._inflate import body_chunks
from ._wire import Frame, decode_frame, event_kind
from .errors import CoreAgentError, FrameTooLargeError, TransportFailure

__all__ = ["MAX_EVENT_BYTES", "MAX_LINE_BYTES", "EventDecoder", "iter_frames"]

MAX_LINE_BYTES = 1024 * 1024
"""The longest SSE line a client reads; a longer one ends the stream with an error."""
MAX_EVENT_BYTES = 1024 * 1024
"""The most data one SSE event may hold across its lines."""
_BOM = b"\xef\xbb\xbf"


class EventDecoder:
    """Bytes in, complete `(event type, data)` pairs out; raises past the bound."""

    __slots__ = (
        "_data",
        "_host",
        "_limit",
        "_line_limit",
        "_partial",
        "_size",
        "_started",
        "_type",
    )

    def __init__(self, max_event_bytes: int, max_line_bytes: int, host: str = "") -> None:
        self._limit = max_event_bytes
        self._line_limit = max_line_bytes
        self._host = host
        self._partial = b""  # the line not ended yet
        self._type = b""
        self._data: list[bytes] = []
        self._size = 0  # bytes of the event so far, ended lines only
        self._started = False

    def _too_large(self, what: str, limit: int) -> FrameTooLargeError:
        return FrameTooLargeError(
            f"sse: {what} of the event stream from {self._host!r} grew past {limit} bytes "
            "without ending; the stream was closed"
        )

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        buf = self._partial + chunk if self._partial else chunk
        if not self._started:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                self._partial = buf
                return []
            self._started = True
            if buf.startswith(_BOM):
                buf = buf[len(_BOM) :]
        # A CR at the very end may be the first half of a CRLF: keep it for the next chunk.
        keep_cr = buf.endswith(b"\r")
        if keep_cr:
            buf = buf[:-1]
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        partial = lines.pop()
        if keep_cr:
            # Put the CR back: the next chunk says whether it ended a line or began a CRLF.
            partial += b"\r"
        out: list[tuple[str, str]] = []
        for line in lines:
            if not line:
                if self._data:
                    data = b"\n".join(self._data).decode("utf-8", "replace")
                    out.append((self._type.decode("utf-8", "replace"), data))
                self._type, self._data, self._size = b"", [], 0
                continue
            self._size += len(line) + 1
            if self._size > self._limit:
                raise self._too_large("an event", self._limit)
            if line[:1] == b":":
                continue  # a comment
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                self._data.append(value)
            elif name == b"event":
                self._type = value
            # id and retry are not used by this protocol; unknown fields are ignored.
        if len(partial) > self._line_limit:
            raise self._too_large("a line", self._line_limit)
        if self._size + len(partial) > self._limit:
            raise self._too_large("an event", self._limit)
        self._partial = partial
        return out


async def _guarded(chunks: AsyncIterator[bytes], response: httpx.Response) -> AsyncIterator[bytes]:
    """The body's chunks; a connection that breaks mid-stream becomes `TransportFailure`."""
    try:
        async for chunk in chunks:
            yield chunk
    except (httpx.TransportError, httpx.StreamError) as exc:
        if isinstance(exc, CoreAgentError):
            raise
        from ._scrub import scrub_chain

        scrub_chain(exc)
        raise TransportFailure(
            f"sse: the event stream from {response.url.host!r} broke off "
            f"({type(exc).__name__}: {exc})"
        ) from exc


async def iter_frames(
    response: httpx.Response,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_event_bytes: int = MAX_EVENT_BYTES,
    types: Collection[str] | None = None,
) -> AsyncIterator[Frame]:
    """Typed frames from an open `text/event-stream` response; unknown ones skipped.

    An event that grows past `max_event_bytes`, or a line past
    `max_line_bytes`, raises `FrameTooLargeError` before more is read. With
    `types`, frames of other event types are skipped before their JSON is
    parsed (a legacy frame with no `event:` line counts as `agent`).
    """
    decoder = EventDecoder(max_event_bytes, max_line_bytes, response.url.host)
    async for chunk in _guarded(body_chunks(response), response):
        for event, data in decoder.feed(chunk):
            if types is not None and event_kind(event) not in types:
                continue
            frame = decode_frame(event, data)
            if frame is not None:
                yield frame
    # An event not ended by a blank line before the stream closed is incomplete:
    # the SSE spec discards it, and so does this reader.
