"""Pull-based hostile bodies: the server produces a chunk only when the SDK reads one.

With these, how much a peer got to send before the SDK stopped reading is
exact, whatever the socket buffers would have hidden.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from functools import cache

import httpx

from coreagent_sdk._attach._wire import encode_sse

from .servers import SESSION

CHUNK = 64 * 1024


class Pulled(httpx.AsyncByteStream):
    """A body made by `chunks()` on demand, at most `limit` chunks; counts what was pulled."""

    def __init__(self, chunks: Callable[[], Iterator[bytes]], limit: int = 100_000) -> None:
        self._chunks = chunks
        self._limit = limit
        self.pulled = 0  # bytes handed to the SDK

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for n, chunk in enumerate(self._chunks()):
            if n >= self._limit:
                return
            self.pulled += len(chunk)
            yield chunk


class StreamingPeer(httpx.AsyncBaseTransport):
    """A peer whose `/events` body is `stream`; sessions and injects answer normally."""

    def __init__(self, stream: Pulled, headers: dict[str, str] | None = None) -> None:
        self.stream = stream
        self.headers = {"content-type": "text/event-stream", **(headers or {})}
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path == "/sessions":
            return httpx.Response(201, json=SESSION)
        if path.endswith("/inject"):
            return httpx.Response(200, json={"injected": "p", "session": "s-1", "woke": True})
        return httpx.Response(200, headers=self.headers, stream=self.stream)


def endless_data_lines() -> Iterator[bytes]:
    """One event that never ends: `data:` lines, 64 KiB a chunk."""
    line = b"data: " + b"x" * 1018 + b"\n"
    chunk = line * (CHUNK // len(line))
    yield b"event: agent\n"
    while True:
        yield chunk


def one_huge_event(size: int) -> Callable[[], Iterator[bytes]]:
    """A single `agent` event of `size` bytes, its data spread over 1 KiB `data:` lines."""

    def chunks() -> Iterator[bytes]:
        yield b'event: agent\ndata: {"seq":1,"event":{"Author":"m","Content":{"parts":[\n'
        line = b'data: {"text":"' + b"y" * 1000 + b'"},\n'
        chunk = line * (CHUNK // len(line))
        for _ in range(size // len(chunk)):
            yield chunk
        yield b'data: {"text":"end"}]},"TurnComplete":true}}\n\n'

    return chunks


def status_frames() -> Iterator[bytes]:
    """Small, complete, harmless frames for ever."""
    chunk = encode_sse("status-update", {"turn_state": "streaming"}) * 1000
    while True:
        yield chunk


@cache
def gzip_bomb(megabytes: int, pattern: bytes) -> bytes:
    """`megabytes` MiB of `pattern` repeated, gzipped (a ~1000:1 ratio)."""
    block = pattern * (1024 * 1024 // len(pattern))
    out = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [out.compress(block) for _ in range(megabytes)]
    return b"".join(parts) + out.flush()


def in_chunks(data: bytes, size: int = CHUNK) -> Callable[[], Iterator[bytes]]:
    return lambda: (data[i : i + size] for i in range(0, len(data), size))


def json_bomb(megabytes: int) -> bytes:
    """A gzipped JSON document that inflates to `megabytes` MiB."""
    body = b'{"app":"' + b"a" * (megabytes * 1024 * 1024) + b'"}'
    return gzip.compress(body, compresslevel=6)


def frames_of(*payloads: tuple[str, dict[str, object]]) -> bytes:
    return b"".join(encode_sse(e, p) for e, p in payloads)


__all__ = ["json"]
