"""Scenarios for the experiment tests: module-level functions, so process pools can import them.

A router and three specialists on scripted models; the router's routing is
wrong with the probability the setting's ``error_rate`` gives (`NoisyModel`).
"""

from __future__ import annotations

from typing import Any

from coreagent_sdk.models import ScriptedModel, when
from simulator import Fleet, behaviors
from simulator.experiments import Case, Outcome, Scenario, Trial

ANSWERS = {
    "storage": "Disks are 81% full on node-3.",
    "compute": "CPU load is 0.62, steady.",
    "logs": "ERROR disk latency high on node-3.",
}


def router_model() -> ScriptedModel:
    return ScriptedModel(
        when("disk").ask("storage", "{prompt}"),
        when("cpu").ask("compute", "{prompt}"),
        when("log").ask("logs", "{prompt}"),
        when().answer("I route disk, cpu and log questions."),
    )


def build(trial: Trial) -> Fleet:
    from simulator.experiments import NoisyModel

    rate = float(trial.params.get("error_rate", 0.0))
    model: Any = router_model()
    if rate:
        model = NoisyModel(model, rate, trial.seed)
    fleet = Fleet(clock=trial.clock)
    fleet.add_peer("router", behaviors.model(model, persona="You route."))
    for name, text in ANSWERS.items():
        fleet.add_peer(name, behaviors.model(ScriptedModel(when().answer(text), name=name)))
    return fleet


CASES = (
    Case("disk", "Is the disk full?", expected="81%", expected_peer="storage"),
    Case("cpu", "How is the cpu?", expected="0.62", expected_peer="compute"),
    Case("logs", "Any log errors?", expected="latency", expected_peer="logs"),
)


def routing(**options: Any) -> Scenario:
    return Scenario("routing", build, cases=CASES, entry="router", **options)


def tokens_used(outcome: Outcome) -> float:
    return float(outcome.tokens_in + outcome.tokens_out)


def build_flawed(trial: Trial) -> Fleet:
    """The cpu case goes to logs on repetition 0 when the setting's flaw is "flaky-cpu"."""
    flaky = trial.params.get("flaw") == "flaky-cpu" and trial.repetition == 0
    model = ScriptedModel(
        when("disk").ask("storage", "{prompt}"),
        when("cpu").ask("logs" if flaky else "compute", "{prompt}"),
        when("log").ask("logs", "{prompt}"),
    )
    fleet = Fleet(clock=trial.clock)
    fleet.add_peer("router", behaviors.model(model))
    for name, text in ANSWERS.items():
        fleet.add_peer(name, behaviors.model(ScriptedModel(when().answer(text), name=name)))
    return fleet


def flawed(**options: Any) -> Scenario:
    return Scenario("flawed", build_flawed, cases=CASES, entry="router", **options)
