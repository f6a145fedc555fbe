"""What net/http refuses in a request's head that uvicorn's parsers take, and its answers.

Pins Go's `net/http` (`server.go` `conn.readRequest` and `conn.serve`'s error
answers, `transfer.go` `parseTransferEncoding` and `fixLength`, the vendored
`httpguts` `ValidHostHeader` and `ValidHeaderFieldValue`), checked in the
order net/http reads a request:

1. No header value may hold a control character but tab (NUL, 0x01, DEL...):
   `textproto.ReadMIMEHeader` refuses it first, with net/http's plain 400.
2. `Transfer-Encoding`: ignored on HTTP/1.0 by net/http, which frames such a
   request by its `Content-Length`; both parsers here frame it by its chunks,
   so it is refused (400) rather than read otherwise than the daemon reads it.
   On HTTP/1.1 and later exactly one field, `chunked` in any case, is taken;
   anything else (`identity`, `gzip, chunked`, two fields) is net/http's 501.
3. `Content-Length` must be digits (a comma list such as `4, 4` is a 400);
   equal repeats are taken, as on net/http.
4. The version: HTTP/1.x is served (1.2 too); any other is net/http's 505.
5. `Host`: a request naming one must name a valid one (no space, no `/`...):
   net/http's 400 "malformed Host header".

Each answer is written raw, as net/http writes it, and the connection closes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["BAD_REQUEST", "UNSUPPORTED_TE", "absolute_form", "refusal", "status_error"]

# server.go conn.serve: every refusal carries these headers, then the connection closes.
_ERROR_HEADERS = b"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
# Not echoing the encoding, as net/http does not (it would be text an attacker chose).
UNSUPPORTED_TE = b"HTTP/1.1 501 Not Implemented" + _ERROR_HEADERS + b"Unsupported transfer encoding"
"""net/http's answer to a transfer coding it does not read (RFC 9112: 501)."""
BAD_REQUEST = b"HTTP/1.1 400 Bad Request" + _ERROR_HEADERS + b"400 Bad Request"
"""net/http's answer to a request it cannot read, when it has no more to say."""


def status_error(code: int, reason: str, text: str) -> bytes:
    """net/http's `statusError` answer: the status and the reason in the line and the body."""
    said = f"{code} {reason}: {text}".encode()
    return b"HTTP/1.1 " + said + _ERROR_HEADERS + said


_VERSION_NOT_SUPPORTED = status_error(
    505, "HTTP Version Not Supported", "unsupported protocol version"
)
_MALFORMED_HOST = status_error(400, "Bad Request", "malformed Host header")
# httpguts validHostByte: what RFC 3986 allows in a host and port, and no more.
_HOST = re.compile(rb"[0-9A-Za-z!$%&'()*+,\-.:;=\[\]_~]*")
# httpguts ValidHeaderFieldValue: a control character (but tab) or DEL is refused.
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_DIGITS = re.compile(rb"[0-9]+")
_ABSOLUTE = re.compile(rb"[A-Za-z][A-Za-z0-9+.\-]*://([^/?#]*)")


def absolute_form(target: bytes) -> tuple[bytes, bytes] | None:
    """`(authority, path and query)` of an absolute-form target (`http://a:1/p?q`), else None.

    net/http routes such a request by its path, and takes its authority for the request's
    host, ignoring any Host header (`request.go` `readRequest`, RFC 9112 3.2.2).
    """
    match = _ABSOLUTE.match(target)
    if match is None:
        return None
    return match[1], target[match.end() :] or b"/"


def refusal(
    version: str, method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]]
) -> bytes | None:
    """net/http's answer to a request whose line and headers (lower-cased names) it refuses.

    None when net/http reads the request; `version` is `"1.1"`, `"2.0"`...
    """
    encodings: list[bytes] = []
    lengths: list[bytes] = []
    hosts: list[bytes] = []
    for name, value in headers:
        if _CONTROL.search(value):
            return BAD_REQUEST  # textproto.ReadMIMEHeader, before anything else is looked at
        if name == b"transfer-encoding":
            encodings.append(value)
        elif name == b"content-length":
            lengths.append(value)
        elif name == b"host":
            hosts.append(value)
    if encodings:  # transfer.go parseTransferEncoding
        if version in ("1.0", "0.9"):
            return BAD_REQUEST if encodings == [b"chunked"] else UNSUPPORTED_TE
        if len(encodings) != 1 or encodings[0].lower() != b"chunked":
            return UNSUPPORTED_TE
    if len(set(lengths)) > 1:
        return BAD_REQUEST  # fixLength: "cannot contain multiple Content-Length headers"
    if lengths and not encodings and not _DIGITS.fullmatch(lengths[0]):
        return BAD_REQUEST  # fixLength: strconv.ParseUint refuses "4, 4", "+4", ""
    if version.partition(".")[0] != "1" and not (
        version == "2.0" and method == b"PRI" and target == b"*"
    ):
        return _VERSION_NOT_SUPPORTED  # server.go http1ServerSupportsRequest
    if len(hosts) == 1 and not _HOST.fullmatch(hosts[0]):
        return _MALFORMED_HOST
    return None
