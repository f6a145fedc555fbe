"""Items 3 and 4: what one event may hold, and compressed bodies, cost bounded memory and time.

The bodies are pulled (tests/hostile/streams.py), so how much the SDK read
before it stopped is exact. Bounded loops: every body has a fixed chunk limit.
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import httpx
import pytest

from coreagent_sdk import MAX_EVENT_BYTES, AttachClient, CallPeer, Peer, StaticDirectory
from coreagent_sdk.errors import (
    CoreAgentError,
    FrameTooLargeError,
    PeerRequestError,
    PeerTimeoutError,
    ProtocolError,
)

from .streams import (
    CHUNK,
    Pulled,
    StreamingPeer,
    endless_data_lines,
    gzip_bomb,
    in_chunks,
    json_bomb,
    one_huge_event,
    status_frames,
)

MIB = 1024 * 1024


def tool_for(peer: httpx.AsyncBaseTransport, **kw: Any) -> CallPeer:
    return CallPeer(StaticDirectory([Peer("evil", "http://evil.test")]), transport=peer, **kw)


async def test_endless_data_lines_in_one_event_stop_at_the_event_bound() -> None:
    body = Pulled(endless_data_lines, limit=2000)  # 125 MiB if read to the end
    tool = tool_for(StreamingPeer(body), timeout=10)
    with pytest.raises(PeerRequestError) as info:
        await tool.acall(peer="evil", prompt="go")
    assert isinstance(info.value.__cause__, FrameTooLargeError)
    assert "event" in str(info.value) and str(MAX_EVENT_BYTES) in str(info.value)
    assert body.pulled <= MAX_EVENT_BYTES + CHUNK


async def test_one_huge_event_is_truncated_at_the_cap_without_being_buffered() -> None:
    # Read to its end to learn who wrote it (the daemon writes Author last), but only its
    # first bytes and its last 32 KiB are ever held.
    body = Pulled(one_huge_event(100 * MIB))
    tool = tool_for(StreamingPeer(body), timeout=30, max_response_bytes=16 * 1024)
    tracemalloc.start()
    try:
        result = await tool.acall(peer="evil", prompt="go")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.truncated and len(result.response.encode()) <= 16 * 1024
    assert result.response.startswith("y" * 1000 + "y" * 1000)
    assert body.pulled >= 99 * MIB
    assert peak < 16 * MIB, f"peak {peak / MIB:.1f} MiB"


async def test_the_event_bound_is_a_client_option() -> None:
    body = Pulled(endless_data_lines, limit=100)
    async with (
        AttachClient(
            "http://evil.test", transport=StreamingPeer(body), max_event_bytes=100_000
        ) as client,
        client.events("/sessions/a/s-1") as frames,
    ):
        with pytest.raises(FrameTooLargeError, match="grew past 100000 bytes"):
            async for _ in frames:
                pass
    assert body.pulled <= 100_000 + CHUNK


async def test_an_event_stream_is_requested_without_compression() -> None:
    peer = StreamingPeer(Pulled(status_frames, limit=1))
    client = AttachClient("http://evil.test", transport=peer)
    async with client, client.events("/sessions/a/s-1") as frames:
        async for _ in frames:
            break
    assert peer.requests[-1].headers["accept-encoding"] == "identity"


@pytest.mark.slow  # inflates 64 MiB under tracemalloc
@pytest.mark.parametrize(
    ("pattern", "error"),
    [(b"\x00", FrameTooLargeError), (b"data: x\n", FrameTooLargeError)],
    ids=["no-newlines", "endless-data-lines"],
)
async def test_a_gzip_bomb_on_an_event_stream_costs_bounded_memory(pattern, error) -> None:
    bomb = gzip_bomb(64, pattern)  # 64 MiB inflated, ~64 KiB on the wire
    peer = StreamingPeer(Pulled(in_chunks(bomb)), headers={"content-encoding": "gzip"})
    tracemalloc.start()
    try:
        client = AttachClient("http://evil.test", transport=peer)
        async with client, client.events("/sessions/a/s-1") as frames:
            with pytest.raises(error):
                async for _ in frames:
                    pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MIB


async def test_a_gzip_bomb_of_valid_frames_cannot_outlive_the_calls_deadline() -> None:
    bomb = gzip_bomb(256, b'event: status-update\ndata: {"turn_state":"streaming"}\n\n')
    peer = StreamingPeer(Pulled(in_chunks(bomb)), headers={"content-encoding": "gzip"})
    tool = tool_for(peer, timeout=0.5)
    started = time.perf_counter()
    with pytest.raises(PeerTimeoutError):
        await tool.acall(peer="evil", prompt="go")
    assert time.perf_counter() - started < 0.5 * 1.1 + 0.5


async def test_a_gzip_bomb_as_a_json_answer_is_refused_with_bounded_memory() -> None:
    bomb = json_bomb(64)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            201,
            headers={"content-encoding": "gzip", "content-type": "application/json"},
            stream=Pulled(in_chunks(bomb)),
        )

    tracemalloc.start()
    try:
        async with AttachClient(
            "http://evil.test", transport=httpx.MockTransport(handler)
        ) as client:
            with pytest.raises(ProtocolError, match="over 4194304 bytes"):
                await client.new_session()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * MIB


async def test_a_body_in_an_encoding_not_asked_for_is_a_protocol_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = Pulled(lambda: iter([b"\x00\x01"]))
        return httpx.Response(201, headers={"content-encoding": "br"}, stream=body)

    async with AttachClient("http://evil.test", transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(ProtocolError, match="'br'"):
            await client.new_session()


async def test_a_gzipped_answer_that_fits_still_decodes() -> None:
    import gzip
    import json

    from .servers import SESSION

    def handler(request: httpx.Request) -> httpx.Response:
        body = gzip.compress(json.dumps(SESSION).encode())
        stream = Pulled(in_chunks(body, 7))  # inflated across chunk boundaries
        return httpx.Response(201, headers={"content-encoding": "gzip"}, stream=stream)

    async with AttachClient("http://evil.test", transport=httpx.MockTransport(handler)) as client:
        session = await client.new_session()
    assert session.session_id == "s-1"


def test_every_error_here_is_typed() -> None:
    assert issubclass(FrameTooLargeError, CoreAgentError)
