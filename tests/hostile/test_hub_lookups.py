"""Issue 16.4: one stalled `GET /peers` must not poison a `HubDirectory` for later lookups.

A raw loopback hub stalls the first request it gets and answers every later
one; the directory must give up on the stalled request (and its socket), and
a later lookup must open a new request that the recovered hub answers.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from coreagent_sdk import FakeClock, HubDirectory
from coreagent_sdk.errors import DirectoryError

from .servers import RawServer, read_request

ROSTER = [
    {
        "registration_id": "reg-1",
        "name": "a",
        "endpoint": "http://127.0.0.1:9",
        "labels": {},
        "registered_at": "2026-01-01T00:00:00Z",
        "last_heartbeat": "2026-01-01T00:00:00Z",
        "lease_expires_at": "2026-01-01T00:01:00Z",
    }
]


class StallsOnce:
    """A hub whose `stall`-th `GET /peers` never answers; it notices when that socket closes."""

    def __init__(self, stall: int = 1) -> None:
        self.stall = stall
        self.requests = 0
        self.stalled_socket_closed = asyncio.Event()

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # keep-alive: bounded by the client closing, or the block ending
            await read_request(reader)
            self.requests += 1
            if self.requests == self.stall:
                # Stalled: wait (bounded) for the client to give the socket up.
                await asyncio.wait_for(reader.read(1), 10)
                self.stalled_socket_closed.set()
                return
            body = json.dumps({"peers": ROSTER}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()


async def test_after_one_stalled_lookup_timed_out_the_next_one_asks_the_recovered_hub() -> None:
    hub = StallsOnce()
    async with RawServer(hub) as server:
        directory = HubDirectory(server.url, timeout=0.3)
        with pytest.raises(DirectoryError, match="did not answer"):
            await directory.peers()
        # Riding on the stalled request would raise DirectoryError again, 0.3 s from now.
        assert [p.name for p in await directory.peers()] == ["a"]
        assert hub.requests == 2
        # The stalled request was given up: its socket closed, not left hanging.
        await asyncio.wait_for(hub.stalled_socket_closed.wait(), 10)
        await directory.aclose()


async def test_when_every_rider_of_a_stalled_lookup_timed_out_the_flight_is_forgotten() -> None:
    hub = StallsOnce()
    async with RawServer(hub) as server:
        directory = HubDirectory(server.url, timeout=0.3)
        riders = [asyncio.ensure_future(directory.peers()) for _ in range(5)]
        outcomes = await asyncio.gather(*riders, return_exceptions=True)
        assert all(isinstance(o, DirectoryError) for o in outcomes), outcomes
        assert hub.requests == 1, "riders should have shared the one request"
        assert (await directory.lookup("a")) is not None
        assert hub.requests == 2
        await asyncio.wait_for(hub.stalled_socket_closed.wait(), 10)
        await directory.aclose()


async def test_a_background_refresh_that_stalls_ends_at_its_own_deadline() -> None:
    hub = StallsOnce(stall=2)
    clock = FakeClock()
    async with RawServer(hub) as server:
        directory = HubDirectory(server.url, timeout=0.3, max_age=1, clock=clock)
        assert [p.name for p in await directory.peers()] == ["a"]
        clock.advance(0.6)
        assert [p.name for p in await directory.peers()] == ["a"]  # refresh starts, stalls
        # Nobody waits for it, yet it is given up at its own deadline, socket and all.
        await asyncio.wait_for(hub.stalled_socket_closed.wait(), 10)
        clock.advance(0.6)  # the roster is now too old: this lookup asks anew
        assert [p.name for p in await directory.peers()] == ["a"]
        assert hub.requests == 3
        await directory.aclose()
