"""`request_bytes`: a small request with its whole body, written as one piece of bytes.

h11 validates and writes a request through its event objects, its header
normalisation and its state machine: for the SDK's small requests (a head
and a JSON body of a few hundred bytes) that was a twelfth of a delegation's
CPU on the caller, and two socket writes per request. Here the bytes are
written by hand under the rules h11 checks (a token method, a visible-ASCII
target, token header names, header values without NUL, CR, LF or edge
whitespace, one Content-Length matching the body, a Host), then h11 is told
of a request of the same method and `Connection` header with no body, so it
reads the answer as it would have.

A request outside those rules (a chunked body, a body not in memory, a
header h11 would refuse) is None here: h11 writes it, and says what it refuses.
"""

from __future__ import annotations

import re

import h11
import httpx

__all__ = ["request_bytes"]

# h11's own grammar (RFC 9110 token; field-value: field-vchar = anything but NUL and
# whitespace, runs of SP/HTAB only between them; request-target: visible ASCII).
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_VALUE = re.compile(rb"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?")
_TARGET = re.compile(rb"[\x21-\x7e]+")


def request_bytes(h: h11.Connection, request: httpx.Request) -> bytes | None:
    """`request` as bytes, its head and body, with `h` told it was sent (None: let h11 write it)."""
    try:
        body = request.content
    except httpx.RequestNotRead:  # a streamed body: h11 frames it
        return None
    method = request.method.encode("ascii", "replace")
    target = request.url.raw_path
    if not _TOKEN.fullmatch(method) or not _TARGET.fullmatch(target):
        return None
    parts = [method, b" ", target, b" HTTP/1.1\r\n"]
    length = connection = None
    host = False
    for name, value in request.headers.raw:
        if not _TOKEN.fullmatch(name) or not _VALUE.fullmatch(value):
            return None
        lower = name.lower()
        if lower == b"content-length":
            if length is not None:
                return None
            length = value
        elif lower == b"transfer-encoding":
            return None
        elif lower == b"connection":
            if connection is not None:
                return None
            connection = value
        elif lower == b"host":
            host = True
        parts += (name, b": ", value, b"\r\n")
    if not host or length != (str(len(body)).encode() if body or length is not None else None):
        return None
    parts += (b"\r\n", body)
    h.send(_told(method, connection))
    h.send(_END)
    return b"".join(parts)


_END = h11.EndOfMessage()
_TOLD: dict[tuple[bytes, bytes | None], h11.Request] = {}


def _told(method: bytes, connection: bytes | None) -> h11.Request:
    """The request h11 is told of: what it needs to read the answer.

    The method (a HEAD's answer has no body) and whether the connection closes
    after it. h11's events are immutable, so each is made once.
    """
    key = (method, connection)
    event = _TOLD.get(key)
    if event is None:
        said = [(b"Host", b"-")]
        if connection is not None:
            said.append((b"Connection", connection))
        event = h11.Request(method=method, target=b"/", headers=said)
        if len(_TOLD) < 32:  # the few methods and Connection values the SDK sends
            _TOLD[key] = event
    return event
