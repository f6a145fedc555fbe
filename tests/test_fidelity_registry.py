"""The simulated hub's registry follows core-agent's: integer leases, 5 s pruning, `reg-` ids,
redaction by omission, label filters, and re-registration (with an opt-in owner check).

Pins core-agent `pkg/attach/peers_handlers.go` (`registerPeer`, `listPeers`, `heartbeatPeer`,
`parseLabelFilters`) and `pkg/attach/peers.go` (`RegisterOwned`, `newRegistrationID`, `Heartbeat`,
`pruneLoop` ticking `Prune` every `pruneTick`, 5 s).
"""

from __future__ import annotations

import re
from datetime import datetime

import httpx
import pytest

from coreagent_sdk import FakeClock
from simulator import Fleet, Identity

from .conftest import ReachFactory

JSON = {"Content-Type": "application/json"}
ALICE, BOB, ROOT = "tok-alice", "tok-bob", "tok-root"
TOKENS = {ALICE: "alice", BOB: "bob", ROOT: Identity("root", admin=True)}


def as_(token: str) -> dict[str, str]:
    return {**JSON, "Authorization": f"Bearer {token}"}


def lease(record: dict[str, str]) -> float:
    def at(key: str) -> datetime:
        return datetime.fromisoformat(record[key].replace("Z", "+00:00"))

    return (at("lease_expires_at") - at("registered_at")).total_seconds()


@pytest.fixture
async def hub(make_reach: ReachFactory):
    clock = FakeClock()
    fleet = Fleet(clock=clock)
    reach = await make_reach(fleet)
    async with httpx.AsyncClient(transport=reach.transport) as http:
        yield f"{reach.url('hub')}/peers", http, clock


@pytest.mark.parametrize(
    "raw",
    [
        b"60.0",
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b'"60"',
        b"true",
        b"1e400",
        b"99999999999999999999",
    ],
)
async def test_a_lease_that_is_not_an_integer_is_400_and_never_stored(hub, raw) -> None:
    """Issue 10 item 6: one NaN lease must not break `GET /peers` for everyone."""
    url, http, _ = hub
    body = b'{"name": "bad", "endpoint": "http://bad:1", "heartbeat_ttl_sec": ' + raw + b"}"
    answer = await http.post(url, headers=JSON, content=body)
    assert answer.status_code == 400, answer.text
    if raw.lstrip(b"-")[:1] in (b"N", b"I"):
        # Not JSON at all: Go's decoder refuses it before it reaches the field (readJSON).
        assert answer.text.startswith("malformed JSON: invalid character ")
    else:
        assert "heartbeat_ttl_sec" in answer.text
    listed = await http.get(url)
    assert listed.status_code == 200
    assert "bad" not in [p["name"] for p in listed.json()["peers"]]


@pytest.mark.parametrize(("ttl", "expected"), [(0, 60), (-5, 60), (10, 10), (3600, 300)])
async def test_a_lease_of_zero_or_less_is_the_default_and_a_long_one_is_clamped(
    hub, ttl, expected
) -> None:
    url, http, _ = hub
    body = {"name": "p", "endpoint": "http://p:1", "heartbeat_ttl_sec": ttl}
    record = (await http.post(url, headers=JSON, json=body)).json()
    assert lease(record) == expected


async def test_registration_ids_are_reg_and_16_hex_digits(hub) -> None:
    """Pins `pkg/attach/peers.go` `newRegistrationID`: "reg-" and 8 random bytes in hex."""
    url, http, _ = hub
    ids = set()
    for _ in range(3):
        record = (
            await http.post(url, headers=JSON, json={"name": "p", "endpoint": "http://p:1"})
        ).json()
        assert re.fullmatch(r"reg-[0-9a-f]{16}", record["registration_id"]), record
        ids.add(record["registration_id"])
    assert len(ids) == 3  # a re-registration gets a new id


