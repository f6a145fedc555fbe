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
refused with a 400 (net/http's `readRequest`; llhttp does not look).
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ._header_limits import _HeaderLimits

__all__ = ["GoHeaderLimitsHttpTools"]


class _NotGoRequest(Exception):
    """A request net/http refuses and llhttp takes: uvicorn answers the parser's 400."""


class GoHeaderLimitsHttpTools(_HeaderLimits, HttpToolsProtocol):
    """uvicorn's httptools protocol with net/http's header size limit and `ReadHeaderTimeout`."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._limits_init()
        # Requests whose headers are read and whose body is not / whose answer is not done.
        self._unread = self._unanswered = 0
        self.parser.set_dangerous_leniencies(lenient_chunked_length=True)

    def _reading_head(self) -> bool:
        return self._unread == 0 and self._unanswered == 0

    def on_headers_complete(self) -> None:
        hosts = sum(1 for name, _ in self.headers if name == b"host")
        if hosts > 1 or (hosts == 0 and self.parser.get_http_version() == "1.1"):
            # Raised in the parser's callback: feed_data fails, uvicorn answers its 400.
            raise _NotGoRequest("missing required Host header" if not hosts else "too many Hosts")
        self._unread += 1
        self._unanswered += 1
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._unread = max(0, self._unread - 1)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._unanswered = max(0, self._unanswered - 1)
        super().on_response_complete()
