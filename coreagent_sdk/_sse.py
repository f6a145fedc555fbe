"""Reading an event stream: bounded lines, httpx-sse for the framing, typed frames out."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from httpx_sse import EventSource

from ._wire import Frame, decode_frame
from .errors import FrameTooLargeError

__all__ = ["MAX_LINE_BYTES", "iter_frames"]

MAX_LINE_BYTES = 1024 * 1024


class _LineBoundedStream(httpx.AsyncByteStream):
    """Passes decoded body bytes through, refusing a line that outgrows the bound.

    httpx-sse buffers a line until it sees its newline; without this guard a
    peer that never sends one grows that buffer until memory runs out.
    """

    def __init__(self, response: httpx.Response, limit: int) -> None:
        self._response = response
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = 0  # bytes seen since the last newline
        async for chunk in self._response.aiter_bytes():
            cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            pending = len(chunk) - cut - 1 if cut >= 0 else pending + len(chunk)
            if pending > self._limit:
                raise FrameTooLargeError(
                    f"sse: a line of the event stream from {self._response.url.host!r} grew past "
                    f"{self._limit} bytes without ending; the stream was closed"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()


async def iter_frames(
    response: httpx.Response, *, max_line_bytes: int = MAX_LINE_BYTES
) -> AsyncIterator[Frame]:
    """Typed frames from an open `text/event-stream` response; unknown ones skipped."""
    guarded = httpx.Response(
        response.status_code,
        headers={"content-type": response.headers.get("content-type", "text/event-stream")},
        stream=_LineBoundedStream(response, max_line_bytes),
    )
    async for sse in EventSource(guarded).aiter_sse():
        frame = decode_frame(sse.event, sse.data)
        if frame is not None:
            yield frame
