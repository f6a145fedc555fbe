"""Issue 16.4: one stalled `GET /peers` must not poison a `HubDirectory` for later lookups.

A raw loopback hub stalls the first request it gets and answers every later
one; the directory must give up on the stalled request (and its socket), and
a later lookup must open a new request that the recovered hub answers.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from coreagent_sdk import FakeClock, HostAllowList, HubDirectory
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


# --- what one decoded roster lends the next (issue 16.13) ---------------------------


def _row(name: str, endpoint: str, **extra: object) -> dict[str, object]:
    return {
        "registration_id": f"reg-{name}",
        "name": name,
        "endpoint": endpoint,
        "registered_at": "2026-01-01T00:00:00Z",
        "last_heartbeat": "2026-01-01T00:00:00Z",
        "lease_expires_at": "2026-01-01T00:01:00Z",
        **extra,
    }


class ScriptedHub:
    """An in-process hub answering `GET /peers` with whatever rows the test set last."""

    def __init__(self, rows: list[object]) -> None:
        self.rows = rows
        self.requests = 0
        self.transport = httpx.MockTransport(self.answer)

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        return httpx.Response(200, content=json.dumps({"peers": self.rows}).encode())


def _directory(hub: ScriptedHub, **kwargs: object) -> HubDirectory:
    return HubDirectory("http://hub.test", transport=hub.transport, **kwargs)  # type: ignore[arg-type]


async def test_a_row_that_turns_hostile_under_a_name_accepted_before_is_refused() -> None:
    hub = ScriptedHub([_row("a", "http://127.0.0.1:9"), _row("b", "http://127.0.0.1:10")])
    directory = _directory(hub)
    assert [p.name for p in await directory.peers()] == ["a", "b"]
    hub.rows[1] = _row("b", 10)  # same name, same place: an endpoint that is not a string
    with pytest.raises(DirectoryError, match="endpoint"):
        await directory.peers()
    hub.rows[1] = _row("b", "http://127.0.0.1:10", labels={"k": ["not", "a", "string"]})
    with pytest.raises(DirectoryError, match="labels"):
        await directory.peers()
    await directory.aclose()


async def test_an_accepted_registration_id_is_refused_once_it_holds_a_secret_sent_here() -> None:
    from coreagent_sdk import _scrub

    secret = "tok-0123456789-abcdef"
    hub = ScriptedHub([_row("a", "http://127.0.0.1:9", registration_id=f"reg-{secret}")])
    directory = _directory(hub)
    with _scrub.scoped():  # the secret is this test's own: later tests do not scrub it
        assert [p.name for p in await directory.peers()] == ["a"]  # not a secret yet
        _scrub.register(secret)  # e.g. another HubDirectory(token=...) in this process
        with pytest.raises(DirectoryError, match="credential"):
            await directory.peers()  # the same bytes: checked again, not reused
    await directory.aclose()


async def test_changing_the_allowed_hosts_filters_an_unchanged_roster_anew() -> None:
    hub = ScriptedHub([_row("a", "http://127.0.0.1:9"), _row("b", "http://localhost:10")])
    directory = _directory(hub)
    assert [p.name for p in await directory.peers()] == ["a", "b"]
    directory.allowed_hosts = HostAllowList(["127.0.0.1"])
    assert [p.name for p in await directory.peers()] == ["a"]
    await directory.aclose()


async def test_rows_that_change_move_or_go_are_read_afresh_and_only_those(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coreagent_sdk._attach import _wire

    checked = 0
    from_dict = _wire.PeerRecord.from_dict.__func__  # type: ignore[attr-defined]

    def counting(cls: type, d: object) -> object:
        nonlocal checked
        checked += 1
        return from_dict(cls, d)

    monkeypatch.setattr(_wire.PeerRecord, "from_dict", classmethod(counting))
    hub = ScriptedHub([_row(f"p-{i}", f"http://127.0.0.1:{1000 + i}") for i in range(100)])
    directory = _directory(hub)

    async def endpoints() -> dict[str, str]:
        return {p.name: p.endpoint for p in await directory.peers()}

    assert len(await endpoints()) == 100 and checked == 100
    checked = 0
    hub.rows[50] = _row("p-50", "http://127.0.0.1:7")  # changed in place
    hub.rows.insert(0, _row("p-00", "http://127.0.0.1:8"))  # a new one: the rest move
    del hub.rows[-1]  # one gone
    got = await endpoints()
    assert checked == 2, f"{checked} rows checked; only the changed and the new one differ"
    assert got["p-50"] == "http://127.0.0.1:7"
    assert got["p-00"] == "http://127.0.0.1:8"
    assert "p-99" not in got and got["p-98"] == "http://127.0.0.1:1098"
    assert list(got) == [r["name"] for r in hub.rows]  # type: ignore[index]
    assert hub.requests == 2
    await directory.aclose()
