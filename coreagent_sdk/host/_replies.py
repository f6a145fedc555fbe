"""The host's plain answers and request bodies, as core-agent `pkg/attach/handlers.go` has them.

`http.Error`'s plain-text answers (and `writeUnauthorized`'s 401), Go's `%q`
for what a client sent, and bodies read as `readJSON` reads them: counted
while read, refused past their cap, decoded into a Go struct's fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response

from .._attach._quote import go_quote
from ._gowire import decode_into, read_json

__all__ = ["content_length", "json_body", "json_value", "read_capped"]


def _text(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    # Go's http.Error: plain text and a newline, and nosniff so no browser reads it as more.
    return PlainTextResponse(
        message + "\n",
        status_code=status,
        headers={"X-Content-Type-Options": "nosniff", **(headers or {})},
    )


def _unauthorized(message: str) -> Response:
    # `writeUnauthorized`: the per-caller layer's 401, its realm distinct from the transport
    # token's `realm="attach"` so a client can tell which layer refused it.
    return _text(401, message, {"WWW-Authenticate": 'Bearer realm="attach-multisession"'})


def _q(value: str) -> str:
    # Go's %q as the daemon's messages use it (JSON left U+2028, U+202E, DEL raw), cut:
    # what a client declared is not ours to echo whole.
    return go_quote(value)


def content_length(request: Request) -> int:
    # A hostile or malformed Content-Length reads as no body, never as a 500.
    raw = request.headers.get("content-length", "")
    return int(raw) if raw.isascii() and raw.isdigit() else 0


async def read_capped(request: Request, limit: int) -> bytes | Response:
    """The body, counted while it is read: past `limit` the rest is never read (400).

    Pins Go's `http.MaxBytesReader` as core-agent `pkg/attach/handlers.go` `readJSON` uses it.
    """
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _text(400, f"request body too large (max {limit} bytes)")
            chunks.append(chunk)
    except ClientDisconnect:
        # The caller left mid-body: nobody reads this answer, and it is no server error
        # (uncaught, each such caller was a traceback in the host's log).
        return _text(400, "request body incomplete: the client disconnected")
    return b"".join(chunks)


async def json_value(request: Request, limit: int) -> Any | Response:
    """The body as JSON (any value), or its 400 as `readJSON` words it."""
    body = await read_capped(request, limit)
    if isinstance(body, Response):
        return body
    if not body:
        return _text(400, "request body is empty")
    value, error = read_json(body)
    return _text(400, f"malformed JSON: {error}") if error is not None else value


async def json_body(
    request: Request, limit: int, struct: str, fields: Mapping[str, type]
) -> dict[str, Any] | Response:
    """The body decoded into a Go struct of `fields`, or its 400.

    Pins core-agent `pkg/attach/handlers.go` `readJSON`: capped while read,
    an empty body (zero bytes, not blank) is "request body is empty", and
    every decoding error is "malformed JSON: ..." (see `_gowire`).
    """
    value = await json_value(request, limit)
    if isinstance(value, Response):
        return value
    fields_set, error = decode_into(value, struct, fields, nullable=frozenset({"wake"}))
    return _text(400, f"malformed JSON: {error}") if error is not None else fields_set
