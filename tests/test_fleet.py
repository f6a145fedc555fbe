"""`Fleet`: peers that stay registered as long as they are part of the fleet, and serving."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
from datetime import datetime

import httpx
import pytest

from coreagent_sdk import FakeClock
from coreagent_sdk.errors import (
    LoopBlockedError,
    PeerRateLimitedError,
    PeerTimeoutError,
    PeerTurnError,
    UnknownPeerError,
)
from simulator import MAX_TTL, Faults, Fleet, SessionRateLimit, Turn, behaviors


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def listed(fleet: Fleet) -> dict[str, dict[str, str]]:
    """The hub's `GET /peers`, over HTTP in-process, by name."""
    async with httpx.AsyncClient(transport=fleet.transport) as http:
        answer = await http.get(f"{fleet.hub_url}/peers")
    return {p["name"]: p for p in answer.json()["peers"]}


@pytest.fixture
async def clocked():
    clock = FakeClock()
    fleet = Fleet(clock=clock)
    fleet.add_peer("prod-1", behaviors.reply("ok"), ttl=30)
    fleet.add_peer("prod-2", behaviors.reply("ok"))
    try:
        yield fleet, clock
    finally:
        await fleet.aclose()


async def test_fleet_peers_stay_registered_for_an_hour_of_fake_time(clocked) -> None:
    fleet, clock = clocked
    tool = fleet.call_peer(timeout=5)
    clock.advance(3600)
    assert (await tool.acall(peer="prod-1", prompt="still there?")).response == "ok"
    assert (await tool.acall(peer="prod-2", prompt="still there?")).response == "ok"
    rows = await listed(fleet)
    assert sorted(rows) == ["prod-1", "prod-2"]
    # As a heartbeat every third of the lease would have left it: the last beat is
    # at most ttl/3 ago and the lease runs a full ttl from that beat.
    beat = stamp(rows["prod-1"]["last_heartbeat"])
    assert clock.now() - 10 <= beat <= clock.now()
    assert stamp(rows["prod-1"]["lease_expires_at"]) == pytest.approx(beat + 30, abs=0.002)


async def test_keeping_leases_alive_runs_no_task_and_no_request_while_idle(clocked) -> None:
    fleet, clock = clocked
    tasks_before = len(asyncio.all_tasks())
    clock.advance(3600)
    await asyncio.sleep(0)
    assert clock.sleepers == 0
    assert len(asyncio.all_tasks()) == tasks_before
    assert all(not d._tasks for d in fleet.daemons.values())
    assert fleet.registry.lookup("prod-1") is not None


async def test_on_the_system_clock_a_one_second_lease_outlives_its_ttl() -> None:
    fleet = Fleet()
    fleet.add_peer("quick", behaviors.reply("here"), ttl=1)
    tool = fleet.call_peer(timeout=5)
    try:
        await asyncio.sleep(1.3)  # past the lease: only a renewal keeps it
        assert (await tool.acall(peer="quick", prompt="there?")).response == "here"
        assert "quick" in await listed(fleet)
    finally:
        await fleet.aclose()


async def test_an_expired_peer_stays_gone_until_revived(clocked) -> None:
    fleet, clock = clocked
    tool = fleet.call_peer(timeout=5)
    first_id = fleet.registry.lookup("prod-1").registration_id
    assert fleet.expire("prod-1") is True
    with pytest.raises(UnknownPeerError, match='unknown peer "prod-1"'):
        await tool.acall(peer="prod-1", prompt="hello?")
    clock.advance(3600)
    assert sorted(await listed(fleet)) == ["prod-2"]
    fleet.revive("prod-1")
    assert (await tool.acall(peer="prod-1", prompt="back?")).response == "ok"
    assert fleet.registry.lookup("prod-1").registration_id != first_id
    clock.advance(3600)
    assert sorted(await listed(fleet)) == ["prod-1", "prod-2"]


async def test_a_peer_added_without_heartbeats_lapses_after_its_ttl(clocked) -> None:
    fleet, clock = clocked
    fleet.add_peer("mute", behaviors.reply("ok"), ttl=20, heartbeat=False)
    clock.advance(19)
    assert "mute" in await listed(fleet)
    clock.advance(1)
    assert "mute" not in await listed(fleet)
    with pytest.raises(UnknownPeerError, match='unknown peer "mute"'):
        await fleet.call_peer(timeout=5).acall(peer="mute", prompt="hello?")


