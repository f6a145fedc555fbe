"""Experiments past one process: a process pool and a dask cluster give the same table.

Slow (real processes): CI runs them in its slow step. Dask runs on 127.0.0.1 only,
without its dashboard.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from simulator import Fleet
from simulator.experiments import Experiment, Results, Scenario, ScenarioError, Trial

from .experiment_fleets import CASES, build, routing

pytestmark = pytest.mark.slow

TIMING = {"duration_ms", "tree"}


def outcomes(results: Results) -> list[dict[str, Any]]:
    rows = [{k: v for k, v in r.items() if k not in TIMING} for r in results.rows]
    return sorted(rows, key=lambda r: (r["params"], r["case"], r["repetition"]))


def experiment() -> Experiment:
    return Experiment(routing(), grid={"error_rate": [0.2, 0.6]}, k=4, seed=11)


@pytest.fixture(scope="module")
def in_process() -> Results:
    return experiment().run(progress=False)


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    # spawn: a fresh interpreter per worker (forking a threaded pytest is unsafe), which must
    # import the scenario's module: what a user's pool on macOS or Python 3.14 does too.
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as executor:
        yield executor


def test_a_process_pool_gives_the_same_table_as_one_process(
    in_process: Results, pool: ProcessPoolExecutor, tmp_path: Path
) -> None:
    results = experiment().run(
        tmp_path / "pool.sqlite", executor=pool, chunk_size=3, progress=False
    )
    assert outcomes(results) == outcomes(in_process)
    assert 0 < sum(r["passed"] for r in results.rows) < len(results)


def test_a_process_pool_refuses_a_notebook_style_scenario_before_any_trial(
    pool: ProcessPoolExecutor, tmp_path: Path
) -> None:
    built: list[Any] = []

    def build_here(trial: Trial) -> Fleet:  # a closure, as a notebook cell defines it
        built.append(trial)
        return build(trial)

    scenario = Scenario("cell", build_here, cases=CASES, entry="router")
    with pytest.raises(ScenarioError, match="top level of an importable module"):
        Experiment(scenario, k=1).run(tmp_path / "x.sqlite", executor=pool, progress=False)
    assert built == [] and not (tmp_path / "x.sqlite").exists()


@pytest.fixture
def loggers_kept() -> Iterator[None]:
    """Loggers and the environment put back: dask configures its loggers and sets variables."""
    environment = dict(os.environ)
    manager = logging.Logger.manager
    before = {
        name: (lg.level, list(lg.handlers), list(lg.filters), lg.propagate, lg.disabled)
        for name, lg in manager.loggerDict.items()
        if isinstance(lg, logging.Logger)
    }
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environment)
        for name, lg in list(manager.loggerDict.items()):
            if isinstance(lg, logging.Logger):
                level, handlers, filters, propagate, disabled = before.get(
                    name, (logging.NOTSET, [], [], True, False)
                )
                lg.setLevel(level)
                lg.handlers[:], lg.filters[:] = handlers, filters
                lg.propagate, lg.disabled = propagate, disabled


def test_a_dask_cluster_gives_the_same_table_and_takes_a_notebooks_functions(
    in_process: Results, tmp_path: Path, loggers_kept: None
) -> None:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        executor = client.get_executor()
        results = experiment().run(
            tmp_path / "dask.sqlite", executor=executor, chunk_size=3, progress=False
        )
        assert outcomes(results) == outcomes(in_process)

        def build_here(trial: Trial) -> Fleet:  # cloudpickle sends a cell's function by value
            return build(trial)

        scenario = Scenario("cell", build_here, cases=CASES, entry="router")
        cell = Experiment(scenario, k=1).run(executor=executor, progress=False)
        assert len(cell) == 3 and all(r["passed"] for r in cell.rows)
