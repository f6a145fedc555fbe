"""Experiments round two: files that never lie, rows in the grid's order, errors before trials."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from coreagent_sdk import Price, PriceTable
from coreagent_sdk.errors import CoreAgentError
from coreagent_sdk.models import ScriptedModel, when
from simulator import Fleet, behaviors
from simulator.experiments import (
    Case,
    Experiment,
    ExperimentFileError,
    Results,
    Scenario,
    ScenarioError,
    Trial,
)

from .experiment_fleets import ANSWERS, CASES, build, flawed, routing

# Parameters


def test_list_and_mixed_parameters_come_back_exactly_from_sqlite_and_parquet(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pyarrow")
    grid = {"tools": [["a", "b"], ["c"]], "cap": [48, "none"], "mode": [None, 1.5]}
    Experiment(routing(), grid=grid).run(tmp_path / "run.sqlite", progress=False)
    loaded = Results.load(tmp_path / "run.sqlite")
    exported = Results.load(loaded.to_parquet(tmp_path / "run.parquet"))
    for results in (loaded, exported):
        settings = {(json.dumps(r["tools"]), r["cap"], r["mode"]) for r in results.rows}
        assert settings == {
            (json.dumps(t), c, m) for t in grid["tools"] for c in grid["cap"] for m in grid["mode"]
        }
        assert all(type(r["cap"]) in (int, str) for r in results.rows)
    assert exported.rows == loaded.rows


def test_a_string_parameter_that_looks_like_json_stays_a_string_in_parquet(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pyarrow")
    results = Experiment(routing(), grid={"tools": ['["a"]', "plain"]}).run(progress=False)
    back = Results.load(results.to_parquet(tmp_path / "run.parquet"))
    assert [r["tools"] for r in back.rows] == [r["tools"] for r in results.rows]
    assert {r["tools"] for r in back.rows} == {'["a"]', "plain"}


# The grid's order


def test_rows_summaries_and_compare_follow_the_grids_order_not_the_finishing_order(
    tmp_path: Path,
) -> None:
    # "slow" comes first in the grid but its trials (all but the first) finish last.
    async def slow_build(trial: Trial) -> Fleet:
        if trial.params["speed"] == "slow":
            await asyncio.sleep(0.02)
        return build(trial)

    scenario = Scenario("routing", slow_build, cases=CASES, entry="router")
    experiment = Experiment(scenario, grid={"speed": ["slow", "fast"]}, k=2)
    results = experiment.run(tmp_path / "run.sqlite", progress=False, concurrency=12)
    assert [r["speed"] for r in results.rows] == ["slow"] * 6 + ["fast"] * 6
    cases = [r["case"] for r in results.rows[:6]]
    assert cases == ["disk", "disk", "cpu", "cpu", "logs", "logs"]
    assert [r["repetition"] for r in results.rows[:2]] == [0, 1]
    assert [r["speed"] for r in results.summary_rows()] == ["slow", "fast"]
    assert results.compare_rows("speed")[0]["vs_baseline"] == "baseline"
    assert results.compare_rows("speed")[0]["speed"] == "slow"
    loaded = Results.load(tmp_path / "run.sqlite")
    assert [r["seed"] for r in loaded.rows] == [r["seed"] for r in results.rows]
    html = results._repr_html_()
    assert html.index(">slow<") < html.index(">fast<")


def test_a_tree_is_found_by_its_trials_key_and_an_unknown_one_is_a_clear_error() -> None:
    results = Experiment(flawed(), grid={"flaw": ["none", "flaky-cpu"]}, k=2).run(progress=False)
    failing = next(r for r in results.rows if not r["passed"])
    key = (failing["scenario"], failing["params"], failing["case"], failing["seed"],
           failing["repetition"])  # fmt: skip
    tree = results.tree(key)
    assert [r.peer for r in tree.children(tree.roots()[0].call_id)] == ["logs"]
    with pytest.raises(IndexError, match=r"no row 10000 \(12 rows: 0 to 11\)"):
        results.tree(10_000)
    with pytest.raises(KeyError, match="no trials with key"):
        results.tree(("flawed", '{"flaw":"bogus"}', "cpu", 1, 0))
    with pytest.raises(TypeError, match="trial's key"):
        results.tree("cpu")  # type: ignore[arg-type]


# Checked before trials run


def test_a_typo_in_the_entry_peer_fails_after_one_trial_naming_the_peers(tmp_path: Path) -> None:
    built: list[Trial] = []

    def counting(trial: Trial) -> Fleet:
        built.append(trial)
        return build(trial)

    scenario = Scenario("routing", counting, cases=CASES, entry="routr")
    with pytest.raises(ScenarioError, match=r"entry 'routr'.*the fleet has: 'compute', 'logs'"):
        Experiment(scenario, k=3).run(tmp_path / "run.sqlite", progress=False)
    assert len(built) == 1
    assert not (tmp_path / "run.sqlite").exists()  # nothing kept that a rerun would skip
    fixed = Scenario("routing", counting, cases=CASES, entry="router")
    results = Experiment(fixed, k=3).run(tmp_path / "run.sqlite", progress=False)
    assert (len(results), results.skipped) == (9, 0)


def test_an_expected_peer_the_fleet_lacks_is_named_before_other_trials() -> None:
    cases = (*CASES, Case("net", "Is the network up?", expected_peer="network"))
    with pytest.raises(ScenarioError, match=r"case 'net''s expected_peer 'network'"):
        Experiment(Scenario("routing", build, cases=cases, entry="router")).run(progress=False)


class FailingModel(ScriptedModel):
    """A scripted model whose every round fails, as a misconfigured vendor model does."""

    async def complete(self, messages: Any, tools: Any) -> Any:
        raise RuntimeError("config_error: no such deployment")


def build_failing_cpu(trial: Trial) -> Fleet:
    fleet = Fleet(clock=trial.clock)
    model: ScriptedModel = ScriptedModel(
        when("disk").ask("storage", "{prompt}"), when().answer("?"), name="router-1"
    )
    if trial.case.name == "cpu":
        model = FailingModel(name="router-1")
    fleet.add_peer("router", behaviors.model(model))
    for name, text in ANSWERS.items():
        fleet.add_peer(name, behaviors.model(ScriptedModel(when().answer(text), name=name)))
    return fleet


PRICES = PriceTable({name: Price(1.0, 2.0) for name in ("router-1", *ANSWERS)})


def test_a_failed_model_round_is_priced_by_the_models_name_and_its_rows_are_kept(
    tmp_path: Path,
) -> None:
    scenario = Scenario("priced", build_failing_cpu, cases=CASES, entry="router", prices=PRICES)
    results = Experiment(scenario, k=2).run(tmp_path / "run.sqlite", progress=False)
    assert len(results) == 6
    cpu = [r for r in results.rows if r["case"] == "cpu"]
    assert all(r["error_kind"] and r["cost"] is not None for r in cpu)
    assert all(r["cost"] > 0 for r in results.rows if r["case"] == "disk")


def test_a_model_the_price_table_lacks_stops_the_run_keeping_its_rows(tmp_path: Path) -> None:
    # The first trial is priced; "logs" is not in the table and is asked only by the logs case.
    prices = PriceTable({name: Price(1.0, 2.0) for name in ("scripted", "storage", "compute")})
    scenario = routing(prices=prices)
    with pytest.raises(ScenarioError, match=r'no price for model "logs".*trials done are kept'):
        Experiment(scenario, k=2).run(tmp_path / "run.sqlite", progress=False)
    kept = Results.load(tmp_path / "run.sqlite")
    assert len(kept) >= 2 and all(r["cost"] is not None for r in kept.rows)
    assert "logs" not in {r["case"] for r in kept.rows}  # an unpriced row is never kept


def test_a_scorer_may_return_numpy_scalars() -> None:
    np = pytest.importorskip("numpy")
    scenario = routing(scorers={"right": lambda o: np.bool_(o.answer is not None),
                                "n_calls": lambda o: np.int64(len(o.tree.records))})  # fmt: skip
    results = Experiment(scenario).run(progress=False)
    assert [(r["right"], r["n_calls"]) for r in results.rows] == [(True, 2)] * 3
    assert all(type(r["right"]) is bool and type(r["n_calls"]) is int for r in results.rows)


# Files that are not this experiment's


def _counting_routing() -> tuple[Scenario, list[Trial]]:
    built: list[Trial] = []

    def counting(trial: Trial) -> Fleet:
        built.append(trial)
        return build(trial)

    return Scenario("routing", counting, cases=CASES, entry="router"), built


def test_another_applications_sqlite_file_is_refused_untouched_before_any_trial(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    before = path.read_bytes()
    scenario, built = _counting_routing()
    with pytest.raises(ExperimentFileError, match=r"app\.sqlite.*another application.*users"):
        Experiment(scenario).run(path, progress=False)
    assert built == [] and path.read_bytes() == before


def test_a_file_with_a_damaged_row_is_refused_naming_the_row_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    Experiment(routing()).run(path, progress=False)
    db = sqlite3.connect(path)
    db.execute("UPDATE trials SET row = '{oops' WHERE rowid = 2")
    db.commit()
    db.close()
    scenario, built = _counting_routing()
    with pytest.raises(ExperimentFileError, match=r"rowid 2.*DELETE FROM trials WHERE rowid = 2"):
        Experiment(scenario, k=2).run(path, progress=False)
    assert built == []
    with pytest.raises(ExperimentFileError, match="rowid 2"):
        Results.load(path)


def test_a_damaged_or_foreign_file_is_refused_before_any_trial(tmp_path: Path) -> None:
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database " * 200)
    torn = tmp_path / "torn.sqlite"
    Experiment(routing(), k=20).run(torn, progress=False)
    data = bytearray(torn.read_bytes())
    data[4096 + 100 : 4096 + 400] = b"\xff" * 300  # the first page after the header's
    torn.write_bytes(bytes(data))
    for path in (text, torn):
        scenario, built = _counting_routing()
        with pytest.raises(ExperimentFileError, match=str(path.name)):
            Experiment(scenario, k=20).run(path, progress=False)
        assert built == []


def test_another_experiments_file_is_refused_and_a_grown_grid_is_the_same_experiment(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.sqlite"
    Experiment(routing(), grid={"error_rate": [0.0]}).run(path, progress=False)
    grown = Experiment(routing(), grid={"error_rate": [0.0, 0.5]}, k=2).run(path, progress=False)
    assert (len(grown), grown.skipped) == (12, 3)
    for other, why in (
        (Experiment(flawed(), grid={"error_rate": [0.0]}), "holds scenario 'routing'"),
        (Experiment(routing(), grid={"persona": ["x"]}), "has the parameters error_rate"),
        (Experiment(routing(scorers={}), grid={"error_rate": [0.0]}), "was scored by"),
    ):
        with pytest.raises(ExperimentFileError, match=why):
            other.run(path, progress=False)
    record = Results.load(path).experiment
    assert record is not None
    assert (record["scenario"], record["entry"], record["k"], record["seeds"]) == (
        "routing", "router", 2, [0]
    )  # fmt: skip
    assert record["grid"] == {"error_rate": [0.0, 0.5]}
    assert [c["name"] for c in record["cases"]] == ["disk", "cpu", "logs"]
    assert record["scorers"] == ["right_answer", "right_peer", "no_error"]
    assert record["versions"]["coreagent-sdk"] and len(record["fingerprint"]) == 16


def test_a_smaller_rerun_on_a_larger_grids_file_skips_only_its_own_trials(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    Experiment(routing(), grid={"error_rate": [0.0, 0.5]}, k=2).run(path, progress=False)
    smaller = Experiment(routing(), grid={"error_rate": [0.0]}, k=1).run(path, progress=False)
    assert smaller.skipped == 3  # its own 3 trials, not the file's 12 keys
    assert len(smaller) == 12  # the file's other rows are still there


def test_plan_and_missing_say_what_a_run_would_do_before_it_does(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    experiment = Experiment(routing(), grid={"error_rate": [0.0, 0.5]}, k=2)
    assert repr(experiment.plan(path)) == f"Plan({str(path)!r}: 12 trials, 0 done, 12 to run)"
    assert not path.exists()  # planning makes no file
    Experiment(routing(), grid={"error_rate": [0.0]}, k=2).run(path, progress=False)
    plan = experiment.plan(path)
    assert (plan.trials, plan.done, len(plan.to_run)) == (12, 6, 6)
    assert {json.loads(k[1])["error_rate"] for k in plan.to_run} == {0.5}
    assert plan.to_run == tuple(t.key for t in experiment.trials())[6:]
    with pytest.raises(ExperimentFileError, match="holds scenario 'routing'"):
        Experiment(flawed()).plan(path)
    stopped = Results.load(path)
    assert stopped.missing() == []
    db = sqlite3.connect(path)
    db.execute("DELETE FROM trials WHERE rowid = 1")
    db.commit()
    db.close()
    gone = Results.load(path).missing()
    assert gone == [next(iter(experiment.trials())).key]


WRITER = """
import sys
sys.path.insert(0, {root!r})
from simulator.experiments import Experiment, Scenario
from tests.experiment_fleets import CASES, build