async def test_a_ttl_over_five_minutes_is_clamped_as_the_hub_does(clocked) -> None:
    fleet, clock = clocked
    fleet.add_peer("long", ttl=3600, heartbeat=False)
    row = (await listed(fleet))["long"]
    assert stamp(row["lease_expires_at"]) - stamp(row["registered_at"]) == pytest.approx(MAX_TTL)
    clock.advance(MAX_TTL)
    assert "long" not in await listed(fleet)


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), "60", True])
def test_a_ttl_that_is_not_a_positive_number_is_refused(ttl) -> None:
    with pytest.raises(ValueError, match=r"simulator: ttl must be a positive number"):
        Fleet().add_peer("p", ttl=ttl)


async def test_removing_a_peer_deregisters_it_and_stops_its_daemon(clocked) -> None:
    fleet, _ = clocked
    fleet.add_peer("doomed", behaviors.never_finish())
    tool = fleet.call_peer(timeout=5)
    task = asyncio.ensure_future(tool.acall(peer="doomed", prompt="work forever"))
    for _ in range(200):
        if fleet.daemons["doomed"]._tasks:
            break
        await asyncio.sleep(0.005)
    daemon = fleet.daemons["doomed"]
    running = list(daemon._tasks)
    assert running
    fleet.remove_peer("doomed")
    assert "doomed" not in await listed(fleet)
    assert "doomed" not in fleet.daemons
    await asyncio.gather(*running, return_exceptions=True)
    assert all(t.done() for t in running)
    with pytest.raises(Exception):  # noqa: B017,PT011 - the stream ended or the peer is gone
        await asyncio.wait_for(task, 5)
    async with httpx.AsyncClient(transport=fleet.transport) as http:
        with pytest.raises(httpx.TransportError, match=r"no transport for host 'doomed\.sim'"):
            await http.get("http://doomed.sim/whoami")
    with pytest.raises(KeyError, match="cannot remove 'doomed'"):
        fleet.remove_peer("doomed")
    fleet.add_peer("doomed", behaviors.reply("again"))  # the name is free again
    assert (await tool.acall(peer="doomed", prompt="hi")).response == "again"


def test_reviving_a_name_that_is_not_a_fleet_peer_says_so() -> None:
    with pytest.raises(KeyError, match=r"cannot revive 'ghost'.*add it with add_peer"):
        Fleet().revive("ghost")


async def test_expiring_a_name_the_fleet_does_not_know_raises_as_faults_does(clocked) -> None:
    fleet, _ = clocked
    with pytest.raises(KeyError, match=r"cannot expire 'prod-l'.*peers: prod-1, prod-2"):
        fleet.expire("prod-l")
    with pytest.raises(KeyError, match="no daemon named 'prod-l'"):
        fleet.faults("prod-l")
    assert fleet.expire("prod-1") is True
    # A known peer whose lease is gone already is no mistake: False says nothing lapsed.
    assert fleet.expire("prod-1") is False


async def test_a_registration_that_is_not_a_fleet_peer_can_still_be_expired(clocked) -> None:
    fleet, _ = clocked
    fleet.registry.register("outsider", "http://127.0.0.1:9", {}, 30)
    assert fleet.expire("outsider") is True
    assert "outsider" not in await listed(fleet)


def test_the_fleets_clock_is_read_only_and_the_error_says_where_to_pass_one() -> None:
    fleet = Fleet()
    before = fleet.clock
    with pytest.raises(AttributeError, match=r"Fleet.clock is read-only.*Fleet\(clock=FakeClock"):
        fleet.clock = FakeClock()  # type: ignore[misc]
    assert fleet.clock is before
    clock = FakeClock()
    assert Fleet(clock=clock).clock is clock


