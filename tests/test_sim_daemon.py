"""The simulated daemon on the wire, via raw httpx (no SDK client), in-process and on loopback."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest

from coreagent_sdk.host._inbox import inbox_block
from simulator import FakeClock, Fleet, Identity, behaviors

from .conftest import ReachFactory, load_fixture
from .test_endpoint import HOSTILE

JSON = {"Content-Type": "application/json"}
ALICE, BOB, ROOT = "tok-alice", "tok-bob", "tok-root"
TOKENS = {ALICE: "alice", BOB: "bob", ROOT: Identity("root", admin=True)}
FRAME = re.compile(rb"event: ([a-z-]+)\ndata: ([^\n]+)\n\n")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [keys(v) for v in value[:1]]
    return None


async def read_frames(
    http: httpx.AsyncClient,
    url: str,
    count: int,
    *,
    after: Any = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    """The raw bytes of the first `count` frames of a stream (after running `after()`)."""

    async def read() -> bytes:
        buf = b""
        async with http.stream("GET", url, headers=headers) as response:
            assert response.status_code == 200, response.status_code
            assert response.headers["content-type"].startswith("text/event-stream")
            started = False
            async for chunk in response.aiter_bytes():
                buf += chunk
                if not started and after is not None:
                    started = True
                    await after()
                if len(FRAME.findall(buf)) >= count:
                    break
        return buf

    return await asyncio.wait_for(read(), 5)


@pytest.fixture
async def open_fleet(make_reach: ReachFactory):
    fleet = Fleet()
    fleet.add_peer(
        "prod-1",
        behaviors.narrate(["listing nodes"], "3 nodes ready"),
        labels={"cluster": "prod-1"},
    )
    fleet.add_peer("solo", multi_session=False)
    reach = await make_reach(fleet)
    async with httpx.AsyncClient(transport=reach.transport) as http:
        yield reach, http


@pytest.fixture
async def locked_fleet(make_reach: ReachFactory):
    clock = FakeClock()
    fleet = Fleet(tokens=TOKENS, clock=clock)
    fleet.add_peer("prod-1", token=ALICE)
    reach = await make_reach(fleet)
    async with httpx.AsyncClient(transport=reach.transport) as http:
        yield reach, http, clock


# --- sessions ---------------------------------------------------------------


async def test_session_answers_have_the_fixture_keys(open_fleet) -> None:
    reach, http = open_fleet
    base = reach.url("prod-1")
    created = await http.post(f"{base}/sessions", headers=JSON)
    assert created.status_code == 201
    assert keys(created.json()) == keys(load_fixture("rest-create-session-v1.json"))
    body = created.json()
    assert body["url"] == f"{base}/sessions/{body['app']}/{body['sessionID']}"
    path = f"{base}/sessions/{body['app']}/{body['sessionID']}"
    injected = await http.post(f"{path}/inject", headers=JSON, json={"message": "hi"})
    assert injected.status_code == 200
    assert keys(injected.json()) == keys(load_fixture("rest-inject-v2.json"))
    listed = await http.get(f"{base}/sessions")
    assert listed.status_code == 200
    assert keys(listed.json()) == keys(load_fixture("rest-sessions-list-v1.json"))


async def test_whoami_has_the_fixture_keys(locked_fleet) -> None:
    reach, http, _ = locked_fleet
    answer = await http.get(f"{reach.url('hub')}/whoami", headers=bearer(ROOT))
    assert answer.status_code == 200
    expected = keys(load_fixture("rest-whoami-v1.json"))
    del expected["proxy_by"]  # present only when a proxy asserted the identity
    assert keys(answer.json()) == expected
    assert answer.json()["identity"] == "root" and answer.json()["admin"] is True


async def test_the_stream_is_framed_byte_for_byte_with_capabilities_first(open_fleet) -> None:
    reach, http = open_fleet
    base = reach.url("prod-1")
    created = (await http.post(f"{base}/sessions", headers=JSON)).json()
    path = f"{base}/sessions/{created['app']}/{created['sessionID']}"

    async def inject() -> None:
        answer = await http.post(f"{path}/inject", headers=JSON, json={"message": "nodes?"})
        assert answer.status_code == 200

    raw = await read_frames(http, f"{path}/events", 12, after=inject)
    frames = FRAME.findall(raw)
    # Nothing but whole frames, back to back, each data line compact JSON as Go writes it.
    assert raw.startswith(b"".join(b"event: %s\ndata: %s\n\n" % f for f in frames))
    for _, data in frames:
        compact = json.dumps(json.loads(data), separators=(",", ":"), ensure_ascii=False)
        assert compact.encode() == data
    events = [e.decode() for e, _ in frames]
    assert events[:2] == ["capabilities", "status-update"]
    assert events[2:] == [
        "inbox",
        "inbox",
        "status-update",
        "agent",
        "agent",
        "agent",
        "agent",
        "turn-complete",
        "status-update",
        "usage-update",
    ]
    payloads = [json.loads(d) for _, d in frames]
    assert keys(payloads[0]) == keys(
        {k: v for k, v in load_fixture("capabilities-v1.4.0.json").items() if k != "caller_id"}
    )
    status_keys = set(load_fixture("status-update-with-capabilities-v1.4.0.json"))
    # The daemon's boot snapshot carries only the model and the turn state.
    assert set(payloads[1]) == {"model", "turn_state"} <= status_keys
    fixture_event = load_fixture("rest-subagent-events-v1.json")["events"][0]
    for payload in payloads[5:9]:
        assert set(payload) == {"seq", "event"}
        assert set(payload["event"]) == set(fixture_event["event"])
    user, narration, result, final = (p["event"] for p in payloads[5:9])
    # The one drained message is the turn, framed as the daemon's [Inbox] bundle.
    assert user["Author"] == "user" and user["Content"]["parts"] == [
        {"text": inbox_block(["nodes?"])}
    ]
    assert "functionCall" in narration["Content"]["parts"][1]
    assert "functionResponse" in result["Content"]["parts"][0]
    assert final["Content"]["parts"] == [{"text": "3 nodes ready"}] and not final["Partial"]


async def test_a_protected_daemon_puts_the_caller_in_capabilities(locked_fleet) -> None:
    reach, http, _ = locked_fleet
    base = reach.url("prod-1")
    created = (await http.post(f"{base}/sessions", headers={**JSON, **bearer(BOB)})).json()
    raw = await read_frames(
        http, f"{base}/sessions/{created['sessionID']}/events", 1, headers=bearer(BOB)
    )
    caps = json.loads(FRAME.findall(raw)[0][1])
    assert keys(caps) == keys(load_fixture("capabilities-v1.4.0.json"))
    assert caps["caller_id"] == "bob"


async def test_since_replays_the_recorded_agent_events(open_fleet) -> None:
    reach, http = open_fleet
    base = reach.url("prod-1")
    created = (await http.post(f"{base}/sessions", headers=JSON)).json()
    path = f"{base}/sessions/{created['sessionID']}"

    async def inject() -> None:
        await http.post(f"{path}/inject", headers=JSON, json={"message": "nodes?"})

    await read_frames(http, f"{path}/events", 12, after=inject)
    # capabilities, status, usage (the session has finished a turn), then agent 3 and 4.
    replay = await read_frames(http, f"{path}/events?since=2", 5)
    seqs = [json.loads(d)["seq"] for e, d in FRAME.findall(replay) if e == b"agent"]
    assert seqs == [3, 4]


@pytest.mark.parametrize(("header", "status"), [("2.0.0", 409), ("one.two", 400), ("1.0.0", 200)])
async def test_the_protocol_version_header_is_checked_and_echoed(
    open_fleet, header, status
) -> None:
    reach, http = open_fleet
    base = reach.url("prod-1")
    created = (await http.post(f"{base}/sessions", headers=JSON)).json()
    url = f"{base}/sessions/{created['sessionID']}/events"
    async with http.stream("GET", url, headers={"X-Attach-Protocol-Version": header}) as answer:
        assert answer.status_code == status
        assert answer.headers["x-attach-protocol-version"] == "1.10.0"


async def test_status_codes_of_the_session_routes(open_fleet) -> None:
    reach, http = open_fleet
    base = reach.url("prod-1")
    sid = (await http.post(f"{base}/sessions", headers=JSON)).json()["sessionID"]
    inject = f"{base}/sessions/{sid}/inject"
    assert (await http.post(f"{base}/sessions")).status_code == 415  # no Content-Type
    assert (await http.post(inject, content=b'{"message":"x"}')).status_code == 415
    assert (await http.post(inject, headers=JSON, json={"message": ""})).status_code == 400
    assert (await http.post(inject, headers=JSON, content=b"{nope")).status_code == 400
    big = {"message": "x" * (8 * 1024)}
    assert (await http.post(inject, headers=JSON, json=big)).status_code == 400
    missing = f"{base}/sessions/s-missing/inject"
    assert (await http.post(missing, headers=JSON, json={"message": "x"})).status_code == 404
    async with http.stream("GET", f"{base}/sessions/s-missing/events") as answer:
        assert answer.status_code == 404
    solo = await http.post(f"{reach.url('solo')}/sessions", headers=JSON)
    assert solo.status_code == 501 and "attach.multi_session.enabled" in solo.text
    assert (await http.get(f"{base}/peers")).status_code == 404  # not a hub


async def test_a_protected_daemon_answers_401_with_the_bearer_challenge(locked_fleet) -> None:
    reach, http, _ = locked_fleet
    for url in (f"{reach.url('prod-1')}/sessions", f"{reach.url('hub')}/peers"):
        for headers in ({}, bearer("wrong")):
            answer = await http.post(url, headers={**JSON, **headers}, json={})
            assert answer.status_code == 401
            # A fleet's tokens are per-caller users: `writeUnauthorized`'s answer.
            assert answer.headers["www-authenticate"] == 'Bearer realm="attach-multisession"'
            assert answer.text == "unauthorized: no valid credential\n"
    by_header = await http.post(
        f"{reach.url('prod-1')}/sessions",
        headers={**JSON, "X-Attach-Token": ALICE, **bearer("wrong")},
    )
    assert by_header.status_code == 201  # X-Attach-Token wins over Authorization


# --- the hub ----------------------------------------------------------------


@pytest.mark.parametrize("endpoint", HOSTILE)
async def test_the_hub_refuses_a_hostile_endpoint(open_fleet, endpoint) -> None:
    reach, http = open_fleet
    answer = await http.post(
        f"{reach.url('hub')}/peers", headers=JSON, json={"name": "evil", "endpoint": endpoint}
    )
    assert answer.status_code == 400
    assert "evil" not in [
        p["name"] for p in (await http.get(f"{reach.url('hub')}/peers")).json()["peers"]
    ]


async def test_the_hub_refuses_a_registration_without_name_or_endpoint(open_fleet) -> None:
    reach, http = open_fleet
    hub = f"{reach.url('hub')}/peers"
    assert (await http.post(hub, headers=JSON, json={"endpoint": "http://x"})).status_code == 400
    assert (await http.post(hub, headers=JSON, json={"name": "x"})).status_code == 400
    assert (await http.post(hub, headers=JSON, json=[1])).status_code == 400
    huge = {"name": "x", "endpoint": "http://x", "labels": {"k": "v" * 16 * 1024}}
    assert (await http.post(hub, headers=JSON, json=huge)).status_code == 400


async def test_peers_are_sorted_and_filtered_by_labels(open_fleet) -> None:
    reach, http = open_fleet
    hub = f"{reach.url('hub')}/peers"
    await http.post(
        hub,
        headers=JSON,
        json={
            "name": "a-first",
            "endpoint": "http://a:1",
            "labels": {"cluster": "dev", "tier": "x"},
        },
    )
    names = [p["name"] for p in (await http.get(hub)).json()["peers"]]
    assert names == sorted(names) and {"a-first", "prod-1", "solo"} <= set(names)
    only = (await http.get(hub, params=[("label", "cluster=dev"), ("label", "tier=x")])).json()
    assert [p["name"] for p in only["peers"]] == ["a-first"]


async def test_the_hub_redacts_registration_ids_from_non_owners(locked_fleet) -> None:
    reach, http, _ = locked_fleet
    hub = f"{reach.url('hub')}/peers"
    mine = await http.post(
        hub, headers={**JSON, **bearer(BOB)}, json={"name": "bobs", "endpoint": "http://bobs:1"}
    )
    assert mine.status_code == 201
    record = mine.json()
    assert set(record) == {
        "registration_id",
        "name",
        "endpoint",
        "registered_at",
        "last_heartbeat",
        "lease_expires_at",
    }

    async def seen_by(token: str) -> dict[str, str | None]:
        peers = (await http.get(hub, headers=bearer(token))).json()["peers"]
        return {p["name"]: p.get("registration_id") for p in peers}

    assert (await seen_by(BOB))["bobs"] == record["registration_id"]
    assert (await seen_by(ALICE))["bobs"] is None  # the key is left out, as on a daemon
    assert (await seen_by(ALICE))["prod-1"]  # alice owns prod-1
    assert (await seen_by(ROOT))["bobs"] == record["registration_id"]


async def test_only_the_owner_or_an_admin_may_deregister(locked_fleet) -> None:
    reach, http, _ = locked_fleet
    hub = f"{reach.url('hub')}/peers"
    rid = (
        await http.post(
            hub, headers={**JSON, **bearer(BOB)}, json={"name": "bobs", "endpoint": "http://bobs:1"}
        )
    ).json()["registration_id"]
    assert (await http.delete(f"{hub}/{rid}", headers={**JSON, **bearer(ALICE)})).status_code == 403
    assert (await http.delete(f"{hub}/{rid}", headers={**JSON, **bearer(BOB)})).status_code == 204
    assert (
        await http.delete(f"{hub}/{rid}", headers={**JSON, **bearer(BOB)})
    ).status_code == 204  # idempotent
    rid2 = (
        await http.post(
            hub, headers={**JSON, **bearer(BOB)}, json={"name": "bobs", "endpoint": "http://bobs:1"}
        )
    ).json()["registration_id"]
    assert (await http.delete(f"{hub}/{rid2}", headers={**JSON, **bearer(ROOT)})).status_code == 204


async def test_an_expired_lease_is_pruned_and_its_heartbeat_is_404(locked_fleet) -> None:
    reach, http, clock = locked_fleet
    hub = f"{reach.url('hub')}/peers"
    record = (
        await http.post(
            hub,
            headers={**JSON, **bearer(BOB)},
            json={"name": "short", "endpoint": "http://s:1", "heartbeat_ttl_sec": 10},
        )
    ).json()
    clock.advance(9)
    beat = await http.post(
        f"{hub}/{record['registration_id']}/heartbeat", headers={**JSON, **bearer(BOB)}
    )
    assert beat.status_code == 200
    assert beat.json()["lease_expires_at"] > record["lease_expires_at"]
    clock.advance(11)  # past the lease and past the hub's next 5 s prune tick
    names = [p["name"] for p in (await http.get(hub, headers=bearer(BOB))).json()["peers"]]
    assert "short" not in names
    gone = await http.post(
        f"{hub}/{record['registration_id']}/heartbeat", headers={**JSON, **bearer(BOB)}
    )
    assert gone.status_code == 404


async def test_a_lease_is_clamped_to_five_minutes(locked_fleet) -> None:
    reach, http, clock = locked_fleet
    hub = f"{reach.url('hub')}/peers"
    await http.post(
        hub,
        headers={**JSON, **bearer(BOB)},
        json={"name": "long", "endpoint": "http://l:1", "heartbeat_ttl_sec": 3600},
    )
    clock.advance(301)
    names = [p["name"] for p in (await http.get(hub, headers=bearer(BOB))).json()["peers"]]
    assert "long" not in names


async def test_re_registering_a_name_replaces_it_with_a_new_id(open_fleet) -> None:
    reach, http = open_fleet
    hub = f"{reach.url('hub')}/peers"
    first = (
        await http.post(hub, headers=JSON, json={"name": "dup", "endpoint": "http://a:1"})
    ).json()
    second = (
        await http.post(hub, headers=JSON, json={"name": "dup", "endpoint": "http://b:2"})
    ).json()
    assert first["registration_id"] != second["registration_id"]
    dups = [p for p in (await http.get(hub)).json()["peers"] if p["name"] == "dup"]
    assert [p["endpoint"] for p in dups] == ["http://b:2"]
    stale = await http.post(f"{hub}/{first['registration_id']}/heartbeat", headers=JSON)
    assert stale.status_code == 404


async def test_served_peers_are_listed_at_their_loopback_endpoints(open_fleet) -> None:
    reach, http = open_fleet
    listed = {
        p["name"]: p["endpoint"]
        for p in (await http.get(f"{reach.url('hub')}/peers")).json()["peers"]
    }
    assert listed["prod-1"] == reach.url("prod-1")


def test_clearing_faults_restores_every_default() -> None:
    from simulator import Faults

    faults = Faults(
        latency=1.0,
        error_status=503,
        error_paths=("/peers",),
        drop_streams_after=2,
        abort_streams_after=3,
        malformed_frames=True,
    )
    faults.clear()
    assert faults == Faults()


# --- the hub's listing: encoded once per roster, never stale --------------------------------


class Listing:
    """`GET /peers` on an in-process fleet's hub, as raw JSON (records by name)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.http = httpx.AsyncClient(transport=fleet.transport)
        self.hub = f"{fleet.hub_url}/peers"

    async def get(self, token: str | None = None, **params: str) -> dict[str, dict[str, Any]]:
        response = await self.http.get(
            self.hub,
            headers=bearer(token) if token else None,
            params=[("label", f"{k}={v}") for k, v in params.items()] or None,
        )
        assert response.status_code == 200, response.text
        return {p["name"]: p for p in response.json()["peers"]}

    async def aclose(self) -> None:
        await self.http.aclose()
        await self.fleet.aclose()


