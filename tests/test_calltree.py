"""`CallTree`: a call log's records arranged as delegation trees, in text and in HTML."""

from __future__ import annotations

from coreagent_sdk import CallLog, CallPeerEvent, CallRecord, CallTree

from .html_parse import Page


def _log(edges: list[tuple[int, str, int | None]]) -> CallLog:
    """A log with one finished call per (id, peer, parent), started in list order."""
    clock = iter(float(i) for i in range(1_000))
    log = CallLog(timer=lambda: next(clock))
    for call_id, peer, parent in edges:
        log.on_event(CallPeerEvent("started", "call_peer", peer, call_id=call_id), parent=parent)
    for call_id, peer, _ in edges:
        log.on_event(CallPeerEvent("finished", "call_peer", peer, "s", 7, call_id=call_id))
    return log


REGION = [
    (1, "region", None),
    (2, "zone-a", 1),
    (3, "zone-b", 1),
    (4, "node-a1", 2),
    (5, "node-b1", 3),
    (6, "node-a2", 2),
    (7, "alone", None),
]


def test_the_log_keeps_each_calls_parent_from_the_first_event_that_gives_it() -> None:
    log = CallLog()
    log.on_event(CallPeerEvent("started", "call_peer", "a", call_id=2), parent=1)
    log.on_event(CallPeerEvent("finished", "call_peer", "a", call_id=2), parent=9)
    log.on_event(CallPeerEvent("started", "call_peer", "b", call_id=3))
    log.on_event(CallPeerEvent("started", "call_peer", "c", call_id=4), parent=4)  # itself
    assert [r.parent for r in log.records()] == [1, None, None]


def test_calls_sit_under_the_call_that_made_them_depth_first_oldest_first() -> None:
    tree = _log(REGION).tree()
    assert [(prefix, r.peer) for prefix, r in tree.walk()] == [
        ("", "region"),
        ("├── ", "zone-a"),
        ("│   ├── ", "node-a1"),
        ("│   └── ", "node-a2"),
        ("└── ", "zone-b"),
        ("    └── ", "node-b1"),
        ("", "alone"),
    ]
    assert [r.peer for r in tree.roots()] == ["region", "alone"]
    assert [r.peer for r in tree.children(2)] == ["node-a1", "node-a2"]
    assert tree.depth() == 3
    assert repr(tree).splitlines()[:3] == [
        "CallTree: 7 calls in 2 trees (finished 7)",
        "region finished 7 ms",
        "├── zone-a finished 7 ms",
    ]


def test_a_call_whose_parent_is_not_in_the_log_is_a_root() -> None:
    tree = _log([(5, "orphan", 4), (6, "child", 5)]).tree()
    assert [(prefix, r.peer) for prefix, r in tree.walk()] == [("", "orphan"), ("└── ", "child")]


def test_a_cycle_of_parent_ids_shows_every_call_once_and_ends() -> None:
    records = (
        CallRecord(1, "t", "a", "finished", 0.0, parent=2),
        CallRecord(2, "t", "b", "finished", 1.0, parent=1),
        CallRecord(3, "t", "c", "finished", 2.0, parent=3),
    )
    walked = [r.call_id for _, r in CallTree(records).walk()]
    assert sorted(walked) == [1, 2, 3] and len(walked) == 3


def test_a_deep_tree_is_walked_without_recursion() -> None:
    records = tuple(
        CallRecord(i, "t", f"p{i}", "finished", float(i), parent=i - 1 if i else None)
        for i in range(5_000)
    )
    tree = CallTree(records)
    assert sum(1 for _ in tree.walk()) == 5_000
    assert tree.depth() == 5_000


def test_the_tree_shows_each_call_collapsed_under_its_caller_with_what_peers_said_escaped() -> None:
    log = _log([(1, "<b>boss</b>", None), (2, "<i>w</i>", 1)])
    log.on_event(
        CallPeerEvent("failed", "call_peer", "x", call_id=3, error_type="<script>"), parent=2
    )
    page = Page(log.tree()._repr_html_())
    assert "CallTree: 3 calls in 1 tree (failed 1, finished 2)" in page.text
    assert [(depth, text.split(" ")[0]) for depth, text in page.summaries] == [
        (1, "<b>boss</b>"),
        (2, "<i>w</i>"),
        (3, "x"),
    ]
    assert "<script>" in page.summaries[2][1] and "failed" in page.summaries[2][1]
    assert page.opened == 0, "every level starts collapsed"
    assert not {"b", "i", "script"} & set(page.tags) and page.balanced


def test_an_empty_tree_says_so() -> None:
    tree = CallLog().tree()
    assert repr(tree) == "CallTree: 0 calls in 0 trees (no calls yet)"
    assert tree.depth() == 0 and tree.roots() == []
    assert "no calls yet" in Page(tree._repr_html_()).text
