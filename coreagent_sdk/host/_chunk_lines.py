"""A chunked request body's lines, measured as net/http's chunked reader reads them.

Pins Go's `net/http/internal/chunked.go` (`readChunkLine`, `parseHexUint`) and
`transfer.go` (`body.readTrailer`): a chunk's size line, extensions and CRLF
included, must be shorter than 4096 bytes (`maxLineLength`; else "header line
too long"), must end in CRLF, and its size may have at most 16 hex digits
("http chunk length too large"); the trailer after the last chunk must end
within the 4096 bytes net/http's reader buffers ("suspiciously long trailer").
The parsers here take a chunk extension of any size (llhttp) or up to the
header limit (h11), and a chunk size of up to 20 hex digits (h11), so the host
follows the body's framing beside the parser and refuses what net/http refuses,
before the parser sees it. The parser still reads the body: this only measures.
"""

from __future__ import annotations

__all__ = ["MAX_LINE", "ChunkLines"]

MAX_LINE = 4096  # chunked.go maxLineLength, which assumes bufio's default 4096-byte buffer
_MAX_DIGITS = 16  # parseHexUint: a 17th hex digit would overflow a uint64
_HEX = frozenset(b"0123456789abcdefABCDEF")
_LINE, _DATA, _TRAILER, _DONE = range(4)


class ChunkLines:
    """Follows one chunked body; `feed` each piece of it as it arrives, in order.

    `feed` answers the error net/http's reader would meet, or None; once the body
    has ended, `done` is true and `end` is where, in the last piece fed.
    """

    def __init__(self) -> None:
        self._state = _LINE
        self._line = bytearray()  # the size line so far (bounded: refused at MAX_LINE)
        self._left = 0  # bytes of chunk data, and its CRLF, still to come
        self.end = 0

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def feed(self, data: bytes) -> str | None:
        pos, size = 0, len(data)
        while pos < size and self._state != _DONE:
            if self._state == _DATA:
                step = min(self._left, size - pos)
                pos += step
                self._left -= step
                if not self._left:
                    self._state = _LINE
                continue
            newline = data.find(b"\n", pos)
            stop = size if newline < 0 else newline + 1
            self._line += data[pos:stop]
            pos = stop
            if len(self._line) >= MAX_LINE + (self._state == _TRAILER):
                return (
                    "http: suspiciously long trailer after chunked body"
                    if self._state == _TRAILER
                    else "header line too long"
                )
            if newline < 0:
                continue
            if self._state == _TRAILER:
                if self._line.endswith(b"\r\n\r\n") or self._line == b"\r\n":
                    self._state = _DONE
                continue
            error = self._chunk_line()
            if error is not None:
                return error
        self.end = pos
        return None

    def _chunk_line(self) -> str | None:
        line = bytes(self._line)
        if not line.endswith(b"\r\n"):
            return "chunked line ends with bare LF"
        digits = line[:-2].rstrip(b" \t").partition(b";")[0]
        if not all(byte in _HEX for byte in digits):
            return "invalid byte in chunk length"
        if len(digits) > _MAX_DIGITS:
            return "http chunk length too large"
        length = int(digits, 16) if digits else 0
        if length == 0:
            self._state = _TRAILER  # the last chunk: the trailer's lines, then its blank line
            self._line = bytearray()
            return None
        self._line = bytearray()
        self._left = length + 2  # the data, then its CRLF
        self._state = _DATA
        return None