async def test_reset_heals_faults_brings_leases_back_and_stops_turns(clocked) -> None:
    fleet, clock = clocked
    fleet.add_peer("mute", behaviors.reply("ok"), ttl=20, heartbeat=False)
    stopped: list[str] = []

    async def hangs(turn: Turn) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append(turn.prompt)

    fleet.add_peer("stuck", hangs)
    tool = fleet.call_peer(timeout=0.3)
    fleet.faults("prod-1").error_status = 503
    fleet.faults("hub").latency = 0.01
    expired_id = fleet.registry.lookup("prod-2").registration_id
    fleet.expire("prod-2")
    clock.advance(21)  # mute's lease lapses
    with pytest.raises(PeerTimeoutError):
        await tool.acall(peer="stuck", prompt="hang")
    assert stopped == []
    assert sorted(await listed(fleet)) == ["prod-1", "stuck"]

    fleet.reset()

    for _ in range(100):  # the cancelled turn stops within a few loop turns (bounded)
        if stopped:
            break
        await asyncio.sleep(0.01)
    assert stopped == ["hang"]
    assert fleet.faults("prod-1") == Faults() and fleet.faults("hub") == Faults()
    assert sorted(await listed(fleet)) == ["mute", "prod-1", "prod-2", "stuck"]
    assert fleet.registry.lookup("prod-2").registration_id != expired_id
    assert (await tool.acall(peer="prod-1", prompt="healed?")).response == "ok"
    clock.advance(3600)  # heartbeating peers stay; mute never heartbeats, as before
    assert sorted(await listed(fleet)) == ["prod-1", "prod-2", "stuck"]


def parse_load(text: str) -> float:
    """A buggy helper a behaviour uses: "load=0.5" -> 0.5, but it divides by zero."""
    return float(text.split("=")[1]) / 0


async def escalates_on_high_load(turn: Turn) -> None:
    if parse_load("load=0.5") > 0.9:
        await turn.error("rate_limited", "too busy")
    await turn.say("fine")


async def test_a_behaviours_exception_is_a_turn_error_and_is_re_raised_at_close() -> None:
    fleet = Fleet(raise_behavior_errors=True)
    fleet.add_peer("p", escalates_on_high_load)
    fleet.add_peer("q", behaviors.fail(kind="rate_limited"))  # an intended turn error
    tool = fleet.call_peer(timeout=5)
    with pytest.raises(PeerTurnError) as info:
        await tool.acall(peer="p", prompt="load?")
    assert info.value.kind == "unknown" and "ZeroDivisionError" in info.value.message
    with pytest.raises(PeerTurnError):
        await tool.acall(peer="q", prompt="x")
    assert [type(e) for e in fleet.behavior_errors] == [ZeroDivisionError]
    with pytest.raises(ZeroDivisionError) as raised:
        await fleet.aclose()
    frames = [entry.name for entry in raised.traceback]
    assert frames[-2:] == ["escalates_on_high_load", "parse_load"]
    await fleet.aclose()  # raised once: what was raised is forgotten


def test_without_the_option_a_behaviours_exception_stays_a_turn_error_only() -> None:
    fleet = Fleet()
    fleet.add_peer("p", escalates_on_high_load)
    with pytest.raises(PeerTurnError, match="ZeroDivisionError"):
        fleet.call_peer(timeout=5)(peer="p", prompt="load?")
    assert fleet.behavior_errors == []
    fleet.close()  # nothing re-raised


def test_closing_a_fleet_from_sync_code_re_raises_a_behaviours_exception() -> None:
    fleet = Fleet(raise_behavior_errors=True)
    fleet.add_peer("p", escalates_on_high_load)
    with pytest.raises(PeerTurnError):
        fleet.call_peer(timeout=5)(peer="p", prompt="load?")
    with pytest.raises(ZeroDivisionError):
        fleet.close()
    with pytest.raises(PeerTurnError):
        fleet.call_peer(timeout=5)(peer="p", prompt="again")
    assert len(fleet.behavior_errors) == 1
    fleet.reset()  # a shared fleet forgets them between tests
    assert fleet.behavior_errors == []
    fleet.close()


# --- served ------------------------------------------------------------------


