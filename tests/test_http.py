"""The shared HTTP plumbing: what every client this package makes has in common."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest

from coreagent_sdk import AttachClient, CallPeer, HubDirectory
from simulator import Fleet, behaviors


async def test_sync_calls_over_the_network_build_the_ssl_context_at_most_once_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Loading the CA bundle costs ~40-300 ms of CPU; each sync call makes new httpx
    # clients (a loop of its own), so building a context per client made every sync
    # call to a loopback peer pay it twice (tool and directory).
    made: list[ssl.SSLContext] = []
    real = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        context = real(*args, **kwargs)
        made.append(context)
        return context

    monkeypatch.setattr(ssl, "create_default_context", counting)
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    async with await fleet.serve() as served:
        tool = CallPeer(HubDirectory(served.urls["hub"]), timeout=10)
        for _ in range(3):
            # A thread of its own: the sync call must not block the loop serving the fleet.
            result = await asyncio.to_thread(tool, peer="echo", prompt="ping")
            assert "ping" in result.response
        await tool.aclose()
    await fleet.aclose()
    assert len(made) <= 1, f"{len(made)} SSL contexts were built for 3 sync calls"


async def test_the_sdks_clients_send_no_cookie_a_server_set_to_it_or_another_port() -> None:
    # Cookies ignore ports: a jar would hand one peer's cookie to every peer on its host.
    # The daemon's Go client keeps none either.
    seen: list[bytes] = []
    handlers: list[asyncio.Future[Any]] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                try:
                    seen.append(await reader.readuntil(b"\r\n\r\n"))
                except asyncio.IncompleteReadError:
                    return  # the client closed its connection
                body = b'{"identity": "me"}'
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Set-Cookie: session=stolen; Path=/\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        finally:
            writer.close()

    servers = [await asyncio.start_server(answer, "127.0.0.1", 0) for _ in range(2)]
    try:
        for server in (*servers, servers[0]):
            port = server.sockets[0].getsockname()[1]
            async with AttachClient(f"http://127.0.0.1:{port}") as client:
                assert (await client.whoami()).identity == "me"
                assert (await client.whoami()).identity == "me"
        # Each client closed its connection on leaving: the handlers end on their own.
        await asyncio.wait_for(asyncio.gather(*handlers), 10)
    finally:
        for server in servers:
            server.close()
            await server.wait_closed()
    assert len(seen) == 6
    assert not [head for head in seen if b"cookie:" in head.lower()]
