"""Reading a model API's answer within bounds: its bytes and the whole request's time.

The vendor SDKs read a whole body into memory before anyone can look at its
size, and their timeouts are per operation (a server trickling a byte every
half second never trips a 60 s read timeout). So an adapter reads the answer
itself, as a stream:

- A 2xx body is read chunk by chunk (decoded, so a compressed answer counts
  at its real size) and refused once it passes `max_response_bytes`: at most
  that much plus one chunk is ever held.
- A non-2xx body is read by the SDK itself, to build its status error; a
  response hook on the HTTP client cuts that body at `ERROR_BODY_BYTES`
  (raw bytes), enough for the server's own words about the failure. The hook
  acts only inside an adapter's request (a context variable says so), so a
  client shared with other code is left as it was.
- One deadline covers the whole request: connection, waiting, every byte.
"""

from __future__ import annotations

import contextvars
import importlib
import sys
from collections.abc import AsyncIterator
from typing import Any

__all__ = [
    "ERROR_BODY_BYTES",
    "BodyTooLarge",
    "BrokenOff",
    "bounding",
    "install",
    "read_body",
    "unbounding",
]

ERROR_BODY_BYTES = 64 * 1024
"""The most of a failure's (non-2xx) body read, raw: the vendor's message is near its start."""

_active: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "coreagent_model_request", default=False
)


class BrokenOff(Exception):
    """The connection failed while the answer's body was being read (after `read` bytes)."""

    def __init__(self, read: bytes, error: BaseException) -> None:
        super().__init__(f"broke off after {len(read)} bytes ({type(error).__name__})")
        self.read = read
        self.error_type = type(error).__name__


class BodyTooLarge(Exception):
    """An answer's body passed the adapter's `max_response_bytes`."""

    def __init__(self, read: int, limit: int) -> None:
        super().__init__(f"read {read} bytes, over {limit}")
        self.read = read
        self.limit = limit


def bounding() -> contextvars.Token[bool]:
    """Mark the running request as an adapter's: the hook cuts its failure's body."""
    return _active.set(True)


def unbounding(token: contextvars.Token[bool]) -> None:
    """The request is over: the hook leaves the client's responses alone again."""
    _active.reset(token)


def _cut_stream(response: Any, limit: int) -> Any:
    """`response.stream` ending after `limit` raw bytes, of the stream class its library wants."""
    library = importlib.import_module(type(response).__module__.split(".", 1)[0])
    base: type = library.AsyncByteStream
    inner = response.stream

    class _Cut(base):  # type: ignore[misc]
        async def __aiter__(self) -> AsyncIterator[bytes]:
            size = 0
            async for chunk in inner:
                left = limit - size
                if left <= 0:
                    break
                size += len(chunk)
                yield chunk[:left]

        async def aclose(self) -> None:
            await inner.aclose()

    return _Cut()


async def _cut_failures(response: Any) -> None:
    """Response hook: a non-2xx body of an adapter's request is read to `ERROR_BODY_BYTES`."""
    if not _active.get() or 200 <= response.status_code < 300:
        return
    try:
        response.stream = _cut_stream(response, ERROR_BODY_BYTES)
    except (AttributeError, ImportError, TypeError):  # not an httpx-like response: leave it
        return


def install(sdk_client: Any) -> None:
    """Put the failure-body hook on the HTTP client a vendor SDK client sends through, once."""
    http: Any = getattr(sdk_client, "_client", None)
    hooks = getattr(http, "event_hooks", None)
    if not isinstance(hooks, dict) or _cut_failures in hooks.get("response", ()):
        return
    http.event_hooks = {**hooks, "response": [*hooks.get("response", ()), _cut_failures]}


async def read_body(response: Any, limit: int) -> bytes:
    """A streamed 2xx answer's body, or `BodyTooLarge` once it passes `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.iter_bytes():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(size, limit)
            chunks.append(chunk)
    except Exception as exc:
        # Read here, outside the SDK's request, an HTTP library's transport error is
        # its own (httpx's or httpx2's), not the vendor's: it means the server broke off.
        library = sys.modules.get(type(exc).__module__.split(".", 1)[0])
        transport_error = getattr(library, "TransportError", None)
        if isinstance(transport_error, type) and isinstance(exc, transport_error):
            raise BrokenOff(b"".join(chunks), exc) from None
        raise
    return b"".join(chunks)
