"""`fleet.calls`: every call a fleet carries, each under the call whose turn made it."""

from __future__ import annotations

from typing import Any

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


def mixed_fleet() -> Fleet:
    """top (attach) -> boss (a daemon called over A2A) -> worker (attach) and translator
    (an A2A SDK agent), whose behaviour asks worker through a fleet tool: three levels."""
    pytest.importorskip("a2a")
    fleet = Fleet()
    fleet.add_peer("worker", behaviors.reply("ok"))
    tool = fleet.call_peer(timeout=5)

    async def translate(text: str) -> str:
        return "asked: " + (await tool.acall(peer="worker", prompt=text)).response

    fleet.add_a2a_peer("translator", translate)
    fleet.add_peer(
        "boss",
        behaviors.fan_out(via=fleet, peers=["translator", "worker"], timeout=5),
        a2a=True,
        labels={"protocol": "a2a"},  # the fleet's tools read its card and speak A2A to it
    )
    fleet.add_peer("top", behaviors.delegate("boss", via=fleet, timeout=8))
    return fleet


MIXED_TREE = [
    ("", "top"),
    ("└── ", "boss"),
    ("    ├── ", "translator"),
    ("    │   └── ", "worker"),
    ("    └── ", "worker"),
]


@pytest.mark.parametrize("mode", ["in-process", "loopback"])
async def test_a_tree_across_attach_and_a2a_peers_has_each_sub_call_under_its_caller(
    mode: str,
) -> None:
    fleet = mixed_fleet()
    served = await fleet.serve() if mode == "loopback" else None
    tool = served.call_peer(timeout=10) if served else fleet.call_peer(timeout=10)
    try:
        result = await tool.acall(peer="top", prompt="hi")
    finally:
        if served is not None:
            await served.aclose()
    assert result.response == "translator: asked: ok\n\nworker: ok"
    assert shape(fleet) == MIXED_TREE
    records = fleet.calls.records()
    # One record per call: the A2A turns found their callers' records (none of the negative
    # ids of a caller the fleet did not equip), and an A2A call names its task.
    assert len(records) == 5
    assert all(r.call_id > 0 and r.state == "finished" for r in records)
    (boss,) = (r for r in records if r.peer == "boss")
    assert boss.session_id and not boss.session_id.startswith("s-")  # a task id, not a session
    frame = fleet.calls.to_pandas()
    peer_of = dict(zip(frame["call_id"], frame["peer"], strict=True))
    links = sorted(
        (peer_of.get(parent, "you"), peer)
        for parent, peer in zip(frame["parent"], frame["peer"], strict=True)
    )
    assert links == [
        ("boss", "translator"),
        ("boss", "worker"),
        ("top", "boss"),
        ("translator", "worker"),
        ("you", "top"),
    ]
    from coreagent_sdk import call_graph

    edges = {(e.caller, e.callee) for e in call_graph(fleet.calls).edges}
    assert edges == {
        (None, "top"),
        ("top", "boss"),
        ("boss", "translator"),
        ("boss", "worker"),
        ("translator", "worker"),
    }
    await fleet.aclose()


async def test_an_a2a_executor_of_your_own_has_its_calls_under_the_call_it_answers() -> None:
    pytest.importorskip("a2a")
    from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.tasks import TaskUpdater

    fleet = Fleet()
    fleet.add_peer("worker", behaviors.reply("ok"))
    tool = fleet.call_peer(timeout=5)

    class Asks(AgentExecutor):
        async def execute(self, context: Any, event_queue: Any) -> None:
            task = context.current_task or new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            said = (await tool.acall(peer="worker", prompt="go")).response
            await updater.add_artifact([new_text_part(said)], artifact_id="a", last_chunk=True)
            await updater.complete()

        async def cancel(self, context: Any, event_queue: Any) -> None:
            await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()

    own = Asks()
    assert fleet.add_a2a_peer("asker", executor=own).executor is own  # kept as given
    assert (await fleet.call_peer(timeout=10).acall(peer="asker", prompt="x")).response == "ok"
    assert shape(fleet) == [("", "asker"), ("└── ", "worker")]
    await fleet.aclose()