async def test_a_lapsed_lease_lives_until_the_next_5_second_prune_tick(hub) -> None:
    """Pins `pkg/attach/peers.go` `pruneLoop` (a `Prune` every 5 s from the registry's start)
    and `heartbeatPeer`: a heartbeat just after expiry is 200 on a daemon (`Heartbeat` finds the
    lapsed entry until the tick removes it); after the tick it is 404 (`ErrPeerNotFound`)."""
    url, http, clock = hub
    clock.advance(1)  # the hub's ticker runs at 5, 10, 15 ... seconds from its start
    body = {"name": "p", "endpoint": "http://p:1", "heartbeat_ttl_sec": 10}
    rid = (await http.post(url, headers=JSON, json=body)).json()["registration_id"]
    clock.advance(10.5)  # lapsed at 11, now 11.5: the last tick was at 10
    assert "p" in [p["name"] for p in (await http.get(url)).json()["peers"]]
    renewed = await http.post(f"{url}/{rid}/heartbeat", headers=JSON)
    assert renewed.status_code == 200
    clock.advance(10.0)  # lapsed at 21.5, now 21.5: the tick at 20 came first
    assert (await http.post(f"{url}/{rid}/heartbeat", headers=JSON)).status_code == 200
    clock.advance(14.0)  # lapsed at 31.5, now 35.5: the tick at 35 dropped it
    assert "p" not in [p["name"] for p in (await http.get(url)).json()["peers"]]
    assert (await http.post(f"{url}/{rid}/heartbeat", headers=JSON)).status_code == 404


async def test_label_filters_skip_items_without_equals_and_empty_matches_missing(hub) -> None:
    """Pins `pkg/attach/peers_handlers.go` `parseLabelFilters` (an item without `=` is
    skipped) and `pkg/attach/peers.go` `matchLabels` (`have[k] != v`: `zone=` matches a
    peer with no zone; every filter must hold)."""
    url, http, _ = hub
    for name, labels in (("a", {"zone": "eu"}), ("b", {}), ("c", {"zone": "us"})):
        body = {"name": name, "endpoint": f"http://{name}:1", "labels": labels}
        assert (await http.post(url, headers=JSON, json=body)).status_code == 201

    async def names(*filters: str) -> list[str]:
        answer = await http.get(url, params=[("label", f) for f in filters])
        assert answer.status_code == 200
        return [p["name"] for p in answer.json()["peers"]]

    assert await names("nokey") == ["a", "b", "c"]  # skipped, not 400
    assert await names("zone=") == ["b"]
    assert await names("zone=eu", "nokey") == ["a"]


async def test_registration_ids_are_left_out_for_callers_who_do_not_own_them(
    make_reach: ReachFactory,
) -> None:
    fleet = Fleet(tokens=TOKENS)
    fleet.add_peer("prod-1", token=ALICE)
    reach = await make_reach(fleet)
    async with httpx.AsyncClient(transport=reach.transport) as http:
        url = f"{reach.url('hub')}/peers"
        seen = {p["name"]: p for p in (await http.get(url, headers=as_(BOB))).json()["peers"]}
        assert "registration_id" not in seen["prod-1"]
        mine = {p["name"]: p for p in (await http.get(url, headers=as_(ALICE))).json()["peers"]}
        assert mine["prod-1"]["registration_id"].startswith("reg-")


# --- issue 10 item 14: re-registration by another identity ---------------------------


async def test_a_real_hub_lets_another_identity_take_over_a_name() -> None:
    """Faithful by default: the daemon upserts by name with no owner check."""
    fleet = Fleet(tokens=TOKENS)
    fleet.add_peer("prod-1", token=ALICE)
    async with httpx.AsyncClient(transport=fleet.transport) as http:
        url = f"{fleet.hub_url}/peers"
        hijack = {"name": "prod-1", "endpoint": "http://bob-box:1"}
        assert (await http.post(url, headers=as_(BOB), json=hijack)).status_code == 201
        listed = (await http.get(url, headers=as_(ALICE))).json()["peers"]
        assert [(p["endpoint"], "registration_id" in p) for p in listed] == [
            ("http://bob-box:1", False)
        ]
    await fleet.aclose()


async def test_the_hub_option_refuses_re_registration_by_another_identity() -> None:
    fleet = Fleet(tokens=TOKENS, refuse_foreign_reregistration=True)
    fleet.add_peer("prod-1", token=ALICE)
    async with httpx.AsyncClient(transport=fleet.transport) as http:
        url = f"{fleet.hub_url}/peers"
        hijack = {"name": "prod-1", "endpoint": "http://bob-box:1"}
        refused = await http.post(url, headers=as_(BOB), json=hijack)
        assert refused.status_code == 403 and '"prod-1"' in refused.text
        assert [p["endpoint"] for p in (await http.get(url, headers=as_(BOB))).json()["peers"]] == [
            fleet.url("prod-1")
        ]
        own = {"name": "prod-1", "endpoint": "http://alice-new:1"}
        assert (await http.post(url, headers=as_(ALICE), json=own)).status_code == 201
        assert (await http.post(url, headers=as_(ROOT), json=hijack)).status_code == 201
        fresh = {"name": "bobs", "endpoint": "http://bob-box:1"}
        assert (await http.post(url, headers=as_(BOB), json=fresh)).status_code == 201
    await fleet.aclose()
