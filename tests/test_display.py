"""HTML and text reprs: parsed back, checked for escaping and bounds."""

from __future__ import annotations

import pytest

from coreagent_sdk import (
    AgentConfig,
    CallLog,
    CallPeerResult,
    CallRecord,
    CallTree,
    DirectoryFunc,
    FakeClock,
    Peer,
    RuntimeCache,
    StaticDirectory,
)
from simulator import Fleet, SimulatedBuilder, SimulatedConfigLoader, behaviors

from .html_parse import Page

HOSTILE = "<script>alert(1)</script>"


def test_a_peer_answering_a_script_tag_shows_the_text_not_a_script() -> None:
    result = CallPeerResult(peer='pe"er<b>', session_id="s-<i>1", response=HOSTILE, duration_ms=7)
    markup = result._repr_html_()
    page = Page(markup)
    assert "script" not in page.tags and "b" not in page.tags and "i" not in page.tags
    assert HOSTILE in page.text
    assert 'pe"er<b>' in page.text and "s-<i>1" in page.text
    assert HOSTILE not in markup  # only its escaped form is in the markup
    assert page.balanced


def test_a_truncated_result_shows_a_badge_a_full_bar_and_where_the_rest_is() -> None:
    answer = "é" * 500  # 1,000 bytes
    result = CallPeerResult(
        peer="writer",
        session_id="s-42",
        response=answer,
        duration_ms=12,
        truncated=True,
        max_response_bytes=1000,
    )
    page = Page(result._repr_html_())
    rows = {r[0]: r[1] for r in page.rows if len(r) == 2}
    assert rows["peer"] == "writer" and rows["session"] == "s-42"
    assert rows["duration"] == "12 ms"
    assert "1,000 / 1,000 bytes" in rows["bytes"]
    assert "truncated" in page.text and "session s-42" in page.text
    widths = [a.get("style") or "" for a in page.attrs]
    assert any("width:100.0%" in w for w in widths)


def test_a_complete_result_shows_its_share_of_the_cap() -> None:
    result = CallPeerResult("p", "s", "x" * 250, 3, max_response_bytes=1000)
    page = Page(result._repr_html_())
    assert "complete" in page.text and "truncated" not in page.text
    assert any("width:25.0%" in (a.get("style") or "") for a in page.attrs)


def test_a_long_answer_has_a_short_readable_repr() -> None:
    result = CallPeerResult("writer", "s-1", "x" * 16_484, 5, truncated=True)
    shown = repr(result)
    assert len(shown) < 300
    assert "truncated=True" in shown and "bytes=16484" in shown and "+16424 chars" in shown
    assert "\n" not in shown


def test_a_huge_answer_is_bounded_in_the_html_too() -> None:
    result = CallPeerResult("writer", "s-1", "y" * 10_000_000, 5)
    markup = result._repr_html_()
    assert len(markup) < 30_000
    assert "more characters not shown" in Page(markup).text


def test_the_wire_json_does_not_carry_the_cap() -> None:
    result = CallPeerResult("p", "s", "ok", 1, max_response_bytes=10)
    assert result.to_dict() == {"peer": "p", "session_id": "s", "response": "ok", "duration_ms": 1}


async def test_a_directory_roster_shows_as_a_table_with_escaped_labels() -> None:
    directory = DirectoryFunc(
        lambda: [
            Peer("prod-1", "http://prod-1.sim", {"team": HOSTILE}),
            Peer("prod-2", "http://prod-2.sim"),
        ]
    )
    roster = await directory.peers()
    assert roster == (
        Peer("prod-1", "http://prod-1.sim", {"team": HOSTILE}),
        Peer("prod-2", "http://prod-2.sim"),
    )
    page = Page(roster._repr_html_())
    assert "script" not in page.tags
    assert page.rows[1:] == [
        ["prod-1", "http://prod-1.sim", f"team={HOSTILE}"],
        ["prod-2", "http://prod-2.sim", ""],
    ]
    assert repr(roster) == 'Roster(2 peers: "prod-1", "prod-2")'
    assert repr(StaticDirectory([Peer("a", "http://a.sim")])._peers) == 'Roster(1 peer: "a")'
    nobody = await DirectoryFunc(lambda: None).peers()
    assert "no peers are registered" in Page(nobody._repr_html_()).text
    assert repr(nobody) == "Roster(0 peers)"  # was "Roster(0 peers: )"


def test_a_static_directory_shows_its_roster() -> None:
    page = Page(StaticDirectory([Peer("a", "http://a.sim")])._repr_html_())
    assert page.rows[1] == ["a", "http://a.sim", ""]


async def test_a_hub_directory_lists_a_roster_that_displays() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", labels={"cluster": "c1"})
    directory = fleet.directory()
    roster = await directory.peers()
    await directory.aclose()
    assert Page(roster._repr_html_()).rows[1] == ["prod-1", "http://prod-1.sim", "cluster=c1"]


