"""The daemon's header limits on uvicorn's httptools parser (C), where httptools is installed.

The same limits as `_limits.GoHeaderLimits`, counted the same way, over uvicorn's
`HttpToolsProtocol`: its parser is llhttp (C), where h11 parses and checks each
request and response in Python (a fifth of a served host's CPU per delegation).

httptools has no state to ask whether a request's headers are being read, so it
is counted here: a request is under way from its headers' end until both its
body is read and its answer is written (an answer may end first: a body refused
at its cap is still read to its end); between requests the connection reads
the next one's headers, as h11's IDLE state says on the other parser.

Where llhttp reads a request otherwise than net/http (and h11) do, it is made to
read it as they do: a request with both `Transfer-Encoding: chunked` and
`Content-Length` is read by its chunks (net/http's `fixLength`; llhttp refuses
it), and an HTTP/1.1 request without exactly one `Host`, or any with two, is
refused with a 400 (net/http's `readRequest`; llhttp does not look). What else
net/http refuses is checked when the headers are read (`_go_requests`), and a refusal
while an earlier request is unanswered waits for that answer: uvicorn wrote its 400 at
once and closed, so a pipelined 201 before it was lost. A target longer than httptools'
URL parser takes (64 KiB) is split here, so it is served up to the header limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ._chunk_lines import ChunkLines
from ._go_requests import UNSUPPORTED_TE, absolute_form, refusal
from ._header_limits import _HeaderLimits

__all__ = ["GoHeaderLimitsHttpTools"]


class _NotGoRequest(Exception):
    """A request net/http refuses and llhttp takes: uvicorn answers the parser's 400."""


class _Parser:
    """httptools' parser, noting the errors net/http answers otherwise than with a 400."""

    def __init__(self, parser: httptools.HttpRequestParser, protocol: GoHeaderLimitsHttpTools):
        self._parser = parser
        self._protocol = protocol

    def feed_data(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            # llhttp refuses two Transfer-Encodings and `chunked, identity` before the
            # protocol sees the headers; net/http answers both 501, as any coding it lacks.
            if "Transfer-Encoding" in str(exc) and self._protocol._answer is None:
                self._protocol._answer = UNSUPPORTED_TE
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)


# httptools' URL parser keeps offsets in 16 bits: a longer target is split here instead.
_URL_PARSER_MAX = 0xFFFF


class GoHeaderLimitsHttpTools(_HeaderLimits, HttpToolsProtocol):
    """uvicorn's httptools protocol, reading requests as net/http does (see `_header_limits`)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._limits_init()
        # Requests whose headers are read and whose body is not / whose answer is not done.
        self._unread = self._unanswered = 0
        self._deferred: Callable[[], None] | None = None  # a refusal waiting for its turn
        # Any HTTP/x.y is read, so that it is refused as net/http refuses it (505), not as
        # llhttp does (400 for all but 0.9, 1.0, 1.1 and 2.0); a chunked body with a
        # Content-Length is read by its chunks, as net/http's fixLength reads it.
        self.parser.set_dangerous_leniencies(lenient_chunked_length=True, lenient_version=True)
        self.parser = _Parser(self.parser, self)  # type: ignore[assignment]

    def _reading_head(self) -> bool:
        return self._unread == 0 and self._unanswered == 0

    def _holding(self) -> bool:
        return self._unread == 0 and self._unanswered > 0

    def _only_unanswered(self) -> bool:
        return self._unanswered == 1

    def on_headers_complete(self) -> None:
        method, version = self.parser.get_method(), self.parser.get_http_version()
        self._answer = refusal(version, method, self.url, self.headers)
        if self._answer is not None:
            raise _NotGoRequest("refused as net/http refuses it")
        hosts = sum(1 for name, _ in self.headers if name == b"host")
        if hosts > 1 or (hosts == 0 and version == "1.1"):
            # Raised in the parser's callback: feed_data fails, uvicorn answers its 400.
            raise _NotGoRequest("missing required Host header" if not hosts else "too many Hosts")
        if any(name == b"transfer-encoding" for name, _ in self.headers):
            self._chunks = ChunkLines()  # refusal() let it through: it is `chunked`
        absolute = absolute_form(self.url)
        if absolute is not None and absolute[0]:  # its authority is the request's host
            self.headers[:] = [
                (name, absolute[0] if name == b"host" else value) for name, value in self.headers
            ]
        self._unread += 1
        self._unanswered += 1
        target = self.url
        if len(target) <= _URL_PARSER_MAX:
            super().on_headers_complete()
            return
        # net/http reads a target up to the header limit; uvicorn's parse of it would fail.
        self.url = b"/"
        super().on_headers_complete()
        raw_path, _, query = (target if absolute is None else absolute[1]).partition(b"?")
        self.scope["raw_path"] = raw_path
        self.scope["path"] = self.root_path + unquote(raw_path.decode("ascii"))
        self.scope["query_string"] = query

    def send_400_response(self, msg: str) -> None:
        answer, self._answer = self._answer, None
        refuse: Callable[[], None] = (
            (lambda: HttpToolsProtocol.send_400_response(self, msg))
            if answer is None
            else (lambda: self._answer_and_close(answer))
        )
        if not self._unanswered:
            refuse()
            return
        # net/http answers in order: the requests before this one first (they are parsed).
        self._refused = True
        self._deferred = refuse
        self.flow.pause_reading()

    def on_message_complete(self) -> None:
        self._unread = max(0, self._unread - 1)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._unanswered = max(0, self._unanswered - 1)
        super().on_response_complete()
        if self._deferred is not None and not self._unanswered:
            refuse, self._deferred = self._deferred, None
            if not self.transport.is_closing():
                refuse()
            return
        self._replay()
