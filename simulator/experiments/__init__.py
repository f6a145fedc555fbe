"""Experiments over fleets: grids of scenarios run k times, scored, compared, plotted, resumed.

    from simulator.experiments import Case, Experiment, Scenario

    scenario = Scenario("routing", build, cases=[Case("disk", "Is the disk full?",
                        expected="81%", expected_peer="storage")], entry="router")
    results = Experiment(scenario, grid={"persona": ["terse", "careful"]}, k=5).run("run.sqlite")
    results.summary()          # pass rate per setting, with Wilson intervals
    results.confusion()        # routing: expected peer vs the peer asked

A trial builds its own fleet (`Scenario.build`), asks one case, scores the
outcome and its call tree, and closes the fleet; its row goes to the SQLite
file as it arrives, so a rerun skips what is done. Trials run in one event
loop, or on any `concurrent.futures.Executor` (a process pool, a dask
cluster's `client.get_executor()`). Runs need only the simulator; tables
need pandas and tqdm shows progress (the `experiments` extra), plots need
matplotlib (the `jupyter` extra).
"""

from __future__ import annotations

from ._budget import Budget
from ._case_diff import CaseDiff
from ._meta import ExperimentFileError
from ._noisy import NoisyModel
from ._plan import Plan
from ._results import INTERVAL, Results
from ._runner import ScenarioError, arun, run, run_trial
from ._scenario import Case, Experiment, Outcome, Scenario, Scorer, Trial
from ._scorers import (
    MaxDelegations,
    MaxDepth,
    answer_contains,
    no_error,
    no_truncation,
    routed,
)
from ._trial_tree import TrialTree

__all__ = [
    "INTERVAL",
    "Budget",
    "Case",
    "CaseDiff",
    "Experiment",
    "ExperimentFileError",
    "MaxDelegations",
    "MaxDepth",
    "NoisyModel",
    "Outcome",
    "Plan",
    "Results",
    "Scenario",
    "ScenarioError",
    "Scorer",
    "Trial",
    "TrialTree",
    "answer_contains",
    "arun",
    "no_error",
    "no_truncation",
    "routed",
    "run",
    "run_trial",
]