async def test_in_process_and_loopback_calls_to_a_served_fleet_both_work_in_either_order() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.echo())
    before = fleet.call_peer(timeout=5)
    hub_before = fleet.call_peer(timeout=5, directory=fleet.directory())
    try:
        served = await fleet.serve()
        after = fleet.call_peer(timeout=5)
        over = served.call_peer(timeout=5)
        for tool in (before, over, after, hub_before, over, before):
            result = await tool.acall(peer="prod-1", prompt="ping")
            assert result.response == "ping"
        assert (await listed(fleet))["prod-1"]["endpoint"] == served.urls["prod-1"]
        fleet.add_peer("late", behaviors.reply("late"))  # added while served: in-process
        assert (await after.acall(peer="late", prompt="hi")).response == "late"
        await served.aclose()
        assert (await listed(fleet))["prod-1"]["endpoint"] == fleet.url("prod-1")
        assert (await before.acall(peer="prod-1", prompt="again")).response == "again"
    finally:
        await fleet.aclose()


async def test_removing_a_served_peer_closes_its_socket() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.echo())
    fleet.add_peer("prod-2", behaviors.echo())
    try:
        served = await fleet.serve()
        url = served.urls["prod-2"]
        over = served.call_peer(timeout=5)
        assert (await over.acall(peer="prod-2", prompt="x")).response == "x"
        await over.aclose()
        fleet.remove_peer("prod-2")
        with pytest.raises(UnknownPeerError):
            await over.acall(peer="prod-2", prompt="x")
        assert "prod-2" not in served.urls
        for _ in range(100):  # the server winds down within a moment
            try:
                async with httpx.AsyncClient() as http:
                    await http.get(f"{url}/whoami", timeout=1)
            except httpx.TransportError:
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail(f"{url} still answers after remove_peer")
    finally:
        await fleet.aclose()


async def test_tools_a_fleet_hands_out_close_with_the_fleet() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.echo())
    served = await fleet.serve()
    over = served.call_peer(timeout=5)
    await over.acall(peer="prod-1", prompt="x")
    assert over._http._clients  # a pooled loopback connection is held
    await fleet.aclose()
    assert not over._http._clients


async def test_serving_on_a_port_in_use_names_the_port_and_port_zero() -> None:
    from simulator import PortInUseError

    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.echo())
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUseError, match=rf"port {port} on 127\.0\.0\.1 .* port=0") as info:
            await fleet.serve(port=port)
    assert isinstance(info.value, OSError) and info.value.port == port
    assert info.value.__cause__ is None and info.value.__suppress_context__
    served = await fleet.serve()  # nothing was left half-served
    assert set(served.urls) == {"hub", "prod-1"}
    await fleet.aclose()


@pytest.mark.parametrize("port", [-1, 65535, True, "8844"])
async def test_serving_on_a_port_out_of_range_is_refused_before_binding(port) -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1")
    with pytest.raises(ValueError, match=r"port to be 0 .* up to 65535"):
        await fleet.serve(port=port)


async def test_a_sync_call_over_sockets_from_the_serving_loop_fails_at_once_with_the_fix() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.echo())
    served = await fleet.serve()
    over = served.call_peer(timeout=2)
    try:
        # This loop serves the fleet and would wait for the sync call: nothing could answer.
        with pytest.raises(LoopBlockedError, match=r"is served on the loop that is waiting") as i:
            over(peer="prod-1", prompt="hello")
        assert "await tool.acall(...)" in str(i.value)
        assert "enable_nested_sync()" in str(i.value)
        # One error, not a chain ending in another class (it used to read as DirectoryError).
        assert i.value.__cause__ is None and i.value.__context__ is None
        assert isinstance(i.value, RuntimeError)
        # The same tool still works awaited, and so does a sync in-process call.
        assert (await over.acall(peer="prod-1", prompt="awaited")).response == "awaited"
        assert fleet.call_peer(timeout=2)(peer="prod-1", prompt="in-process").response == (
            "in-process"
        )
    finally:
        await fleet.aclose()


def test_a_sync_call_over_sockets_from_another_thread_still_reaches_a_served_fleet() -> None:
    import threading

    answers: list[str] = []

    async def serve_and_call_from_a_thread() -> None:
        fleet = Fleet()
        fleet.add_peer("prod-1", behaviors.echo())
        served = await fleet.serve()
        over = served.call_peer(timeout=5)
        caller = threading.Thread(
            target=lambda: answers.append(over(peer="prod-1", prompt="from a thread").response)
        )
        caller.start()
        await asyncio.to_thread(caller.join)  # this loop (the servers') keeps running meanwhile
        await fleet.aclose()

    asyncio.run(serve_and_call_from_a_thread())
    assert answers == ["from a thread"]


