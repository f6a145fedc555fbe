"""Item 8: every public call has a whole-request deadline; inside CallPeer a stall is a timeout.

Raw loopback servers stall in the ways a slow or hostile server does: they
accept and never answer, or dribble one byte at a time. Each writes at most a
fixed number of bytes and stops when the block ends. Deadlines are short
(0.5 s); each test checks the call ended within 10% (+0.5 s) of its deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from coreagent_sdk import (
    AttachClient,
    CallPeer,
    HubDirectory,
    Peer,
    PeerRegistration,
    StaticDirectory,
)
from coreagent_sdk.errors import (
    DirectoryError,
    PeerTimeoutError,
    RegistrationError,
    RequestTimeoutError,
    TransportFailure,
)

from .servers import SESSION, RawServer, read_request, respond

DEADLINE = 0.5


async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    await asyncio.sleep(30)  # cancelled when the server's block ends


async def dribble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer headers one byte every 50 ms, never finishing them (at most 400 bytes)."""
    await read_request(reader)
    for byte in (b"HTTP/1.1 201 Created\r\nX-Slow: " + b"a" * 400)[:400]:
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.05)


async def stalled_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Sessions answer headers promptly, then the body stalls; everything else never answers."""
    _, target, _, _ = await read_request(reader)
    if target == "/sessions":
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 500\r\n\r\n{")
        await writer.drain()
    await asyncio.sleep(30)


@asynccontextmanager
async def server(handler: Any) -> AsyncIterator[RawServer]:
    async with RawServer(handler) as s:
        yield s


async def ends_in_time(call: Callable[[], Awaitable[Any]], deadline: float, error: Any) -> float:
    started = time.perf_counter()
    with pytest.raises(error):
        await call()
    took = time.perf_counter() - started
    assert took <= deadline * 1.1 + 0.5
    return took


@pytest.mark.parametrize("handler", [never_answer, dribble], ids=["never-answers", "slowloris"])
async def test_each_attach_client_call_has_a_whole_request_deadline(handler: Any) -> None:
    async with server(handler) as s, AttachClient(s.url, timeout=DEADLINE) as client:
        took = await ends_in_time(client.new_session, DEADLINE, RequestTimeoutError)
        assert took >= DEADLINE * 0.9
        await ends_in_time(client.list_peers, DEADLINE, RequestTimeoutError)


async def test_opening_an_event_stream_that_never_answers_ends_at_the_deadline() -> None:
    async def open_stream() -> None:
        async with client.events("/sessions/a/s-1"):
            pass

    async with server(never_answer) as s, AttachClient(s.url, timeout=DEADLINE) as client:
        await ends_in_time(open_stream, DEADLINE, RequestTimeoutError)


async def test_a_request_timeout_is_a_typed_timeout() -> None:
    assert issubclass(RequestTimeoutError, TransportFailure)
    assert issubclass(RequestTimeoutError, TimeoutError)


def test_the_default_deadline_is_documented_and_finite() -> None:
    from coreagent_sdk import DEFAULT_REQUEST_TIMEOUT

    assert AttachClient("http://a.test").timeout == DEFAULT_REQUEST_TIMEOUT == 30.0
    assert HubDirectory("http://a.test").timeout == DEFAULT_REQUEST_TIMEOUT


@pytest.mark.parametrize("handler", [never_answer, dribble], ids=["never-answers", "slowloris"])
async def test_a_hub_directory_lookup_ends_at_its_deadline(handler: Any) -> None:
    async with server(handler) as s:
        directory = HubDirectory(s.url, timeout=DEADLINE)
        await ends_in_time(directory.peers, DEADLINE, DirectoryError)
        await directory.aclose()


async def test_joining_a_hub_that_never_answers_ends_at_the_deadline() -> None:
    async def join() -> None:
        async with PeerRegistration(s.url, name="p", endpoint="http://p.test", timeout=DEADLINE):
            pass

    async with server(never_answer) as s:
        await ends_in_time(join, DEADLINE, RegistrationError)


@pytest.mark.parametrize(
    "handler", [never_answer, dribble, stalled_body], ids=["never-answers", "slowloris", "body"]
)
async def test_inside_call_peer_every_stall_is_a_peer_timeout_at_the_calls_deadline(
    handler: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A per-read timeout shorter than the call's deadline must not end the call first:
    # with httpx's 30 s read timeout shrunk to 0.1 s, the call still ends at its own 0.5 s.
    import coreagent_sdk._http._plumbing as http

    monkeypatch.setattr(http, "DEFAULT_HTTP_TIMEOUT", httpx.Timeout(0.1))
    async with server(handler) as s:
        tool = CallPeer(StaticDirectory([Peer("slow", s.url)]), timeout=DEADLINE)
        took = await ends_in_time(
            lambda: tool.acall(peer="slow", prompt="go"), DEADLINE, PeerTimeoutError
        )
        assert took >= DEADLINE * 0.9
        await tool.aclose()


async def test_inside_call_peer_a_stalled_hub_is_a_peer_timeout_too() -> None:
    async with server(never_answer) as s:
        tool = CallPeer(HubDirectory(s.url, timeout=10), timeout=DEADLINE)
        await ends_in_time(lambda: tool.acall(peer="x", prompt="go"), DEADLINE, PeerTimeoutError)
        await tool.aclose()


async def test_a_prompt_server_is_not_slowed_by_the_deadline() -> None:
    async def fine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import json

        await read_request(reader)
        writer.write(respond("201 Created", json.dumps(SESSION).encode()))
        await writer.drain()

    async with server(fine) as s, AttachClient(s.url, timeout=DEADLINE) as client:
        assert (await client.new_session()).session_id == "s-1"
