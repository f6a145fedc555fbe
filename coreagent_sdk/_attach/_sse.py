"""Reading an event stream: a bounded SSE decoder and typed frames.

Invariant: whatever a peer sends, reading its stream holds at most one
event's worth of bytes (`max_event_bytes`, 1 MiB by default) plus one network
chunk. An event is every line up to the blank line that ends it (`event:`,
each `data:`, comments), so neither one endless line, nor endless `data:`
lines, nor endless comments can grow the reader: each raises
`FrameTooLargeError` as soon as the event passes the bound, before more is
read. A compressed stream (which is not asked for) is inflated in bounded
steps first (`_inflate`).

A reader that asks for it (`cut_oversized=True`, as `CallPeer` does) gets an
event past the bound as a `CutEvent` instead of an error: its first
`max_event_bytes` of data and its last `CUT_TAIL_BYTES`, the rest discarded
as it arrives, so memory stays at the bound plus the tail whatever the size
(`_oversized` reads what it can from those two ends).

The decoder follows the SSE spec's parsing rules (lines end in LF, CRLF or
CR; `field: value` with one optional space; a leading BOM is dropped; an event
cut off by the end of the stream is discarded) and works on bytes, decoding
UTF-8 once per event, so a character split across chunks survives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection

import attrs
import httpx

from .._http._inflate import body_chunks
from ..errors import CoreAgentError, FrameTooLargeError, TransportFailure
from ._oversized import OversizedFrame, head_readable, read_oversized
from ._wire import Frame, decode_frame, event_kind

__all__ = [
    "CUT_TAIL_BYTES",
    "MAX_EVENT_BYTES",
    "MAX_LINE_BYTES",
    "CutEvent",
    "EventDecoder",
    "iter_frames",
]

MAX_LINE_BYTES = 1024 * 1024
"""The longest SSE line a client reads; a longer one ends the stream with an error."""
MAX_EVENT_BYTES = 1024 * 1024
"""The most data one SSE event may hold across its lines."""
CUT_TAIL_BYTES = 32 * 1024
"""How much of the end of an oversized event is kept (the fields after its text)."""
_BOM = b"\xef\xbb\xbf"
_MAX_FIELD_NAME = 16  # longer than any field this protocol knows: the line is skipped
_MAX_TYPE = 256  # bytes of an event type kept while an oversized event is discarded


@attrs.frozen
class CutEvent:
    """An event past the bound: its first bytes, its last bytes and its whole size."""

    type: str
    head: bytes
    tail: bytes
    size: int


class _Cut:
    """An oversized event being read past the bound: only its two ends are kept."""

    __slots__ = (
        "checked",
        "has_data",
        "head",
        "head_limit",
        "line",
        "name",
        "other",
        "size",
        "strip",
        "tail",
        "type",
    )

    def __init__(self, event_type: bytes, head_limit: int) -> None:
        self.type = event_type[:_MAX_TYPE]
        self.head = bytearray()
        self.tail = bytearray()
        self.head_limit = head_limit
        self.size = 0  # bytes of data, the newlines joining data lines included
        self.has_data = False
        self.line = b""  # the current line's field: b"" not known yet, or data/event/skip
        self.name = b""  # the field name read so far while it is not known
        self.strip = False  # drop one space at the start of the value
        self.checked = False  # whether the full head was found worth reading on
        # Bytes read past the bound that are no data (field names, comments, line ends):
        # a flood of them is no answer, and reading it line by line only costs time.
        self.other = 0

    def add(self, data: bytes) -> None:
        self.size += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            extra = len(self.tail) - CUT_TAIL_BYTES
            if extra > 0:
                del self.tail[:extra]

    def data_line(self, value: bytes) -> None:
        if self.has_data:
            self.add(b"\n")
        self.has_data = True
        self.add(value)

    def line_bytes(self, part: bytes) -> None:
        """Bytes of the current line (no line end among them)."""
        if not self.line:
            buf = self.name + part
            colon = buf.find(b":")
            if colon < 0:
                self.other += len(part)
                if len(buf) > _MAX_FIELD_NAME:
                    self.line, self.name = b"skip", b""
                else:
                    self.name = buf
                return
            name, rest = buf[:colon], buf[colon + 1 :]
            self.other += len(part) - len(rest)
            part = rest
            self.name, self.strip = b"", True
            if name == b"data":
                self.line = b"data"
                self.data_line(b"")
            elif name == b"event":
                self.line, self.type = b"event", b""
            else:
                self.line = b"skip"  # a comment, id, retry or unknown field
        if not part:
            return
        if self.line == b"skip":
            self.other += len(part)
            return
        if self.strip:
            self.strip = False
            if part[:1] == b" ":
                self.other += 1
                part = part[1:]
        if self.line == b"data":
            self.add(part)
        else:
            self.other += len(part)
            self.type = (self.type + part)[:_MAX_TYPE]

    def line_end(self) -> bool:
        """The current line ended; True when it was the blank line that ends the event."""
        self.other += 1
        if not self.line and not self.name:
            return True
        if not self.line:  # a whole line with no colon: a field with an empty value
            if self.name == b"data":
                self.data_line(b"")
            elif self.name == b"event":
                self.type = b""
        self.line, self.name, self.strip = b"", b"", False
        return False

    def event(self) -> CutEvent:
        return CutEvent(
            self.type.decode("utf-8", "replace"), bytes(self.head), bytes(self.tail), self.size
        )


class EventDecoder:
    """Bytes in, complete `(event type, data)` pairs out; raises past the bound."""

    __slots__ = (
        "_cut",
        "_cut_oversized",
        "_data",
        "_host",
        "_limit",
        "_line_limit",
        "_partial",
        "_size",
        "_skip_lf",
        "_started",
        "_type",
    )

    def __init__(
        self,
        max_event_bytes: int,
        max_line_bytes: int,
        host: str = "",
        *,
        cut_oversized: bool = False,
    ) -> None:
        self._cut_oversized = cut_oversized
        self._cut: _Cut | None = None  # the oversized event being discarded, if any
        self._skip_lf = False  # the last chunk ended in CR: a LF first in the next is its pair
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

    def _start_cut(self) -> _Cut:
        cut = _Cut(self._type, self._limit)
        for value in self._data:
            cut.data_line(value)
        self._type, self._data, self._size, self._partial = b"", [], 0, b""
        self._cut = cut
        return cut

    def _check_cut(self, cut: _Cut) -> None:
        """Once the first bytes are in, give up on an event they show cannot be read."""
        if cut.other > cut.head_limit:
            # Past the bound mostly with what is no data (comments, field names, tiny
            # lines): no answer looks like that, so stop as the plain reader would.
            self._cut = None
            raise self._too_large("an event", self._limit)
        if cut.checked or len(cut.head) < cut.head_limit:
            return
        cut.checked = True
        if not head_readable(cut.type.decode("utf-8", "replace"), bytes(cut.head)):
            # Not an agent frame's JSON (endless data lines, another event type): reading
            # on would only spend the deadline.
            self._cut = None
            raise self._too_large("an event", self._limit)

    def _feed_cut(self, chunk: bytes) -> list[tuple[str, str] | CutEvent]:
        """Read `chunk` into the oversized event; once it ends, decode what follows as usual."""
        cut = self._cut
        assert cut is not None
        try:
            return self._feed_cut_lines(cut, chunk)
        finally:
            if self._cut is cut:
                self._check_cut(cut)

    def _feed_cut_lines(self, cut: _Cut, chunk: bytes) -> list[tuple[str, str] | CutEvent]:
        pos, size = 0, len(chunk)
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                pos = 1
        # memchr-speed finds; the next CR is looked for again only once passed, so a
        # chunk of many LF-ended lines is not rescanned for a CR at every line.
        next_cr = -2
        while pos < size:
            if next_cr != -1 and next_cr < pos:
                next_cr = chunk.find(b"\r", pos)
            lf = chunk.find(b"\n", pos)
            if lf < 0 and next_cr < 0:
                cut.line_bytes(chunk[pos:])
                return []
            at = lf if next_cr < 0 or 0 <= lf < next_cr else next_cr
            if at > pos:
                cut.line_bytes(chunk[pos:at])
            pos = at + 1
            if at == next_cr:
                if pos < size and chunk[pos] == 0x0A:
                    pos += 1  # CRLF
                elif pos == size:
                    self._skip_lf = True
            if cut.line_end():
                self._check_cut(cut)  # however the chunks fell, as if it had gone on
                self._cut = None
                # An event with no data line is not dispatched (the SSE spec), however long.
                rest: list[tuple[str, str] | CutEvent] = [cut.event()] if cut.has_data else []
                return rest + self.feed(chunk[pos:]) if pos < size else rest
        return []

    def feed(self, chunk: bytes) -> list[tuple[str, str] | CutEvent]:
        if self._cut is not None:
            return self._feed_cut(chunk)
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
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
        out: list[tuple[str, str] | CutEvent] = []
        for at, line in enumerate(lines):
            if not line:
                if self._data:
                    data = b"\n".join(self._data).decode("utf-8", "replace")
                    out.append((self._type.decode("utf-8", "replace"), data))
                self._type, self._data, self._size = b"", [], 0
                continue
            self._size += len(line) + 1
            if self._size > self._limit:
                if not self._cut_oversized:
                    raise self._too_large("an event", self._limit)
                # Past the bound: keep the event's two ends, read the rest line by line.
                self._start_cut()
                rest = b"\n".join([line, *lines[at + 1 :], partial])
                return out + self._feed_cut(rest)
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
        held = len(partial) - keep_cr  # a CR kept for the next chunk is a line end, not data
        over_line = held > self._line_limit
        if over_line or self._size + held > self._limit:
            if not self._cut_oversized:
                if over_line:
                    raise self._too_large("a line", self._line_limit)
                raise self._too_large("an event", self._limit)
            self._start_cut()
            return out + self._feed_cut(partial)
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
        from .._scrub import scrub_chain

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
    cut_oversized: bool = False,
) -> AsyncIterator[Frame | OversizedFrame]:
    """Typed frames from an open `text/event-stream` response; unknown ones skipped.

    An event that grows past `max_event_bytes`, or a line past
    `max_line_bytes`, raises `FrameTooLargeError` before more is read; with
    `cut_oversized`, it is read to its end in bounded memory and yielded as an
    `OversizedFrame` instead. With `types`, frames of other event types are
    skipped before their JSON is parsed (a legacy frame with no `event:` line
    counts as `agent`).
    """
    decoder = EventDecoder(
        max_event_bytes, max_line_bytes, response.url.host, cut_oversized=cut_oversized
    )
    async for chunk in _guarded(body_chunks(response), response):
        for item in decoder.feed(chunk):
            if isinstance(item, CutEvent):
                if types is not None and event_kind(item.type) not in types:
                    continue
                read = read_oversized(item.type, item.head, item.tail, item.size)
                if read is not None:
                    yield read
                continue
            event, data = item
            if types is not None and event_kind(event) not in types:
                continue
            frame = decode_frame(event, data)
            if frame is not None:
                yield frame
    # An event not ended by a blank line before the stream closed is incomplete:
    # the SSE spec discards it, and so does this reader.
