"""`fleet.calls`: every call a fleet carries, each under the call whose turn made it."""

from __future__ import annotations

import pytest

from coreagent_sdk import CallPeer
from simulator import Fleet, behaviors

from .html_parse import Page


def region_fleet() -> Fleet:
    fleet = Fleet()
    fleet.add_peer("region", behaviors.fan_out(via=fleet, labels={"tier": "zone"}, timeout=5))
    for zone in ("a", "b"):
        fleet.add_peer(
            f"zone-{zone}",
            behaviors.fan_out(via=fleet, labels={"zone": zone}, timeout=5),
            labels={"tier": "zone"},
        )
        for node in (1, 2):
            fleet.add_peer(
                f"node-{zone}{node}", behaviors.reply(f"{zone}{node}: ok"), labels={"zone": zone}
            )
    return fleet


REGION_TREE = [
    ("", "region"),
    ("├── ", "zone-a"),
    ("│   ├── ", "node-a1"),
    ("│   └── ", "node-a2"),
    ("└── ", "zone-b"),
    ("    ├── ", "node-b1"),
    ("    └── ", "node-b2"),
]


def shape(fleet: Fleet) -> list[tuple[str, str]]:
    return [(prefix, r.peer) for prefix, r in fleet.calls.tree().walk()]


async def test_a_fan_out_tree_is_recorded_with_every_sub_call_under_its_caller() -> None:
    fleet = region_fleet()
    result = await fleet.call_peer(timeout=10).acall(peer="region", prompt="pods?")
    assert "a1: ok" in result.response
    assert shape(fleet) == REGION_TREE
    records = {r.peer: r for r in fleet.calls.records()}
    assert records["node-a1"].parent == records["zone-a"].call_id
    assert records["zone-a"].parent == records["region"].call_id
    assert records["region"].parent is None
    assert {r.state for r in records.values()} == {"finished"}
    assert all(r.session_id.startswith("s-") for r in records.values())
    await fleet.aclose()


async def test_the_same_tree_is_recorded_when_the_fleet_is_called_over_loopback_sockets() -> None:
    fleet = region_fleet()
    async with await fleet.serve() as served:
        await served.call_peer(timeout=10).acall(peer="region", prompt="pods?")
        assert shape(fleet) == REGION_TREE
    await fleet.aclose()


async def test_a_caller_the_fleet_did_not_equip_is_recorded_from_its_turns() -> None:
    fleet = region_fleet()
    # The user's own tool: the fleet sees only the turns it runs, in-process.
    own = CallPeer(fleet.directory(), transport=fleet.transport, timeout=10)
    await own.acall(peer="zone-b", prompt="pods?")
    await own.aclose()
    tree = fleet.calls.tree()
    assert shape(fleet) == [("", "zone-b"), ("├── ", "node-b1"), ("└── ", "node-b2")]
    (root,) = tree.roots()
    assert root.call_id < 0 and root.state == "finished" and root.duration_ms is not None
    await fleet.aclose()


async def test_a_sub_call_refused_before_any_session_is_a_failed_child() -> None:
    fleet = Fleet()
    fleet.add_peer("boss", behaviors.fan_out(via=fleet, peers=["nobody", "worker"], timeout=5))
    fleet.add_peer("worker", behaviors.echo())
    await fleet.call_peer(timeout=10).acall(peer="boss", prompt="go")
    tree = fleet.calls.tree()
    (boss,) = tree.roots()
    nobody, worker = sorted(tree.children(boss.call_id), key=lambda r: r.peer)
    assert (nobody.state, nobody.error_type) == ("failed", "UnknownPeerError")
    assert nobody.session_id == ""  # it never reached a peer
    assert (worker.peer, worker.state) == ("worker", "finished")
    await fleet.aclose()


async def test_each_fleet_records_its_own_calls_only() -> None:
    other = Fleet()
    other.add_peer("far", behaviors.reply("far away"))
    fleet = Fleet()
    fleet.add_peer("near", behaviors.delegate("far", via=other, timeout=5))
    assert (await fleet.call_peer(timeout=10).acall(peer="near", prompt="x")).response == (
        "far away"
    )
    assert shape(fleet) == [("", "near")]
    assert shape(other) == [("", "far")]  # another fleet's turn is not its parent
    await fleet.aclose()
    await other.aclose()


async def test_sync_calls_and_the_users_own_hook_are_recorded_too() -> None:
    fleet = region_fleet()
    seen: list[str] = []
    tool = fleet.call_peer(timeout=10, on_event=lambda e: seen.append(e.kind))
    tool(peer="zone-a", prompt="pods?")  # a sync call: runs on a worker thread's loop
    assert shape(fleet) == [("", "zone-a"), ("├── ", "node-a1"), ("└── ", "node-a2")]
    assert seen == ["started", "session_opened", "finished"]
    await fleet.aclose()


async def test_the_roster_still_names_each_peers_own_behaviour() -> None:
    fleet = region_fleet()
    behaviours = {row.name: row.behavior for row in fleet.roster()}
    assert behaviours["node-a1"] == "reply"  # not the recording wrapper's name
    assert not any("recorded" in name for name in behaviours.values())
    await fleet.aclose()


async def test_a_live_tree_view_of_the_fleet_shows_the_tree_when_displayed() -> None:
    pytest.importorskip("ipywidgets")
    from coreagent_sdk.widgets import CallTreeView

    fleet = region_fleet()
    view = CallTreeView(fleet.calls, min_interval=60)
    await fleet.call_peer(timeout=10).acall(peer="region", prompt="pods?")
    bundle = view._repr_mimebundle_()
    page = Page(bundle["text/html"])
    assert [(depth, text.split(" ")[0]) for depth, text in page.summaries] == [
        (len(prefix) // 4 + 1, name) for prefix, name in REGION_TREE
    ]
    assert "7 calls in 1 tree (finished 7)" in bundle["text/plain"]
    view.close()
    await fleet.aclose()
