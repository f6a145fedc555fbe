"""Byte bounds on what an A2A peer sends, applied under the A2A SDK's own client.

The A2A SDK reads a non-streamed answer whole (`response.json()`) and an SSE
stream line by line (`aiter_lines`), so a peer sending one endless line, or an
endless body, would grow the caller's memory until its deadline. The SDK takes
our httpx client, so the bound sits in that client's transport: every response
body read while `limits(...)` is in force is counted as it arrives, and a line
or a body past its bound ends the read with `ProtocolError`. A compressed body
is refused outright: its bytes on the wire say nothing of what it inflates to,
and the requests ask for `identity`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterator

import httpx

from ..errors import ProtocolError

__all__ = ["BoundedBodies", "limits"]

# (longest line, whole body, what is read, for messages) while a call reads.
_limits: contextvars.ContextVar[tuple[int, int, str] | None] = contextvars.ContextVar(
    "coreagent_a2a_limits", default=None
)


@contextlib.contextmanager
def limits(line: int, body: int, what: str) -> Iterator[None]:
    """Bound every response body the enclosed code reads through `BoundedBodies`."""
    token = _limits.set((line, body, what))
    try:
        yield
    finally:
        _limits.reset(token)


class _Counted(httpx.AsyncByteStream):
    __slots__ = ("_body", "_host", "_inner", "_line", "_what")

    def __init__(
        self, inner: httpx.AsyncByteStream, line: int, body: int, what: str, host: str
    ) -> None:
        self._inner = inner
        self._line = line
        self._body = body
        self._what = what
        self._host = host

    async def __aiter__(self) -> AsyncIterator[bytes]:
        total = 0
        line = 0  # bytes since the last newline
        async for chunk in self._inner:
            total += len(chunk)
            if total > self._body:
                raise ProtocolError(
                    f"a2a: the {self._what} from {self._host!r} is over {self._body} bytes; "
                    "stopped reading it"
                )
            if line + len(chunk) <= self._line:  # no line in it can be over: the common case
                cut = chunk.rfind(b"\n")
                line = line + len(chunk) if cut < 0 else len(chunk) - cut - 1
            else:
                line = self._longest(chunk, line)
            yield chunk

    def _longest(self, chunk: bytes, line: int) -> int:
        """The bytes since the last newline after `chunk`; raises at a line over the bound."""
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            grown = line + (len(chunk) if end < 0 else end) - start
            if grown > self._line:
                raise ProtocolError(
                    f"a2a: the {self._what} from {self._host!r} has one line (one event) over "
                    f"{self._line} bytes; stopped reading it"
                )
            if end < 0:
                return grown
            line, start = 0, end + 1

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedBodies(httpx.AsyncBaseTransport):
    """`inner`, with the bodies read under `limits(...)` counted as they arrive."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        bound = _limits.get()
        if bound is None:
            return response
        line, body, what = bound
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            await response.aclose()
            raise ProtocolError(
                f"a2a: the {what} from {request.url.host!r} came {encoding!r}-encoded, though "
                "the request asked for identity; a compressed body's size is unknown until "
                "inflated, so it is not read"
            )
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Counted(response.stream, line, body, what, request.url.host)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
