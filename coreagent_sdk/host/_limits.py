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

- each request is read as net/http reads it (`_go_requests`, `_chunk_lines`),
  and the next one only once it is answered (`_header_limits`).

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
import re
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ._chunk_lines import ChunkLines
from ._go_requests import BAD_REQUEST, UNSUPPORTED_TE, absolute_form, refusal
from ._header_limits import IDLE_TIMEOUT, MAX_HEADER_BYTES, READ_HEADER_TIMEOUT, _HeaderLimits
from ._server_logs import quiet_server_options

__all__ = [
    "IDLE_TIMEOUT",
    "MAX_HEADER_BYTES",
    "READ_HEADER_TIMEOUT",
    "GoHeaderLimits",
    "uvicorn_options",
]


# h11 reads `Content-Length: 4, 4` as 4 (and says so in the event); net/http refuses it.
_LENGTH_LIST = re.compile(rb"(?im)^content-length[ \t]*:[^\r\n]*,")


class _CheckedConnection(h11.Connection):
    """h11's connection, each request checked as net/http checks it before uvicorn reads it."""

    def __init__(self, protocol: GoHeaderLimits, max_incomplete_event_size: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_incomplete_event_size)
        self._protocol = protocol

    def next_event(self) -> Any:
        head = None
        if self.their_state is h11.IDLE:
            # The head as it came: h11's event holds the headers as h11 normalized them.
            buffered = self._receive_buffer._data
            end = buffered.find(b"\r\n\r\n")
            head = bytes(buffered[:end]) if end >= 0 else None
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            if exc.error_status_hint == 501:  # h11 reads no coding but chunked, as net/http
                self._protocol._answer = UNSUPPORTED_TE
            raise
        if isinstance(event, h11.Request):
            return self._protocol._checked(event, head or b"")
        return event


class GoHeaderLimits(_HeaderLimits, H11Protocol):
    """uvicorn's h11 protocol, reading requests as net/http does (see `_header_limits`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits_init()
        size = self.config.h11_max_incomplete_event_size  # None: served without our options
        self.conn = _CheckedConnection(self, MAX_HEADER_BYTES if size is None else size)

    def _reading_head(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def _holding(self) -> bool:
        return self.conn.their_state in (h11.DONE, h11.MUST_CLOSE)

    def _checked(self, event: h11.Request, head: bytes) -> h11.Request:
        """`event` as net/http reads it, or h11's error after setting net/http's answer."""
        headers = list(event.headers)
        answer = refusal(event.http_version.decode(), event.method, event.target, headers)
        if answer is None and _LENGTH_LIST.search(head):
            answer = BAD_REQUEST
        if answer is not None:
            self._answer = answer
            raise h11.RemoteProtocolError("refused as net/http refuses it")
        if any(name == b"transfer-encoding" for name, _ in headers):
            self._chunks = ChunkLines()  # refusal() let it through: it is `chunked`
        absolute = absolute_form(event.target)
        if absolute is None:
            return event
        authority, path = absolute
        if authority:
            headers = [(name, authority if name == b"host" else v) for name, v in headers]
        return h11.Request(
            method=event.method, target=path, headers=headers, http_version=event.http_version
        )

    def send_400_response(self, msg: str) -> None:
        answer, self._answer = self._answer, None
        if answer is None:
            super().send_400_response(msg)  # what h11 refuses itself: uvicorn's 400
        else:
            self._answer_and_close(answer)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._replay()


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


def uvicorn_options(*, quiet: bool = False) -> dict[str, Any]:
    """`uvicorn.Config` keywords that read request headers as the daemon's `http.Server` does.

    `AgentHost.serve()`, `MultiAgentHost.serve()` and the simulator's
    `Fleet.serve()` use them; pass them when serving a host's `app` with
    uvicorn yourself: ``uvicorn.Config(host.app, **uvicorn_options())``.
    Headers are limited to `MAX_HEADER_BYTES` (431 past it) and must arrive
    within `READ_HEADER_TIMEOUT` seconds (else the connection closes); an idle
    kept-alive connection is kept `IDLE_TIMEOUT` seconds; requests are parsed
    by httptools where it is installed (the `host` extra), else by h11; no
    `X-Forwarded-*` header changes the scheme or the client, as on net/http.

    With ``quiet=True``, the server also logs no request line and configures no
    logger of the process, as the host's own servers do: uvicorn's
    ``access_log=False`` would empty the process's ``uvicorn.access`` logger, for
    every other server in it too, and its default ``log_config`` would reset every
    ``uvicorn*`` logger; here each connection of this one server has its access
    log off, and uvicorn's errors still reach ``uvicorn.error`` as the process set
    it. Use it to serve beside your own uvicorn apps (the simulator's
    `Fleet.serve()` does): ``uvicorn.Config(app, **uvicorn_options(quiet=True))``.
    """
    options = {
        "http": _http_protocol(),
        "timeout_keep_alive": IDLE_TIMEOUT,
        # net/http reads no X-Forwarded-* header: the scheme and client are the connection's
        # (uvicorn's default took them from any loopback client's headers).
        "proxy_headers": False,
        # h11 never sees more than the limit (counted above); its own check stays out of the way.
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }
    return quiet_server_options(options) if quiet else options