async def test_an_unchanged_roster_is_encoded_once_and_answered_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coreagent_sdk.host import _registry

    encoded = 0
    record = _registry._Entry.record

    def counting(self: Any, *, redact: bool) -> dict[str, Any]:
        nonlocal encoded
        encoded += 1
        return record(self, redact=redact)

    monkeypatch.setattr(_registry._Entry, "record", counting)
    fleet = Fleet(clock=FakeClock())
    for i in range(50):
        fleet.add_peer(f"p-{i}")
    async with httpx.AsyncClient(transport=fleet.transport) as http:
        bodies = {(await http.get(f"{fleet.hub_url}/peers")).content for _ in range(5)}
    assert len(bodies) == 1
    assert encoded == 50, f"{encoded} records encoded for 5 answers of an unchanged 50-peer roster"
    await fleet.aclose()


async def test_a_renewed_lease_re_encodes_that_row_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16.13: one lease renewing made the hub re-encode all 10,000 rows."""
    from coreagent_sdk.host import _registry

    encoded: list[str] = []
    record = _registry._Entry.record

    def counting(self: Any, *, redact: bool) -> dict[str, Any]:
        encoded.append(self.name)
        return record(self, redact=redact)

    monkeypatch.setattr(_registry._Entry, "record", counting)
    clock = FakeClock()
    fleet = Fleet(clock=clock)
    for i in range(50):
        fleet.add_peer(f"p-{i}", ttl=30)
    rid = fleet.registry.get("p-7").registration_id  # type: ignore[union-attr]
    async with httpx.AsyncClient(transport=fleet.transport) as http:
        first = {r["name"]: r for r in (await http.get(f"{fleet.hub_url}/peers")).json()["peers"]}
        assert len(encoded) == 50
        encoded.clear()
        clock.advance(1)
        fleet.registry.heartbeat(rid)
        second = {r["name"]: r for r in (await http.get(f"{fleet.hub_url}/peers")).json()["peers"]}
    assert encoded == ["p-7"]
    assert second.pop("p-7")["last_heartbeat"] > first.pop("p-7")["last_heartbeat"]
    assert second == first
    await fleet.aclose()


async def test_the_listing_is_byte_for_byte_a_fresh_encoding_after_every_kind_of_change() -> None:
    """The hub keeps each row encoded: whatever changed, the body must be what encoding
    every record afresh gives, for every view (a stale row would show here)."""
    from coreagent_sdk.host._gowire import go_json

    clock = FakeClock()
    fleet = Fleet(clock=clock, tokens=TOKENS)
    registry = fleet.registry
    fleet.add_peer("a", labels={"team": "<r&d>\u2028"}, token=ALICE, ttl=30)
    fleet.add_peer("b", token=BOB, ttl=30)

    async def check(http: httpx.AsyncClient) -> None:
        for token, caller in ((ALICE, Identity("alice")), (BOB, Identity("bob")), (ROOT, None)):
            got = (await http.get(f"{fleet.hub_url}/peers", headers=bearer(token))).content
            records = [
                e.record(redact=not registry.may_manage(e, caller)) for e in registry.peers()
            ]
            assert got == (go_json({"peers": records}) + "\n").encode(), token

    async with httpx.AsyncClient(transport=fleet.transport) as http:
        await check(http)
        made = await http.post(
            f"{fleet.hub_url}/peers",
            headers={**JSON, **bearer(BOB)},
            json={"name": "c", "endpoint": "http://c:1", "heartbeat_ttl_sec": 30},
        )
        rid = made.json()["registration_id"]
        await check(http)  # registered
        clock.advance(4)
        beat = await http.post(
            f"{fleet.hub_url}/peers/{rid}/heartbeat", headers={**JSON, **bearer(BOB)}
        )
        assert beat.is_success
        await check(http)  # a heartbeat moved c's lease
        clock.advance(10)
        await check(http)  # a and b beat by themselves (a third of their lease)
        registry.set_endpoint("b", "http://127.0.0.1:1")
        await check(http)  # an endpoint moved
        again = await http.post(
            f"{fleet.hub_url}/peers",
            headers={**JSON, **bearer(ALICE)},
            json={"name": "a", "endpoint": "http://a:1", "labels": {"team": "ops"}},
        )
        assert again.status_code == 201
        await check(http)  # registered again with new labels
        fleet.expire("b")
        await check(http)  # a lease lapsed
        gone = await http.delete(f"{fleet.hub_url}/peers/{rid}", headers={**JSON, **bearer(BOB)})
        assert gone.is_success
        await check(http)  # deregistered
        assert [e.name for e in registry.peers()] == ["a"]
    await fleet.aclose()


async def test_the_listing_changes_with_every_write_to_the_registry() -> None:
    clock = FakeClock()
    listing = Listing(Fleet(clock=clock))
    fleet, http = listing.fleet, listing.http
    fleet.add_peer("kept")
    assert list(await listing.get()) == ["kept"]
    made = await http.post(
        listing.hub,
        headers=JSON,
        json={"name": "x", "endpoint": "http://x:1", "heartbeat_ttl_sec": 30},
    )
    rid = made.json()["registration_id"]
    before = (await listing.get())["x"]
    clock.advance(10)
    assert (await http.post(f"{listing.hub}/{rid}/heartbeat", headers=JSON)).status_code == 200
    after = (await listing.get())["x"]
    assert after["lease_expires_at"] > before["lease_expires_at"]
    assert (await http.delete(f"{listing.hub}/{rid}", headers=JSON)).status_code == 204
    assert list(await listing.get()) == ["kept"]
    fleet.expire("kept")
    assert await listing.get() == {}
    fleet.revive("kept")
    assert list(await listing.get()) == ["kept"]
    fleet.add_peer("gone")
    assert list(await listing.get()) == ["gone", "kept"]
    fleet.remove_peer("gone")
    assert list(await listing.get()) == ["kept"]
    await listing.aclose()


async def test_a_lease_that_lapses_with_no_write_leaves_the_listing_at_the_next_prune() -> None:
    clock = FakeClock()
    listing = Listing(Fleet(clock=clock))
    listing.fleet.add_peer("kept")
    listing.fleet.add_peer("brief", ttl=7, heartbeat=False)  # lapses at 7 s; ticks at 5, 10
    assert list(await listing.get()) == ["brief", "kept"]
    clock.advance(7)
    assert list(await listing.get()) == ["brief", "kept"]  # lapsed, not yet swept (a hub's 5 s)
    clock.advance(2.999)
    assert list(await listing.get()) == ["brief", "kept"]
    clock.advance(0.001)
    assert list(await listing.get()) == ["kept"]
    await listing.aclose()


async def test_a_kept_lease_is_listed_with_its_latest_beat_after_time_passes() -> None:
    clock = FakeClock()
    listing = Listing(Fleet(clock=clock))
    listing.fleet.add_peer("kept", ttl=30)
    first = (await listing.get())["kept"]
    clock.advance(10)  # one beat (a third of the lease) is due
    later = (await listing.get())["kept"]
    assert later["last_heartbeat"] > first["last_heartbeat"]
    assert later["lease_expires_at"] > first["lease_expires_at"]
    await listing.aclose()


async def test_each_label_filter_and_each_caller_gets_its_own_listing() -> None:
    listing = Listing(Fleet(tokens=TOKENS))
    listing.fleet.add_peer("a", labels={"env": "prod"}, token=ALICE)
    listing.fleet.add_peer("b", labels={"env": "dev"}, token=BOB)
    assert list(await listing.get(ALICE, env="prod")) == ["a"]
    assert list(await listing.get(ALICE, env="dev")) == ["b"]
    as_alice = await listing.get(ALICE)
    as_bob = await listing.get(BOB)
    as_root = await listing.get(ROOT)

    def shown(view: dict[str, dict[str, Any]]) -> list[str]:
        return [name for name, rec in view.items() if rec.get("registration_id")]

    assert shown(as_alice) == ["a"]
    assert shown(as_bob) == ["b"]
    assert shown(as_root) == ["a", "b"]
    await listing.aclose()


async def test_serving_the_fleet_changes_the_listed_endpoints_at_once() -> None:
    listing = Listing(Fleet())
    listing.fleet.add_peer("a")
    assert (await listing.get())["a"]["endpoint"] == "http://a.sim"
    served = await listing.fleet.serve()
    assert (await listing.get())["a"]["endpoint"] == served.urls["a"]
    await served.aclose()
    assert (await listing.get())["a"]["endpoint"] == "http://a.sim"
    await listing.aclose()


@pytest.mark.parametrize(
    ("body", "injected"),
    [(b'{"message": "\xff\xfe"}', "\ufffd\ufffd"), (b'{"message": "hi \\udc80"}', "hi \ufffd")],
    ids=["invalid-utf8", "lone-surrogate-escape"],
)
async def test_text_that_is_not_utf8_decodes_to_replacement_characters_as_go_does(
    open_fleet, body, injected
) -> None:
    """Pins Go's `json.Unmarshal` under `readJSON`: bad UTF-8 and lone surrogates in a
    string become U+FFFD; the message is accepted, never a 500."""
    reach, http = open_fleet
    base = reach.url("prod-1")
    session = (await http.post(f"{base}/sessions", headers=JSON)).json()
    answer = await http.post(
        f"{base}/sessions/{session['app']}/{session['sessionID']}/inject",
        headers=JSON,
        content=body,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["injected"] == injected


async def test_a_body_with_a_byte_order_mark_is_malformed_json(open_fleet) -> None:
    """Pins `readJSON`: Go's decoder refuses a leading BOM as an invalid character."""
    reach, http = open_fleet
    base = reach.url("prod-1")
    session = (await http.post(f"{base}/sessions", headers=JSON)).json()
    answer = await http.post(
        f"{base}/sessions/{session['app']}/{session['sessionID']}/inject",
        headers=JSON,
        content=b"\xef\xbb\xbf{}",
    )
    assert answer.status_code == 400, answer.text
    assert answer.text.startswith("malformed JSON: ")