def held(trial):
    if trial.repetition == 0 and trial.case.name == "disk":
        print("started", flush=True)
        sys.stdin.readline()  # holds the file until the test has tried it
    return build(trial)

scenario = Scenario("routing", held, cases=CASES, entry="router")
print(len(Experiment(scenario, k=2).run(sys.argv[1], progress=False)), flush=True)
"""


def test_a_second_process_on_the_same_file_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(root=str(Path(__file__).parent.parent)))
    first = subprocess.Popen(
        [sys.executable, str(script), str(path)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == "started"  # it holds the file now
        scenario, built = _counting_routing()
        with pytest.raises(ExperimentFileError) as refused:
            Experiment(scenario, k=2).run(path, progress=False)
        assert "is being written by another run" in str(refused.value)
        assert "\n" not in str(refused.value) and built == []
        out, err = first.communicate("go\n", timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
    assert out.strip().splitlines()[-1] == "6", err
    assert len(Results.load(path)) == 6
    # The lock went with the process: a run now gets as far as reading the file's record.
    with pytest.raises(ExperimentFileError, match="made by other code"):
        Experiment(routing(), k=2).run(path, progress=False)


# Errors


def test_experiment_errors_show_only_the_users_frames_in_ipython() -> None:
    pytest.importorskip("IPython")
    code = textwrap.dedent(
        """
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        ip.run_cell('''
        from tests.experiment_fleets import CASES
        from simulator.experiments import Experiment, Scenario
        def build(trial):
            raise ValueError("my bug")
        Experiment(Scenario("bad", build, cases=CASES, entry="router")).run(progress=False)
        ''')
        """
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    text = shown.stdout + shown.stderr
    assert "ScenarioError" in text and "my bug" in text, text
    assert "_runner.py" not in text and "asyncio" not in text, text
    assert issubclass(ScenarioError, CoreAgentError)
    assert issubclass(ExperimentFileError, CoreAgentError)


def test_a_grid_whose_names_are_not_in_alphabetical_order_resumes_as_itself(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.sqlite"
    grid = {"persona": ["terse"], "error_rate": [0.0]}
    Experiment(routing(), grid=grid).run(path, progress=False)
    again = Experiment(routing(), grid={**grid, "persona": ["terse", "careful"]}).run(
        path, progress=False
    )
    assert (again.skipped, len(again), again.params) == (3, 6, ["persona", "error_rate"])
    assert [r["persona"] for r in again.rows] == ["terse"] * 3 + ["careful"] * 3
