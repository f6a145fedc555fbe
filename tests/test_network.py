"""The SDK's own network transport: connections reused, capped, expired, and bounded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx

from coreagent_sdk import AttachClient, CallPeer, Peer, StaticDirectory
from coreagent_sdk._http import _network
from coreagent_sdk._http._network import NetworkTransport
from coreagent_sdk.host import AgentHost, Turn

from .no_content import answer_no_content, loopback_server


class Relay:
    """A loopback TCP relay in front of a server, counting the connections it accepts."""

    def __init__(self) -> None:
        self.accepted = 0
        self.url = ""


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def relayed(target: str) -> AsyncIterator[Relay]:
    host, port = target.removeprefix("http://").split(":")
    relay = Relay()
    tasks: set[asyncio.Task[Any]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        relay.accepted += 1
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        both = asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        tasks.add(both)  # type: ignore[arg-type]
        await both

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    relay.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield relay
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


async def _answer(turn: Turn) -> None:
    await turn.chunk("thinking ")
    await turn.say("done: " + turn.prompt)


@pytest.fixture
async def peer() -> AsyncIterator[Relay]:
    """An AgentHost served on loopback, behind a relay that counts connections."""
    host = AgentHost("helper", behavior=_answer)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        host.serve(on_ready=ready.set_result, handle_signals=False, grace=0)
    )
    url = await asyncio.wait_for(ready, 10)
    async with relayed(url) as relay:
        yield relay
    host.stop()
    await asyncio.wait_for(serving, 10)


async def test_delegations_in_a_row_dial_one_connection_each_for_the_stream_they_cut(
    peer: Relay,
) -> None:
    # A delegation's event stream is cut after its turn, so that connection cannot be
    # reused; its other two requests run on a pooled connection read to its end.
    async with CallPeer(StaticDirectory([Peer("helper", peer.url)]), timeout=10) as tool:
        for i in range(5):
            assert (await tool.acall(peer="helper", prompt=str(i))).response == f"done: {i}"
    assert peer.accepted == 5 + 1  # not 3 per delegation


async def test_an_idle_connection_is_reused_until_its_expiry_and_not_after(peer: Relay) -> None:
    now = [0.0]
    transport = NetworkTransport(keepalive_expiry=4.0, clock=lambda: now[0])
    async with httpx.AsyncClient(transport=transport, trust_env=False) as http:
        assert (await http.get(f"{peer.url}/sessions")).status_code == 200
        now[0] = 3.9
        assert (await http.get(f"{peer.url}/sessions")).status_code == 200
        assert peer.accepted == 1
        now[0] = 3.9 + 4.0
        assert (await http.get(f"{peer.url}/sessions")).status_code == 200
        assert peer.accepted == 2
    assert transport.dialed == 2


async def test_the_pool_keeps_nothing_for_an_origin_once_it_has_no_idle_connection() -> None:
    # Many peers met once each, over a long life: an origin whose idle connections all
    # expired, were taken or were closed leaves no entry behind; leaving the client's
    # `async with` closes what is idle.
    now = [0.0]
    transport = NetworkTransport(keepalive_expiry=4.0, clock=lambda: now[0], max_connections=2)
    async with contextlib.AsyncExitStack() as servers:
        urls = [
            await servers.enter_async_context(loopback_server(answer_no_content)) + "/"
            for _ in range(3)
        ]
        async with httpx.AsyncClient(transport=transport, trust_env=False) as http:
            for url in urls[:2]:
                assert (await http.get(url)).status_code == 204
            assert len(transport._idle) == 2
            # Past the cap, the third origin's request closes the oldest idle one for room.
            assert (await http.get(urls[2])).status_code == 204
            assert len(transport._idle) == 2
            # Taken for a request: its origin's entry goes while it is in use.
            async with http.stream("GET", urls[2]) as response:
                assert len(transport._idle) == 1
                await response.aread()
            now[0] = 10.0  # every idle one expires on the next request
            assert (await http.get(urls[0])).status_code == 204
            assert list(transport._idle) == [(b"http", b"127.0.0.1", httpx.URL(urls[0]).port)]
        assert transport._idle == {}


async def test_a_request_past_max_connections_waits_for_one_to_free(peer: Relay) -> None:
    transport = NetworkTransport(max_connections=1)
    async with (
        httpx.AsyncClient(transport=transport, trust_env=False) as http,
        AttachClient(peer.url, http_client=http) as client,
    ):
        session = await client.new_session()
        async with client.events(session):  # holds the only connection open
            with pytest.raises(httpx.PoolTimeout):
                await http.get(f"{peer.url}/sessions", timeout=httpx.Timeout(5, pool=0.05))
        # The stream was cut: its connection closed, and the next request dials anew.
        assert (await http.get(f"{peer.url}/sessions")).status_code == 200
    assert peer.accepted == 2


async def test_a_body_nobody_reads_is_held_only_up_to_the_high_water_mark() -> None:
    size = 4 * 1024 * 1024
    done = asyncio.Event()
    handlers: list[asyncio.Future[Any]] = []

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size)
            await writer.drain()
            await done.wait()
        finally:
            writer.close()

    server = await asyncio.start_server(flood, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    transport = NetworkTransport()
    try:
        async with (
            httpx.AsyncClient(transport=transport, trust_env=False) as http,
            http.stream("GET", url) as response,
        ):
            conn = _connection(response)
            for _ in range(500):  # bounded: until the socket stops being read
                if conn._paused:
                    break
                await asyncio.sleep(0.01)
            assert conn._paused
            assert conn._held <= _network._HIGH_WATER + 256 * 1024
            assert len(await response.aread()) == size  # nothing was lost
    finally:
        done.set()
        await asyncio.wait_for(asyncio.gather(*handlers, return_exceptions=True), 10)
        server.close()
        await server.wait_closed()


def _connection(response: httpx.Response) -> Any:
    """The connection under a streamed response (httpx wraps the transport's stream)."""
    stream = response.stream
    return getattr(stream, "_stream", stream)._conn


async def test_a_respx_mock_sees_the_sdks_requests_and_nothing_is_dialed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dials: list[Any] = []

    async def refuse(self: NetworkTransport, origin: Any) -> Any:
        dials.append(origin)  # recorded and refused before any socket
        raise OSError("this test dials nothing")

    monkeypatch.setattr(NetworkTransport, "_dial", refuse)
    with respx.mock(base_url="http://peer.test", assert_all_called=False) as mock:
        mock.get("/whoami").respond(200, json={"identity": "me"})
        async with AttachClient("http://peer.test") as client:
            assert (await client.whoami()).identity == "me"
    assert dials == []