async def test_a_peer_that_stops_heartbeating_lapses_a_lease_after_its_last_beat(clocked) -> None:
    fleet, clock = clocked
    clock.advance(3600)  # an hour of beats that nothing has read yet
    assert fleet.registry.keep_alive("prod-1", False)  # its daemon stops heartbeating now
    assert "prod-1" in await listed(fleet)
    clock.advance(30)  # its ttl: the lease from its last beat has lapsed...
    clock.advance(5)  # ...and the hub's 5 s prune tick has come
    assert sorted(await listed(fleet)) == ["prod-2"]


INLINE_TOOLS = """
import asyncio, gc, sys

from simulator import Fleet, behaviors

caught = []
sys.unraisablehook = lambda event: caught.append(str(event.exc_value))


async def main():
    fleet = Fleet()
    fleet.add_peer("p", behaviors.echo())
    async with await fleet.serve() as served:
        assert (await served.call_peer(timeout=5).acall(peer="p", prompt="x")).response == "x"
        assert [p.name for p in await served.directory().peers()] == ["p"]
        gc.collect()
    await fleet.aclose()


asyncio.run(main())
gc.collect()
print(caught)
"""


def test_served_tools_and_directories_used_inline_leave_no_socket_open() -> None:
    # Tools nobody keeps are collected right after the call: their connections must be the
    # served fleet's, closed with it (before, each one's unclosed sockets were reported).
    done = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", "-c", INLINE_TOOLS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_closing_a_served_fleet_from_sync_code_stops_its_servers() -> None:
    fleet = Fleet()
    fleet.add_peer("p", behaviors.echo())
    loop = asyncio.new_event_loop()
    try:
        served = loop.run_until_complete(fleet.serve())
        port = int(served.urls["p"].rsplit(":", 1)[1])
        fleet.close()  # a sync fixture's teardown: the serving loop is idle
        with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
            probe.connect(("127.0.0.1", port))
    finally:
        loop.close()


async def test_a_fleet_with_session_rate_limit_true_limits_like_the_daemon_and_never_answers_500():
    fleet = Fleet(session_rate_limit=True)
    fleet.add_peer("p", behaviors.echo())
    try:
        assert fleet.session_rate_limit == SessionRateLimit()
        tool = fleet.call_peer(timeout=5)
        answers = [(await tool.acall(peer="p", prompt=f"n{i}")).response for i in range(5)]
        assert answers == [f"n{i}" for i in range(5)]  # the daemon's burst of 5
        with pytest.raises(PeerRateLimitedError):
            await tool.acall(peer="p", prompt="one too many")
    finally:
        await fleet.aclose()


def test_session_rate_limit_false_or_none_is_off_on_the_fleet_and_on_a_peer() -> None:
    for off in (False, None):
        fleet = Fleet(session_rate_limit=off)
        assert fleet.session_rate_limit is None
        assert fleet.add_peer("p", behaviors.echo()).rate_limiter is None
        limited = Fleet(session_rate_limit=SessionRateLimit(burst=2))
        assert limited.add_peer("q", session_rate_limit=off).rate_limiter is None
        assert limited.add_peer("r").rate_limiter is not None


@pytest.mark.parametrize("bad", [1, 5.0, "5/min", {"burst": 5}, (10, 5)])
def test_a_session_rate_limit_that_is_not_one_is_refused_at_construction(bad: object) -> None:
    with pytest.raises(ValueError, match=r"session_rate_limit.*SessionRateLimit\(") as refused:
        Fleet(session_rate_limit=bad)  # type: ignore[arg-type]
    assert repr(bad) in str(refused.value)
    fleet = Fleet()
    with pytest.raises(ValueError, match=r"session_rate_limit.*SessionRateLimit\("):
        fleet.add_peer("p", session_rate_limit=bad)  # type: ignore[arg-type]
    assert "p" not in fleet.daemons


def test_a_fleet_repr_names_twenty_peers_quoted_and_counts_the_rest() -> None:
    fleet = Fleet()
    for i in range(20):
        fleet.add_peer(f"p{i:02d}", behaviors.echo())
    assert repr(fleet).endswith('"p18", "p19"])')
    fleet.add_peer("p20", behaviors.echo())
    shown = repr(fleet)
    assert shown.startswith('Fleet(hub=\'http://hub.sim\', peers=["p00", "p01", ')
    assert shown.endswith('"p19", +1 more])')
    assert len(shown) < 300