async def test_the_cache_shows_resident_instances_in_lru_order_with_leases_and_counters() -> None:
    loader = SimulatedConfigLoader(AgentConfig(id=a, slug=f"slug-<{a}>") for a in "abc")
    cache = RuntimeCache(loader, SimulatedBuilder(), max_instances=2)
    await cache.processor("a")
    await cache.processor("b")
    async with cache.lease("a"):
        await cache.processor("c")  # evicts b, the least recently used
        page = Page(cache._repr_html_())
        assert page.rows[1:] == [["1", "c", "slug-<c>", "0"], ["2", "a", "slug-<a>", "1"]]
        assert "2 of 2 resident" in page.text
        assert "hits 1" in page.text and "misses 3" in page.text and "evictions 1" in page.text
        assert "script" not in page.tags
    shown = repr(cache)
    assert "resident=2" in shown and "hits=1" in shown and "evictions=1" in shown
    await cache.aclose()


async def test_a_fleet_shows_each_peer_with_behaviour_lease_and_state() -> None:
    clock = FakeClock()
    fleet = Fleet(clock=clock)
    fleet.add_peer("prod-1", behaviors.reply("ok"), labels={"cluster": HOSTILE}, ttl=60)
    fleet.add_peer("writer", behaviors.stream(100), ttl=30)
    fleet.add_peer("mortal", heartbeat=False, ttl=30)
    fleet.expire("writer")
    page = Page(fleet._repr_html_())
    assert "script" not in page.tags
    header, *rows = page.rows
    assert header == ["peer", "endpoint", "labels", "behaviour", "lease left", "state", "served at"]
    assert rows[1][:4] == ["prod-1", "http://prod-1.sim", f"cluster={HOSTILE}", "reply"]
    assert rows[1][5] == "live" and rows[1][4].endswith(" s")
    assert rows[2][0] == "writer" and rows[2][3] == "stream" and rows[2][5] == "expired"
    entries = {e.name: e for e in fleet.roster()}
    assert entries["writer"].state == "expired" and entries["writer"].lease_left is None
    assert entries["prod-1"].lease_left is not None and entries["prod-1"].lease_left > 0
    clock.advance(3600)  # the heartbeating peer stays; the one without heartbeats lapses
    entries = {e.name: e for e in fleet.roster()}
    assert entries["prod-1"].state == "live" and 0 < (entries["prod-1"].lease_left or 0) <= 60
    assert (entries["mortal"].state, entries["mortal"].heartbeat) == ("expired", False)
    fleet.revive("writer")
    assert [e.state for e in fleet.roster()] == ["expired", "live", "live"]


async def test_a_served_fleet_shows_its_loopback_urls() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1")
    async with await fleet.serve() as served:
        page = Page(fleet._repr_html_())
        assert page.rows[1][6] == served.urls["prod-1"]
        assert served.urls["hub"] in page.text
    await fleet.aclose()


@pytest.mark.parametrize("rows", [0, 1, 250])
def test_tables_are_bounded_and_say_how_many_rows_they_left_out(rows: int) -> None:
    roster = StaticDirectory([Peer(f"p{i:03}", f"http://p{i}.sim") for i in range(rows)])
    page = Page(roster._repr_html_())
    assert len(page.rows) == 1 + min(rows, 200)
    assert ("50 more rows not shown" in page.text) == (rows == 250)


def test_a_call_log_lists_calls_newest_first() -> None:
    log = CallLog()
    assert "no calls yet" in Page(log._repr_html_()).text
    assert repr(log) == "CallLog(0 calls: none)"


# --- bidi controls: shown as escapes, never obeyed (the text views quote them) ---------


def _tree_with(peer: str) -> CallTree:
    record = CallRecord(
        1, "call_peer", peer, "failed", started=0.0, ended=0.0002, duration_ms=0, parent=None
    )
    return CallTree((record,), opened=True)


@pytest.mark.parametrize(
    "control", ["\u202e", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069", "\u200f", "\u061c"]
)
def test_a_bidi_control_in_a_peer_name_is_shown_as_an_escape_in_an_opened_tree(control) -> None:
    html = _tree_with(f"admin{control}")._repr_html_()
    assert control not in html
    (summary,) = [text for _, text in Page(html).summaries]
    assert summary.startswith(f"admin\\u{ord(control):04x} failed")  # read left to right
    assert f"\\u{ord(control):04x}" in repr(_tree_with(f"admin{control}"))  # as the text view


def test_a_bidi_override_in_an_answer_or_a_roster_is_shown_as_an_escape() -> None:
    result = CallPeerResult(
        peer="p\u202eq", session_id="s\u202e", duration_ms=1, response="ok \u202e done"
    )
    html = result._repr_html_()
    assert "\u202e" not in html and "ok \\u202e done" in Page(html).text
    roster = StaticDirectory([Peer("n\u202em", "http://n.sim")])
    assert "\u202e" not in roster._repr_html_()


def test_line_breaks_and_tabs_in_an_answer_stay_as_they_are_in_html() -> None:
    result = CallPeerResult(peer="p", session_id="s", duration_ms=1, response="line 1\n\tline 2")
    assert "line 1\n\tline 2" in Page(result._repr_html_()).text
