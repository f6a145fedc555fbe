"""One `SharedStore` for several `AgentHost`s: one file, each host's sessions under its key.

Each host on the file behaves as a daemon with a store of its own: its sessions, its
seqs and its session numbers are its own, and a restart on the file brings each
host's back to it alone. A key in use by a live host is refused to another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from coreagent_sdk import FakeClock
from coreagent_sdk.host import AgentHost, SharedStore
from simulator import Fleet
from tests.test_host_fidelity import JSON, new_session, one_turn, seqs, split_at_turn
from tests.test_host_store import client, files, listing, sid_of


def host(name: str, store: SharedStore, **options: Any) -> AgentHost:
    return AgentHost(name, store=store, clock=FakeClock(), session_rate_limit=None, **options)


def said(got: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [
        p["event"]["Content"]["parts"][0]["text"]
        for e, p in got
        if e == "agent" and p["event"]["Author"] != "user"
    ]


async def test_hosts_sharing_a_store_file_keep_their_sessions_apart_across_a_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleet.sqlite3"
    store = SharedStore(path)
    first = {name: host(name, store) for name in ("a", "b")}
    logged: dict[str, tuple[str, list[int]]] = {}
    for name, each in first.items():
        async with client(each) as http:
            session = await new_session(http)
            logged[name] = (session, seqs(await one_turn(http, session, f"to {name}")))
    # Each host numbers its own events from 1, as two daemons would.
    assert logged["a"][1] == logged["b"][1] == [1, 2]
    async with client(first["b"]) as http:
        assert await listing(http) == {"default": "active", sid_of(logged["b"][0]): "active"}
        async with http.stream("GET", f"{logged['a'][0]}/events") as elsewhere:
            assert elsewhere.status_code == 404  # a's session is not b's
    for each in first.values():
        await each.aclose()
    assert store.opened  # a host closing leaves the file to the others
    await store.aclose()
    assert not store.opened

    again = SharedStore(path)
    for name in ("a", "b"):
        session, mine = logged[name]
        revived = host(name, again)
        async with client(revived) as http:
            assert await listing(http) == {"default": "active", sid_of(session): "idle"}
            got = await one_turn(http, session, "more")
            assert said(got) == [f"to {name}", "more"]  # its own log, not the other host's
            replayed, live = split_at_turn(got)
            assert replayed == mine
            assert live == [3, 4]
            created = await http.post("/sessions", headers=JSON)
            assert created.json()["sessionID"].startswith("s-0002")  # numbered on
        await revived.aclose()
    await again.aclose()
    assert files(tmp_path) == ["fleet.sqlite3"]  # one file for both, closed


async def test_a_key_in_use_is_refused_to_another_host_until_its_host_closes() -> None:
    store = SharedStore()
    owner = host("a", store)
    with pytest.raises(ValueError, match=r"key 'a' is in use by another host on this store"):
        host("a", store)
    with pytest.raises(ValueError, match=r"key 'a' is in use"):
        host("other", store, store_key="a")
    neighbour = host("b", store, store_key="b-1")  # its own key: fine
    async with client(owner) as http:
        session = await new_session(http)
        await one_turn(http, session, "kept")
    await owner.aclose()
    successor = host("a", store)  # the key is free again, with what its last host kept
    async with client(successor) as http:
        assert await listing(http) == {"default": "active", sid_of(session): "idle"}
    with pytest.raises(ValueError, match=r"key 'a' is in use"):
        await owner.open()  # the closed host cannot take its key back meanwhile
    for each in (successor, neighbour):
        await each.aclose()
    await store.aclose()


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"store_key": "k"}, r"store_key='k' names a host's part of a SharedStore, but store="),
        ({"store": "shared", "store_key": ""}, r"store_key must be a non-empty string"),
        ({"store": "shared", "store_sync": "full"}, r"store_sync='full' asks a disk sync"),
    ],
)
def test_store_options_a_shared_store_cannot_honour_are_refused_with_the_fix(
    options: dict[str, Any], refusal: str
) -> None:
    if options.get("store") == "shared":
        options["store"] = SharedStore()
    with pytest.raises(ValueError, match=refusal):
        AgentHost("a", **options)


def test_a_full_sync_store_serves_hosts_of_either_setting() -> None:
    store = SharedStore(synchronous="full")
    for key, sync in (("a", "normal"), ("b", "full")):
        assert AgentHost("a", store=store, store_key=key, store_sync=sync).store.agent == key
    with pytest.raises(ValueError, match=r"store_sync must be 'normal' .* got 'sometimes'"):
        SharedStore(synchronous="sometimes")


async def test_a_fleets_daemons_keep_their_sessions_in_its_one_store_each_under_its_own_key() -> (
    None
):
    fleet = Fleet()
    for name in ("a", "b"):
        fleet.add_peer(name)
    tool = fleet.call_peer(timeout=30)
    for name in ("a", "b"):
        assert (await tool.acall(peer=name, prompt=f"to {name}")).response == f"to {name}"
    assert fleet.store.opened
    for name in ("hub", "a", "b"):  # each daemon holds its key of the fleet's store
        with pytest.raises(ValueError, match=f"key '{name}' is in use"):
            AgentHost("intruder", store=fleet.store, store_key=name)
    peer_a = httpx.AsyncClient(transport=fleet.transport, base_url=fleet.url("a"))
    async with peer_a:
        assert len(await listing(peer_a)) == 2  # default and the call's session
        # A peer removed and added again is a new daemon: it starts with no sessions.
        fleet.remove_peer("a")
        fleet.add_peer("a")
        assert await listing(peer_a) == {"default": "active"}
        assert (await tool.acall(peer="a", prompt="again")).response == "again"
        assert len(await listing(peer_a)) == 2
    await fleet.aclose()
    assert not fleet.store.opened  # closed (its temporary file removed) with the fleet


async def test_a_host_on_an_open_temporary_store_opens_with_no_query_and_counts_on_anew() -> None:
    # A temporary file holds only what this process wrote, so a key never written has no
    # rows: a fleet's daemon opens on its first request without reading its empty part (a
    # query and a turn of the loop each, for each of 10,000 daemons). A key written before
    # is still read: a host made again under it counts on from the last one's numbers.
    store = SharedStore()
    first = host("a", store)
    async with client(first) as http:
        session = await new_session(http)
        before = seqs(await one_turn(http, session))
    statements: list[str] = []
    store._file._db[0].conn.set_trace_callback(statements.append)
    fresh = host("b", store)
    async with client(fresh) as http:
        assert await listing(http) == {"default": "active"}
    opening = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert opening == []  # b's part was never written: nothing to read
    await first.aclose()
    again = host("a", store)
    async with client(again) as http:
        created = await new_session(http)
        after = seqs(await one_turn(http, created))
    assert any("counters" in s for s in statements if s.lstrip().upper().startswith("SELECT"))
    assert sid_of(created) != sid_of(session)  # a's session numbers go on
    assert after[0] > before[-1]  # and so do its seqs
    for each in (fresh, again):
        await each.aclose()
    await store.aclose()
