"""Reading an event stream: bounded lines, httpx-sse's decoder for the framing, typed frames."""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator, Collection

import httpx

# httpx-sse's public API wraps a whole httpx.Response, which costs a second
# layer of body iteration per chunk (about a tenth of a delegation). Its line
# and event decoders are used directly instead; the dependency is pinned to
# the 0.4 series, and tests/test_sse.py exercises both decoders.
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from ._wire import Frame, decode_frame, event_kind
from .errors import CoreAgentError, FrameTooLargeError, TransportFailure

__all__ = ["MAX_LINE_BYTES", "iter_frames"]

MAX_LINE_BYTES = 1024 * 1024


async def _guarded(chunks: AsyncIterator[bytes], response: httpx.Response) -> AsyncIterator[bytes]:
    """The body's chunks; a connection that breaks mid-stream becomes `TransportFailure`."""
    try:
        async for chunk in chunks:
            yield chunk
    except httpx.TransportError as exc:
        if isinstance(exc, CoreAgentError):
            raise
        raise TransportFailure(
            f"sse: the event stream from {response.url.host!r} broke off "
            f"({type(exc).__name__}: {exc})"
        ) from exc


async def iter_frames(
    response: httpx.Response,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    types: Collection[str] | None = None,
) -> AsyncIterator[Frame]:
    """Typed frames from an open `text/event-stream` response; unknown ones skipped.

    A line that grows past `max_line_bytes` without ending raises
    `FrameTooLargeError`: the line decoder would otherwise buffer it until
    memory runs out. With `types`, frames of other event types are skipped
    before their JSON is parsed (a legacy frame with no `event:` line counts
    as `agent`).
    """
    lines = SSELineDecoder()
    events = SSEDecoder()
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")
    # A daemon does not compress event streams; if one did, decode it first.
    chunks = (
        response.aiter_bytes() if "content-encoding" in response.headers else (response.aiter_raw())
    )
    pending = 0  # bytes since the last line break
    async for chunk in _guarded(chunks, response):
        cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        pending = len(chunk) - cut - 1 if cut >= 0 else pending + len(chunk)
        if pending > max_line_bytes:
            raise FrameTooLargeError(
                f"sse: a line of the event stream from {response.url.host!r} grew past "
                f"{max_line_bytes} bytes without ending; the stream was closed"
            )
        for line in lines.decode(text.decode(chunk)):
            sse = events.decode(line)
            if sse is not None:
                if types is not None and event_kind(sse.event) not in types:
                    continue
                frame = decode_frame(sse.event, sse.data)
                if frame is not None:
                    yield frame
    # An event not ended by a blank line before the stream closed is incomplete:
    # the SSE spec discards it, and so does this reader.
