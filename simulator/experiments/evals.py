"""Pydantic Evals with fleets: a scenario's fleet as a `Dataset`'s task, its scorers as evaluators.

    from simulator.experiments.evals import dataset, fleet_task

    report = dataset(scenario).evaluate_sync(fleet_task(scenario, {"persona": "careful"}))
    report.print()

Pydantic Evals (``pip install pydantic-evals``; not a dependency of ours) brings
datasets, cases, evaluators and its report; this module brings the fleet: the
task builds the scenario's fleet for each case, asks it, and returns the
`Outcome` (the answer and the whole call tree), and `Scored` runs any of our
scorers (`routed`, `MaxDepth`, your own) as a Pydantic Evals evaluator. What
stays ours is what Pydantic Evals does not do for fleets: seeded grids, k
repetitions with pass^k, resuming from a file and executors (see
`Experiment`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from coreagent_sdk import FakeClock

from ._runner import run_trial
from ._scenario import Case, Outcome, Scenario, Scorer, Trial, params_text, trial_seed

try:
    import pydantic_evals
    from pydantic_evals.evaluators import Evaluator, EvaluatorContext
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "simulator.experiments.evals: needs Pydantic Evals: pip install pydantic-evals"
    ) from exc

__all__ = ["Scored", "dataset", "fleet_task"]


def fleet_task(
    scenario: Scenario, params: Mapping[str, Any] | None = None, *, seed: int = 0
) -> Callable[[Case | str], Awaitable[Outcome]]:
    """A Pydantic Evals task: each call builds the scenario's fleet in setting `params` and asks.

    The task takes our `Case` (its expected answer and peer travel with it,
    for `Scored` evaluators) or a plain prompt. Its seed derives from `seed`,
    the setting and the case, so the same case gets the same seed on every
    call (for k seeded repetitions, use `Experiment`).
    """
    setting = dict(params or {})
    text = params_text(setting)

    async def task(inputs: Case | str) -> Outcome:
        case = inputs if isinstance(inputs, Case) else Case("prompt", str(inputs))
        drawn = trial_seed(seed, scenario.name, text, f"{case.name}\x00{case.prompt}", 0)
        clock = FakeClock() if scenario.fake_clock else None
        return await run_trial(scenario, Trial(scenario.name, setting, case, 0, drawn, clock))

    task.__name__ = f"fleet_{scenario.name}"
    return task


@dataclass
class Scored(Evaluator[Any, Any, Any]):
    """One of our scorers as a Pydantic Evals evaluator of a `fleet_task`'s `Outcome`.

    A scorer's None (it does not apply to this case) reports nothing.

    Attributes:
        name: The result's name in the report.
        scorer: The scorer (a function of an `Outcome`).
    """

    name: str
    scorer: Scorer

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> Any:
        """The scorer's value for the task's output, under `name`."""
        output = ctx.output
        if not isinstance(output, Outcome):
            raise TypeError(
                f"Scored: {self.name!r} scores a fleet_task's Outcome, got "
                f"{type(output).__name__}; evaluate the dataset with fleet_task(scenario, ...)"
            )
        value = self.scorer(output)
        return {} if value is None else {self.name: value}

    def get_default_evaluation_name(self) -> str:
        return self.name


def dataset(scenario: Scenario, *, name: str | None = None) -> Any:
    """A `pydantic_evals.Dataset` of the scenario's cases, evaluated by its scorers.

    Each case's inputs are our `Case` (so `routed` and `answer_contains`
    see what they expect), its ``expected_output`` the expected text and its
    metadata the expected peer, for evaluators of your own.
    """
    cases = [
        pydantic_evals.Case(
            name=c.name,
            inputs=c,
            expected_output=c.expected,
            metadata={"expected_peer": c.expected_peer, **dict(c.metadata)},
        )
        for c in scenario.cases
    ]
    evaluators = [Scored(n, s) for n, s in scenario.scorers.items()]
    return pydantic_evals.Dataset(name=name or scenario.name, cases=cases, evaluators=evaluators)