# --- served with the daemon's header limits ---------------------------------------------------


async def exchange(url: str, chunks: list[bytes], pause: float = 0.0) -> bytes:
    """Send raw `chunks` to a loopback `url` and read until EOF (bounded: 10 s)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(pause)
        return await asyncio.wait_for(reader.read(-1), 10)
    finally:
        writer.close()


def sized_request(total: int) -> bytes:
    """`GET /whoami` whose request line and headers are exactly `total` bytes."""
    head = b"GET /whoami HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: "
    tail = b"\r\nConnection: close\r\n\r\n"
    return head + b"a" * (total - len(head) - len(tail)) + tail


async def test_bind_a_served_fleets_hub_and_peers_read_headers_with_the_daemons_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pins `pkg/attach/server.go` `Bind` (net/http's 1 MiB + 4 KiB, 431, ReadHeaderTimeout)
    on `Fleet.serve()`, as on a served host: the simulator's daemons face the same sockets."""
    from coreagent_sdk.host import MAX_HEADER_BYTES, READ_HEADER_TIMEOUT, uvicorn_options

    assert (MAX_HEADER_BYTES, READ_HEADER_TIMEOUT) == ((1 << 20) + 4096, 10.0)
    timeout = 0.4  # the daemon's 10 s, shortened for the test
    monkeypatch.setattr(uvicorn_options()["http"], "read_header_timeout", timeout)
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.echo())
    served = await fleet.serve()
    try:
        for url in (served.hub_url, served.urls["prod-1"]):
            at_limit = sized_request(MAX_HEADER_BYTES)
            past = sized_request(MAX_HEADER_BYTES + 1)
            assert (await exchange(url, [at_limit])).startswith(b"HTTP/1.1 200 ")
            assert (await exchange(url, [past[:65536], past[65536:]])).startswith(
                b"HTTP/1.0 431 Request Header Fields Too Large\r\n"
            )
            started = asyncio.get_running_loop().time()
            assert await exchange(url, [b"GET /whoami HTTP/1.1\r\n"]) == b""  # closed, no answer
            assert timeout * 0.8 <= asyncio.get_running_loop().time() - started < 5
    finally:
        await fleet.aclose()


# --- the fleet's one store: closed by the sync close, and rid of a removed peer's rows -----


def _rows_of(fleet: Fleet, key: str) -> int:
    # The store's own file, read beside it: a host given the key later would find these.
    import sqlite3

    path = fleet.store._file._db[0].path
    with contextlib.closing(sqlite3.connect(path)) as db:
        return sum(
            db.execute(f"SELECT count(*) FROM {table} WHERE agent = ?", (key,)).fetchone()[0]
            for table in ("sessions", "events", "counters")
        )


def _store_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("coreagent-host-store")}


def test_the_sync_close_closes_the_fleets_store_and_its_worker_thread() -> None:
    before = _store_threads()  # other fleets' (a finalizer may not have run for them yet)
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())

    async def use() -> None:
        async with fleet.call_peer(timeout=10) as tool:
            await tool.acall(peer="echo", prompt="hi")

    asyncio.run(use())
    assert fleet.store.opened
    path = fleet.store._file._db[0].path
    fleet.close()
    assert not fleet.store.opened  # not left to a finalizer
    assert not os.path.exists(path)  # a temporary store's file is removed with it
    assert not _store_threads() - before


async def test_removing_a_peer_removes_its_sessions_from_the_fleets_store() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    fleet.add_peer("other", behaviors.echo())
    async with fleet.call_peer(timeout=10, delete_sessions=False) as tool:
        for peer in ("echo", "other"):
            await tool.acall(peer=peer, prompt="hi")
        assert _rows_of(fleet, "echo") > 0
        fleet.remove_peer("echo")
        assert _rows_of(fleet, "echo") == 0  # at once: sessions, events, counters
        assert _rows_of(fleet, "other") > 0  # the others keep theirs
        fleet.add_peer("echo", behaviors.echo())  # a new daemon under the name
        assert (await tool.acall(peer="echo", prompt="again")).response == "again"
    await fleet.aclose()
