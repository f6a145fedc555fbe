"""A bound on what a Streamable HTTP MCP server sends, under the MCP SDK's own client.

Over stdio a server's frame is one line, bounded (`_session._open`); over HTTP the SDK
reads a JSON answer whole (`response.aread()`), so one 48 MiB body, or a body that never
ends, grew the caller's memory until call_timeout, and a gzip body inflated to whatever it
held. The SDK takes our httpx2 client, so the bound sits in its response hook: a JSON body is
counted as it arrives and ends at the frame bound, and a compressed body is refused
unread (its size is unknown until inflated; the requests ask for ``identity``). An SSE
answer's events are bounded by the SDK itself (``max_sse_event_size``, given the same
bound). Either refusal reaches the call as the SDK's own "cannot parse" error, naming the
bound.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

__all__ = ["IDENTITY", "bound_answers"]

IDENTITY = {"Accept-Encoding": "identity"}


class _Refused(httpx2.AsyncByteStream):
    """A body that is not read: iterating it raises the reason (the SDK reports it)."""

    def __init__(self, inner: httpx2.AsyncByteStream, why: str) -> None:
        self._inner = inner
        self._why = why

    async def __aiter__(self) -> AsyncIterator[bytes]:
        raise httpx2.StreamError(self._why)
        yield b""  # pragma: no cover - makes this an async generator

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Counted(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, bound: int, what: str) -> None:
        self._inner = inner
        self._bound = bound
        self._what = what

    async def __aiter__(self) -> AsyncIterator[bytes]:
        total = 0
        async for chunk in self._inner:
            total += len(chunk)
            if total > self._bound:
                raise httpx2.StreamError(
                    f"{self._what} is over {self._bound} bytes (the frame bound, "
                    "max(1 MiB, 8 x max_result_bytes)); stopped reading it"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def bound_answers(client: httpx2.AsyncClient, bound: int, server: str) -> None:
    """Bound every answer `client` receives (its response hook): see the module.

    A hook, not a transport, so the client keeps what the SDK configured (its proxies from
    the environment included).
    """
    what = f"the answer of MCP server {server}"

    async def hook(response: httpx2.Response) -> None:
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            response.stream = _Refused(
                stream,
                f"{what} came {encoding[:40]!r}-encoded, though the request asked for "
                "identity; a compressed body's size is unknown until inflated, so it is not read",
            )
        elif not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.stream = _Counted(stream, bound, what)

    hooks = client.event_hooks
    client.event_hooks = {**hooks, "response": [*hooks.get("response", []), hook]}
