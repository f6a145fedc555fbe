"""Issue 16.3, 16.5, 16.6: a joined fleet (`Fleet(hub=URL)`) against one odd hub.

The hub here is a raw loopback server (`ScriptedHub`) that answers each
request the fleet's membership pipelines to it from a script, so a test
chooses exactly one odd answer (a header line over 8 KiB, naive and aware
timestamps side by side, a 503, a 401 that echoes the request back) and checks
that the fleet's peers keep their leases, that `serve()` fails typed or not at
all, that `aclose()` stops every server, and that no secret leaves the process
in a message. The fleet's clock is a `FakeClock`: leases and retries move only
when a test advances it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest

from coreagent_sdk import FakeClock
from simulator import Fleet, behaviors
from simulator._join import HubMembership, JoinError

from ..canary import CANARY
from ..processes import reap, timed_exit
from .servers import RawServer, read_request

Answer = Callable[[str, str, dict[str, str], bytes], bytes]

AWARE = "2026-01-01T00:00:00Z"


def record(
    name: str, rid: str, *, beat: str = AWARE, expires: str = "2026-01-01T00:00:03Z"
) -> bytes:
    return json.dumps(
        {
            "registration_id": rid,
            "name": name,
            "endpoint": "http://127.0.0.1:9",
            "labels": {},
            "registered_at": AWARE,
            "last_heartbeat": beat,
            "lease_expires_at": expires,
        }
    ).encode()


def http(status: str, body: bytes = b"", extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1") + body


def plain(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
    """A well-behaved hub: registers (3 s leases), renews, deregisters."""
    if method == "POST" and target == "/peers":
        name = json.loads(body)["name"]
        return http("201 Created", record(name, f"reg-{name}"))
    if target.endswith("/heartbeat"):
        name = target.split("/")[2].removeprefix("reg-")
        return http("200 OK", record(name, f"reg-{name}"))
    if method == "DELETE":
        return http("204 No Content")
    return http("404 Not Found", b"{}")


class ScriptedHub:
    """Answers each request with `script` (default: `plain`); keeps what it was sent."""

    def __init__(self, clock: FakeClock, script: Answer = plain) -> None:
        self.clock = clock
        self.script = script
        self.seen: list[tuple[float, str, str, dict[str, str]]] = []

    def count(self, method: str, suffix: str = "") -> int:
        return sum(1 for _, m, t, _ in self.seen if m == method and t.endswith(suffix))

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(10_000):  # bounded: a keep-alive connection carries many requests
            method, target, headers, body = await read_request(reader)
            self.seen.append((self.clock.now(), method, target, headers))
            writer.write(self.script(method, target, headers, body))
            await writer.drain()


async def settle(clock: FakeClock, check: Callable[[], bool] = lambda: True) -> None:
    """Wait (bounded, real time) until the keeper sleeps on the clock again and `check` holds."""
    for _ in range(2000):  # at most ~2 s
        if clock.sleepers >= 1 and check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the membership's keeper did not come back to sleep")


async def run_for(clock: FakeClock, seconds: float, step: float = 0.25) -> None:
    for _ in range(round(seconds / step)):
        clock.advance(step)
        await settle(clock)


# --- 16.3a: no odd answer stops the heartbeats, breaks serve() or aclose() ----------------


async def test_a_heartbeat_answer_with_a_header_line_over_8_kib_does_not_stop_the_heartbeats() -> (
    None
):
    clock = FakeClock()
    beats = 0

    def odd_once(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        nonlocal beats
        if target.endswith("/heartbeat"):
            beats += 1
            if beats == 1:
                return http("200 OK", record("p", "reg-p"), f"X-Big: {'a' * 9000}\r\n")
        return plain(method, target, headers, body)

    hub = ScriptedHub(clock, odd_once)
    async with RawServer(hub) as server:
        fleet = Fleet(hub=server.url, clock=clock)
        fleet.add_peer("p", behaviors.echo(), ttl=3)
        async with await fleet.serve() as served:
            membership = served.membership
            assert membership is not None
            await settle(clock)
            await run_for(clock, 6)
            assert hub.count("POST", "/heartbeat") >= 3, hub.seen
            assert membership.heartbeats >= 2  # the ones after the odd answer were kept
        await fleet.aclose()


async def test_naive_and_aware_timestamps_side_by_side_neither_break_serve_nor_heartbeats() -> None:
    clock = FakeClock()

    def mixed(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        if method == "POST":
            name = "p"
            # A naive expiry beside an aware heartbeat: Python cannot subtract them.
            return http(
                "201 Created" if target == "/peers" else "200 OK",
                record(name, "reg-p", expires="2026-01-01T00:00:03"),
            )
        return plain(method, target, headers, body)

    hub = ScriptedHub(clock, mixed)
    async with RawServer(hub) as server:
        fleet = Fleet(hub=server.url, clock=clock)
        fleet.add_peer("p", behaviors.echo(), ttl=3)
        async with await fleet.serve() as served:
            assert served.membership is not None
            await settle(clock)
            await run_for(clock, 3)  # the requested 3 s lease: a beat every second
            assert hub.count("POST", "/heartbeat") >= 2
        await fleet.aclose()


async def test_aclose_after_an_odd_deregistration_answer_stops_every_server() -> None:
    clock = FakeClock()

    def odd_goodbye(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        if method == "DELETE":
            return http("204 No Content", b"", f"X-Big: {'a' * 9000}\r\n")
        return plain(method, target, headers, body)

    hub = ScriptedHub(clock, odd_goodbye)
    async with RawServer(hub) as server:
        fleet = Fleet(hub=server.url, clock=clock)
        fleet.add_peer("p", behaviors.echo())
        served = await fleet.serve()
        port = int(served.urls["p"].rsplit(":", 1)[1])
        await served.aclose()  # must not raise
        assert hub.count("DELETE") == 1
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        await fleet.aclose()


# --- 16.3b: a password in the hub URL ----------------------------------------------------


async def test_a_password_in_the_hub_url_is_never_shown_nor_sent_as_the_host() -> None:
    clock = FakeClock()

    def echoes_everything(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        return http("401 Unauthorized", json.dumps({"error": "no", "saw": headers}).encode())

    hub = ScriptedHub(clock, echoes_everything)
    async with RawServer(hub) as server:
        url = f"http://bob:{CANARY}@127.0.0.1:{server.port}"
        fleet = Fleet(hub=url, clock=clock)
        fleet.add_peer("p", behaviors.echo())
        assert CANARY not in repr(fleet)
        with pytest.raises(JoinError) as caught:
            await fleet.serve()
        assert CANARY not in str(caught.value)
        assert "401" in str(caught.value)
        assert hub.seen[0][3]["host"] == f"127.0.0.1:{server.port}"
        await fleet.aclose()


# --- 16.3d: a failing hub is retried with a jittered backoff, not at a flat second --------


async def beat_times(random: Callable[[], float], seconds: float) -> list[float]:
    """When heartbeats reached a hub that answers every one with 503 (the lease: 60 s)."""
    clock = FakeClock()

    def down(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        if target.endswith("/heartbeat"):
            return http("503 Service Unavailable", b"{}")
        return http("201 Created", record("p", "reg-p", expires="2026-01-01T00:01:00Z"))

    hub = ScriptedHub(clock, down)
    async with RawServer(hub) as server:
        membership = HubMembership(server.url, clock=clock, random=random)
        try:
            await membership.join([("p", "http://127.0.0.1:9", {}, 60, None)])
            await settle(clock)
            await run_for(clock, seconds)
        finally:
            await membership.aclose(deregister=False)
    return [t - clock.now() + seconds for t, m, target, _ in hub.seen if "heartbeat" in target]


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 2) for a, b in itertools.pairwise(times)]


async def test_failed_heartbeats_back_off_doubling_from_one_second_up_to_the_interval() -> None:
    # The first beat is due at a third of the 60 s lease; then every retry fails.
    low = await beat_times(lambda: 0.0, 90)
    assert low[0] == 20.0
    assert gaps(low) == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0, 10.0][: len(low) - 1]
    assert len(low) >= 8
    high = await beat_times(lambda: 0.5, 90)
    assert gaps(high)[:6] == [1.5, 3.0, 6.0, 12.0, 15.0, 15.0]


async def test_peers_failing_together_spread_their_retries_and_never_beat_under_a_second() -> None:
    clock = FakeClock()

    def down(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        if target.endswith("/heartbeat"):
            return http("503 Service Unavailable", b"{}")
        name = json.loads(body)["name"]
        return http("201 Created", record(name, f"reg-{name}", expires="2026-01-01T00:00:12Z"))

    hub = ScriptedHub(clock, down)
    draws = iter([i / 50 for i in range(50)] * 100)  # bounded, spread evenly over [0, 1)
    async with RawServer(hub) as server:
        membership = HubMembership(server.url, clock=clock, random=lambda: next(draws))
        peers = [(f"p{i}", "http://127.0.0.1:9", {}, 12.0, None) for i in range(50)]
        try:
            await membership.join(peers)
            await settle(clock)
            await run_for(clock, 32)  # the first beats at 4 s (a third of 12), then 28 s of retries
        finally:
            await membership.aclose(deregister=False)
    beats = hub.count("POST", "/heartbeat")
    # A flat 1 s retry sends 50 a second: about 1,400 in the 28 s after the first beats.
    # Backing off (1-2 s, then 2-4 s up to the 4 s interval) sends 7.5 to 14.5 per peer.
    assert 50 * 7 <= beats <= 50 * 15, beats
    by_peer: dict[str, list[float]] = {}
    for t, _, target, _ in hub.seen:
        if target.endswith("/heartbeat"):
            by_peer.setdefault(target.split("/")[2], []).append(t)
    assert all(g >= 1.0 for times in by_peer.values() for g in gaps(times))
    second_tries = {round(times[1] - times[0], 2) for times in by_peer.values()}
    assert len(second_tries) > 1, "every peer retried in step"


# --- 16.5: a daemon registers with its own token (PeerClient.do, registerPeer) ------------


async def test_peers_register_with_their_own_token_and_the_hub_records_its_identity() -> None:
    """Go: `PeerClient.do` sets the daemon's bearer token; `registerPeer` records its owner."""
    home = Fleet(tokens={CANARY: "alice", "t-bob-0123456": "bob"})
    async with await home.serve() as hub:
        joined = Fleet(hub=hub.hub_url)
        joined.add_peer("a", behaviors.echo(), token=CANARY)
        joined.add_peer("b", behaviors.echo(), token="t-bob-0123456")
        async with await joined.serve():
            owners = {n: getattr(home.registry.lookup(n), "owner", None) for n in "ab"}
            assert owners == {"a": "alice", "b": "bob"}
        await joined.aclose()
    await home.aclose()


