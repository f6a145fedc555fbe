"""A failing trial's tree explains itself: its scores, the route expected and taken, the mark."""

from __future__ import annotations

import re

from coreagent_sdk import CallTree
from simulator.experiments import Experiment, TrialTree

from .experiment_fleets import flawed


def test_a_failing_trials_tree_shows_its_scores_the_route_and_marks_the_wrong_call() -> None:
    grid = {"flaw": ["none", "flaky-cpu"], "note": ["<b>x</b>"]}
    results = Experiment(flawed(), grid=grid, k=2).run(progress=False)
    index = next(i for i, r in enumerate(results.rows) if not r["passed"])
    tree = results.tree(index)
    assert isinstance(tree, TrialTree) and isinstance(tree, CallTree)
    assert (tree.passed, tree.expected_peer, tree.asked) == (False, "compute", "logs")
    assert tree.scores == {"right_answer": False, "right_peer": False, "no_error": True}
    wrong = tree.children(tree.roots()[0].call_id)[0]
    assert tree.wrong_call == wrong.call_id and wrong.peer == "logs"
    text = repr(tree).splitlines()
    assert "FAILED (right_answer, right_peer)" in text[0]
    assert text[1] == "route: expected 'compute', asked 'logs' (wrong)"
    assert text[-1].startswith("└── logs") and "wrong route: expected 'compute'" in text[-1]
    html = tree._repr_html_()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html  # the run's text escaped
    marked = re.search(rf"call {wrong.call_id}</span> <span[^>]*>wrong route: expected", html)
    assert marked is not None
    assert "right_peer: False" in html and "no_error: True" in html


def test_a_passing_trials_tree_marks_nothing() -> None:
    results = Experiment(flawed(), grid={"flaw": ["none"]}).run(progress=False)
    tree = results.tree(0)
    assert tree.passed is True and tree.wrong_call is None
    assert "wrong route" not in tree._repr_html_() and "wrong" not in repr(tree)
    assert repr(tree).splitlines()[1] == "route: expected 'storage', asked 'storage' (right)"


def test_two_settings_case_by_case_say_which_flipped_with_answers_and_trees() -> None:
    results = Experiment(flawed(), grid={"flaw": ["none", "flaky-cpu"]}, k=2).run(progress=False)
    diff = results.compare_cases("flaw")
    assert (diff.before, diff.after) == ("flaw='none'", "flaw='flaky-cpu'")
    assert diff.counts() == {"same: passed": 5, "broke": 1}
    (broke,) = diff.flipped
    assert (broke["case"], broke["repetition"], broke["change"]) == ("cpu", 0, "broke")
    assert "0.62" in broke["before_answer"] and "latency" in broke["after_answer"]
    assert results.tree(broke["after_key"]).asked == "logs"
    frame = diff.to_pandas()
    assert list(frame["change"]).count("broke") == 1 and len(frame) == 6
    html = diff._repr_html_()
    assert html.count("call tree</summary>") == 2  # both trees of the flipped pair, no more
    assert html.count("<tr>") == 2  # the header and the flipped pair: the same ones counted
    assert "5 pairs the same: .to_pandas() has every pair" in html
    assert repr(diff) == (
        "CaseDiff(flaw='none' -> flaw='flaky-cpu': 6 pairs: 1 broke, 5 same: passed)"
    )


def test_two_runs_case_by_case_pair_by_setting_case_and_repetition() -> None:
    from simulator.experiments import Results

    results = Experiment(flawed(), grid={"flaw": ["flaky-cpu"]}, k=2).run(progress=False)
    fixed = Results([dict(r, passed=True) for r in results.rows])
    diff = Results.case_diff(results, fixed)
    assert diff.counts() == {"fixed": 1, "same: passed": 5}
    assert diff.flipped[0]["flaw"] == "flaky-cpu"
    one_side = Results.case_diff(results, Results(results.rows[:3]))
    assert one_side.counts()["one side only"] == 3
