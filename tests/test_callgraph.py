"""`call_graph`: who called whom, with counts, failures and median latency, drawn as SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from coreagent_sdk import CallEdge, CallGraph, CallLog, CallPeerEvent, CallRecord, call_graph
from coreagent_sdk._display._callgraph import MAX_DRAWN
from simulator import Fleet, behaviors

from .html_parse import Page

SVG = "{http://www.w3.org/2000/svg}"


def _record(
    call_id: int, peer: str, parent: int | None, ms: int, state: str = "finished"
) -> CallRecord:
    return CallRecord(
        call_id,
        "call_peer",
        peer,
        state,
        started=float(call_id),
        ended=float(call_id) + ms / 1000,
        duration_ms=ms,
        truncated=state == "truncated",
        parent=parent,
    )


def test_each_edge_counts_the_calls_failures_and_median_duration_between_two_agents() -> None:
    records = [
        _record(1, "router", None, 100),
        _record(2, "storage", 1, 10),
        _record(3, "router", None, 300),
        _record(4, "storage", 3, 30),
        _record(5, "storage", 3, 50, state="failed"),
        _record(6, "logs", 3, 5, state="truncated"),
        _record(7, "storage", None, 7),
    ]
    graph = call_graph(records)
    assert graph.agents == ("logs", "router", "storage")
    assert graph.edges == (
        CallEdge("router", "storage", 3, failures=1, median_ms=30.0),
        CallEdge(None, "router", 2, median_ms=200.0),
        CallEdge(None, "storage", 1, median_ms=7.0),
        CallEdge("router", "logs", 1, truncated=1, median_ms=5.0),
    )
    assert graph.edges[0].label == "3 calls · 1 failed · 30 ms"
    table = graph.to_pandas() if _has_pandas() else None
    if table is not None:
        assert list(table["caller"]) == ["router", "you", "you", "router"]
        assert list(table["calls"]) == [3, 2, 1, 1]


def _has_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_call_still_running_has_no_duration_to_count() -> None:
    log = CallLog()
    log.on_event(CallPeerEvent("started", "call_peer", "slow", call_id=1))
    (edge,) = call_graph(log).edges
    assert edge == CallEdge(None, "slow", 1, median_ms=None) and edge.label == "1 call"


async def test_a_fleets_graph_shows_its_agents_that_took_no_calls_too() -> None:
    fleet = Fleet()
    fleet.add_peer("zone", behaviors.fan_out(via=fleet, labels={"tier": "node"}, timeout=5))
    for node in ("n1", "n2"):
        fleet.add_peer(node, behaviors.reply("ok"), labels={"tier": "node"})
    fleet.add_peer("idle", behaviors.reply("zzz"))
    await fleet.call_peer(timeout=10).acall(peer="zone", prompt="pods?")
    graph = call_graph(fleet)
    assert graph.agents == ("idle", "n1", "n2", "zone")
    assert {(e.caller, e.callee, e.calls) for e in graph.edges} == {
        (None, "zone", 1),
        ("zone", "n1", 1),
        ("zone", "n2", 1),
    }
    assert call_graph(fleet.calls.tree()).edges == call_graph(fleet.calls).edges == graph.edges
    svg = ET.fromstring(graph.to_svg())
    boxes = [t.text for t in svg.iter(f"{SVG}text")]
    assert {"you", "zone", "n1", "n2", "idle"} <= set(boxes) and "took no calls:" in boxes
    await fleet.aclose()


def test_the_drawing_escapes_names_and_fetches_nothing() -> None:
    records = [_record(1, '<script>alert("x")</script>', None, 5), _record(2, "a&b", 1, 5)]
    graph = call_graph(records)
    svg_text = graph.to_svg()
    svg = ET.fromstring(svg_text)  # well-formed: every name escaped
    assert not [e for e in svg.iter() if e.tag in (f"{SVG}script", f"{SVG}image", f"{SVG}a")]
    assert "http" not in svg_text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    page = Page(graph._repr_html_())
    assert "script" not in page.tags and page.balanced
    assert '<script>alert("x")' in page.text and "a&b" in page.text


def test_calls_in_a_cycle_and_to_itself_are_drawn_without_looping() -> None:
    records = [
        _record(1, "a", None, 5),
        _record(2, "b", 1, 5),
        _record(3, "a", 2, 5),
        _record(4, "a", 3, 5),
    ]
    graph = call_graph(records)
    assert {(e.caller, e.callee) for e in graph.edges} == {
        (None, "a"),
        ("a", "b"),
        ("b", "a"),
        ("a", "a"),
    }
    svg = ET.fromstring(graph.to_svg())
    assert len(list(svg.iter(f"{SVG}path"))) == 2 + 4  # two arrowheads, four edges


def test_a_graph_of_many_agents_draws_the_busiest_and_says_how_many_are_not_drawn() -> None:
    records = [_record(1, "hub", None, 5)] + [
        _record(i, f"agent-{i:03}", 1, 5) for i in range(2, MAX_DRAWN + 12)
    ]
    records += [_record(1_000, "agent-051", 1, 5)]  # the busiest leaf, last by name
    graph = call_graph(records)
    assert len(graph.agents) == MAX_DRAWN + 11
    svg = ET.fromstring(graph.to_svg())
    drawn = [g for g in svg.iter(f"{SVG}g")]
    assert len(drawn) == MAX_DRAWN + 1  # the busiest agents, and "you"
    texts = [t.text or "" for t in svg.iter(f"{SVG}text")]
    assert "agent-051" in texts and "hub" in texts and "agent-050" not in texts
    assert f"11 more agents not drawn (the busiest {MAX_DRAWN} are)" in texts


def test_a_source_that_holds_no_calls_is_refused_naming_what_to_give() -> None:
    with pytest.raises(TypeError, match="give a fleet, a CallLog"):
        call_graph("fleet")
    assert repr(call_graph([])) == "CallGraph(0 agents, 0 edges: no calls)"
    assert isinstance(call_graph(CallLog()), CallGraph)


# --- names a model or a hub chose: control characters, entities, bidi controls ------------


@pytest.mark.parametrize("control", ["\x01", "\x1b", "\x7f", "\ufffe", "\ud800"])
def test_a_name_holding_a_control_character_still_makes_well_formed_svg(control: str) -> None:
    name = f"peer{control}[31m"
    graph = call_graph([_record(1, name, None, 5)])
    root = ET.fromstring(graph.to_svg())  # raises on a character XML 1.0 does not allow
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    code = ord(control)
    escape = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    assert f"peer{escape}[31m" in texts  # shown as its escape, as the text views quote it
    assert ET.fromstring(f"<div>{graph._repr_html_()}</div>") is not None


def test_a_long_name_cut_next_to_an_entity_keeps_the_svg_well_formed() -> None:
    # Drawn boxes hold 20 characters: the cut falls on the first "&". Cutting the escaped
    # text instead would split "&amp;" and break the whole drawing.
    name = "x" * 18 + "&&<<" + "y" * 10
    graph = call_graph([_record(1, name, None, 5)])
    root = ET.fromstring(graph.to_svg())
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "x" * 18 + "&…" in texts
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert name in titles  # the whole name, in the box's tooltip


def test_a_name_cut_inside_a_shown_escape_still_makes_well_formed_svg() -> None:
    name = "x" * 17 + "\x1b" * 5
    root = ET.fromstring(call_graph([_record(1, name, None, 5)]).to_svg())
    assert any((t.text or "").startswith("x" * 17 + "\\x") for t in root.iter(f"{SVG}text"))


def test_a_right_to_left_override_in_a_name_is_shown_not_obeyed_in_the_drawing() -> None:
    name = "admin\u202e"
    svg = call_graph([_record(1, name, None, 5, state="failed")]).to_svg()
    assert "\u202e" not in svg and "admin\\u202e" in svg