async def test_a_joined_fleet_without_a_token_is_refused_by_a_protected_hub_typed() -> None:
    home = Fleet(tokens={CANARY: "alice"})
    async with await home.serve() as hub:
        joined = Fleet(hub=hub.hub_url)
        joined.add_peer("a", behaviors.echo())
        with pytest.raises(JoinError, match=r"401.*add_peer\(token=\.\.\.\)"):
            await joined.serve()
        await joined.aclose()
    await home.aclose()


async def test_a_token_the_hub_echoes_back_is_scrubbed_from_the_join_error() -> None:
    clock = FakeClock()

    def echoes(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        saw = headers.get("authorization", "")
        return http("403 Forbidden", json.dumps({"error": f"not you: {saw}"}).encode())

    hub = ScriptedHub(clock, echoes)
    async with RawServer(hub) as server:
        fleet = Fleet(hub=server.url, clock=clock)
        fleet.add_peer("p", behaviors.echo(), token=CANARY)
        with pytest.raises(JoinError) as caught:
            await fleet.serve()
        assert hub.seen[0][3]["authorization"] == f"Bearer {CANARY}"
        assert CANARY not in str(caught.value)
        assert "403" in str(caught.value)
        await fleet.aclose()


# --- 16.6: a stopping daemon deregisters (client_register.go: RegisterAndHeartbeat) ------


async def test_removing_a_joined_peer_deregisters_it_and_reviving_one_registers_it_again() -> None:
    """Go: the cancel func `RegisterAndHeartbeat` returns deregisters; a restart registers."""
    home = Fleet()
    async with await home.serve() as hub:
        joined = Fleet(hub=hub.hub_url)
        joined.add_peer("gone", behaviors.echo())
        joined.add_peer("back", behaviors.echo())
        async with await joined.serve() as served:
            membership = served.membership
            assert membership is not None
            first = home.registry.lookup("back")
            assert first is not None
            joined.remove_peer("gone")
            for _ in range(500):  # bounded: at most ~5 s of real time
                if home.registry.lookup("gone") is None and membership.deregistrations:
                    break
                await asyncio.sleep(0.01)
            assert home.registry.lookup("gone") is None
            assert membership.deregistrations == 1
            joined.expire("back")  # stops heartbeating there; the lease would lapse
            joined.revive("back")  # a restarted daemon registers again
            for _ in range(500):
                if membership.registrations == 3:
                    break
                await asyncio.sleep(0.01)
            again = home.registry.lookup("back")
            assert again is not None and again.registration_id != first.registration_id
            assert membership.names == ["back"]
        await joined.aclose()
    await home.aclose()


# --- 16.3c: a stop signal while a stalled hub is being joined -----------------------------


class StallsSecondBatch:
    """Registers the first pipelined batch of peers, then never answers the next one."""

    def __init__(self) -> None:
        self.registered = 0
        self.deleted = 0
        self.headers: list[dict[str, str]] = []
        self.stalled = asyncio.Event()

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(10_000):  # bounded: a keep-alive connection carries many requests
            method, _, headers, body = await read_request(reader)
            self.headers.append(headers)
            if method == "DELETE":
                self.deleted += 1
                writer.write(http("204 No Content"))
            elif self.registered < 256:
                self.registered += 1
                name = json.loads(body)["name"]
                writer.write(http("201 Created", record(name, f"reg-{name}")))
            else:
                self.stalled.set()
                for _ in range(1000):  # read on (bounded) until the joiner gives the socket up
                    if not await asyncio.wait_for(reader.read(65536), 30):
                        return
                return
            await writer.drain()


def serve_joining(url: str) -> subprocess.Popen[str]:
    """`python -m simulator serve --join URL` with 300 peers and the canary as its token."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simulator",
            "serve",
            "--join",
            url,
            "--peers",
            "300",
            "--token-env",
            "JOIN_TOKEN",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JOIN_TOKEN": CANARY, "PYTHONFAULTHANDLER": "1"},
    )


async def test_a_stop_signal_while_joining_a_stalled_hub_stops_within_a_second_deregistering() -> (
    None
):
    """The CLI: `serve --join URL --token-env VAR`, SIGTERM while the hub holds a batch."""
    hub = StallsSecondBatch()
    async with RawServer(hub) as server:
        url = f"http://bob:{CANARY}@127.0.0.1:{server.port}"
        child = serve_joining(url)
        try:
            await asyncio.wait_for(hub.stalled.wait(), 60)
            child.send_signal(signal.SIGTERM)
            # Less the time it (and this loop, the hub) waited for a CPU on a loaded machine.
            code, took = await timed_exit(child, 30)
            assert child.stderr is not None
            err = child.stderr.read()
        finally:
            reap(child)
    print(f"stopped {took:.2f} s after SIGTERM (not counting its waits for a CPU)")
    assert code == 0, err
    assert took < 1.0, f"took {took:.2f} s to stop; stderr:\n{err}"
    assert hub.registered == 256
    assert hub.deleted == 256, "the registered peers were not deregistered"
    assert {h.get("authorization") for h in hub.headers} == {f"Bearer {CANARY}"}
    assert {h["host"] for h in hub.headers} == {f"127.0.0.1:{server.port}"}
    assert CANARY not in err


async def test_a_slow_join_renews_the_first_leases_before_registering_the_rest() -> None:
    clock = FakeClock()

    def slow(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        clock.advance(0.01)  # each registration takes the busy hub 10 ms: 2.6 s a batch
        return plain(method, target, headers, body)

    hub = ScriptedHub(clock, slow)
    async with RawServer(hub) as server:
        membership = HubMembership(server.url, clock=clock)
        peers = [(f"p{i}", "http://127.0.0.1:9", {}, 3.0, None) for i in range(600)]
        try:
            await membership.join(peers)  # 3 s leases: the first lapse before the last register
        finally:
            await membership.aclose(deregister=False)
    kinds = ["beat" if t.endswith("/heartbeat") else m for _, m, t, _ in hub.seen]
    last_registration = max(i for i, k in enumerate(kinds) if k == "POST")
    assert "beat" in kinds[:last_registration], "no lease was renewed during the join"
    assert membership.registrations == 600