@pytest.mark.parametrize("bad", [True, 5, "5/min"])
def test_a_daemon_refuses_a_session_rate_limit_it_could_not_apply(bad: object) -> None:
    # Taken, such a value made every POST /sessions answer 500.
    from simulator import Daemon

    with pytest.raises(ValueError, match=r"SessionRateLimit\(\.\.\.\) or None"):
        Daemon("p", session_rate_limit=bad)  # type: ignore[arg-type]


async def test_an_agent_host_hands_an_agents_exception_to_on_agent_error_not_a_turn_error() -> None:
    from coreagent_sdk import ASGITransport, CallPeer, Peer, RoutingTransport, StaticDirectory
    from coreagent_sdk.errors import PeerTurnError
    from coreagent_sdk.host import AgentHost

    seen: list[Exception] = []

    async def agent(turn: Any) -> None:
        if turn.prompt == "refuse":
            await turn.error("rate_limited", "busy")  # intended: not the hook's business
        raise KeyError("missing")

    host = AgentHost("solo", behavior=agent, on_agent_error=seen.append)
    routes = RoutingTransport()
    routes.mount("solo.test", ASGITransport(host.app))
    tool = CallPeer(
        StaticDirectory([Peer("solo", "http://solo.test")]), transport=routes, timeout=5
    )
    with pytest.raises(PeerTurnError, match="KeyError"):
        await tool.acall(peer="solo", prompt="work")
    with pytest.raises(PeerTurnError, match="busy"):
        await tool.acall(peer="solo", prompt="refuse")
    assert [type(e) for e in seen] == [KeyError]
    await tool.aclose()
    await host.aclose()
