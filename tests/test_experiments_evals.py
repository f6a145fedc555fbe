"""A scenario's fleet as a Pydantic Evals task, scored by our call-tree scorers."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.experiments import Case, MaxDepth, Outcome

from .experiment_fleets import routing

pytest.importorskip("pydantic_evals")

from simulator.experiments.evals import Scored, dataset, fleet_task


def assertions(report: Any) -> dict[str, dict[str, Any]]:
    return {c.name: {k: v.value for k, v in c.assertions.items()} for c in report.cases}


async def test_a_fleet_is_a_datasets_task_and_our_scorers_its_evaluators() -> None:
    scenario = routing()
    data = dataset(scenario)
    data.evaluators.append(Scored("flat", MaxDepth(1)))
    right = assertions(
        await data.evaluate(fleet_task(scenario, {"error_rate": 0.0}), progress=False)
    )
    assert set(right) == {"disk", "cpu", "logs"}
    assert all(
        a == {"right_answer": True, "right_peer": True, "no_error": True, "flat": False}
        for a in right.values()
    )
    wrong = assertions(
        await data.evaluate(fleet_task(scenario, {"error_rate": 1.0}), progress=False)
    )
    assert all(a["right_peer"] is False and a["no_error"] is True for a in wrong.values())


async def test_the_task_returns_the_outcome_with_its_call_tree_and_takes_a_plain_prompt() -> None:
    task = fleet_task(routing(), {"error_rate": 0.0})
    outcome = await task("Is the disk full?")
    assert isinstance(outcome, Outcome)
    assert outcome.asked == ["storage"] and "81%" in (outcome.answer or "")
    assert (await task(Case("x", "Is the disk full?"))).asked == ["storage"]


async def test_a_scorer_that_does_not_apply_reports_nothing() -> None:
    scenario = routing()
    case = Case("no-expectations", "How is the cpu?")  # no expected text, no expected peer
    data = dataset(scenario)
    data.cases[0].inputs = case
    report = await data.evaluate(fleet_task(scenario), progress=False)
    first = assertions(report)[data.cases[0].name]
    assert "right_peer" not in first and "right_answer" not in first and first["no_error"]
