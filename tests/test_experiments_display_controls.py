"""The experiments' views show controls and bidi overrides as escapes, as the core's views do.

`Results`, `TrialTree` and `CaseDiff` escaped with `html.escape` only: a grid value or a case
holding U+202E (right-to-left override) reversed the rest of its row in a notebook, and C0/C1
controls or DEL went into the markup raw, unlike the core's views. They now use the core's
public `escape_html`, pinned here to the same behaviour as the core's own views.
"""

from __future__ import annotations

import json

import pytest

from coreagent_sdk import CallPeerResult, escape_html
from simulator.experiments import Experiment
from simulator.experiments._results import Results

from .experiment_fleets import flawed

CONTROLS = ["\u202e", "\u2066", "\u200f", "\x1b", "\x07", "\x7f", "\x85", "\x9b", "\u2028"]


def _row(persona: str) -> dict[str, object]:
    return {
        "scenario": "s", "params": json.dumps({"persona": persona}), "persona": persona,
        "case": "c", "seed": 1, "repetition": 0, "passed": True, "duration_ms": 1.0,
        "tokens_in": 1, "tokens_out": 1, "cost": None, "error_kind": None,
    }  # fmt: skip


@pytest.mark.parametrize("control", CONTROLS)
def test_a_grid_value_holding_a_control_is_shown_as_its_escape_in_the_results_table(
    control: str,
) -> None:
    shown = Results([_row(f"admin{control}<b>")], stopped=None)._repr_html_()
    assert control not in shown
    assert f"admin{escape_html(control)}&lt;b&gt;" in shown
    assert escape_html(control) == (
        f"\\x{ord(control):02x}" if ord(control) < 0x100 else f"\\u{ord(control):04x}"
    )


@pytest.mark.parametrize("control", CONTROLS)
def test_escape_html_is_what_the_cores_own_views_do(control: str) -> None:
    text = f'ok {control} "done" <i>'
    core = CallPeerResult(peer="p", session_id="s", duration_ms=1, response=text)._repr_html_()
    assert escape_html(text) in core and control not in core


def test_a_trial_tree_and_a_case_diff_show_a_bidi_override_as_its_escape() -> None:
    grid = {"flaw": ["none", "flaky-cpu"], "note": ["x\u202ey\x1b"]}
    results = Experiment(flawed(), grid=grid, k=2).run(progress=False)
    index = next(i for i, r in enumerate(results.rows) if not r["passed"])
    for html in (
        results._repr_html_(),
        results.tree(index)._repr_html_(),
        results.compare_cases("flaw")._repr_html_(),
    ):
        assert "\u202e" not in html and "\x1b" not in html
    assert "x\\u202ey" in results.tree(index)._repr_html_()  # the override as its escape
