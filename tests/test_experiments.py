"""Experiments over fleets: the trials, the table, its numbers, resuming, budgets, stopping."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import pickle
import signal
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coreagent_sdk import FakeClock, Price, PriceTable, TurnStep
from coreagent_sdk.models import ScriptedModel, when
from simulator import Fleet, Turn, behaviors
from simulator.experiments import (
    INTERVAL,
    Budget,
    Case,
    Experiment,
    MaxDelegations,
    MaxDepth,
    NoisyModel,
    Results,
    Scenario,
    ScenarioError,
    Trial,
)
from simulator.experiments import _runner as experiments_runner
from simulator.experiments._stats import newcombe, pass_at_k, pass_hat_k, wilson

from .clocks import SteppedTime
from .experiment_fleets import ANSWERS, CASES, build, flawed, routing, tokens_used

# Columns that differ between two runs of the same trial: wall times and the tree's timings.
TIMING = {"duration_ms", "tree"}


def outcomes(results: Results) -> list[dict[str, Any]]:
    """The rows without their timings, in key order: what the same seeds must reproduce."""
    rows = [{k: v for k, v in r.items() if k not in TIMING} for r in results.rows]
    return sorted(rows, key=lambda r: (r["params"], r["case"], r["repetition"]))


def _unpickled(sent: bytes) -> bytes:
    fn, args, kwargs = pickle.loads(sent)
    return pickle.dumps(fn(*args, **kwargs))


class InlinePickler(concurrent.futures.ThreadPoolExecutor):
    """Threads that get each task, and give its result, through pickle, as a process pool does."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.tasks = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.tasks += 1
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            sent = pickle.dumps((fn, args, kwargs))
        except Exception as exc:
            future.set_exception(exc)
            return future
        inner = super().submit(_unpickled, sent)
        inner.add_done_callback(
            lambda done: (
                future.set_exception(done.exception())
                if done.exception()
                else future.set_result(pickle.loads(done.result()))
            )
        )
        return future


# The numbers, against published and hand-computed values


def test_wilson_intervals_match_the_published_values() -> None:
    # Newcombe (1998), Table I: 8/10 -> 0.4902-0.9433; 0/10 -> 0-0.2775; 5/10 -> 0.2366-0.7634.
    assert wilson(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(10, 10)[1] == 1.0
    assert all(math.isnan(v) for v in wilson(0, 0))


def test_newcombe_difference_interval_matches_his_worked_example() -> None:
    # Newcombe (1998), Table II example (a): 56/70 - 48/80 = 0.1833, method 10: 0.0524-0.3339.
    diff, low, high = newcombe(48, 80, 56, 70)
    assert diff == pytest.approx(0.8 - 0.6)
    assert (low, high) == pytest.approx((0.0524, 0.3339), abs=1e-4)


def test_pass_at_k_and_pass_hat_k_are_the_unbiased_estimates() -> None:
    # n=5 tries, c=2 passes, k=2: pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; pass^2 = C(2,2)/C(5,2).
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_at_k(5, 0, 3) == 0.0 and pass_hat_k(5, 5, 3) == 1.0
    with pytest.raises(ValueError, match="k >= 6"):
        pass_hat_k(5, 2, 6)


@pytest.fixture(scope="module")
def tiny() -> Results:
    # flaw=none: 9 of 9 pass; flaw=flaky-cpu: the cpu case goes to logs on repetition 0 only.
    return Experiment(flawed(), grid={"flaw": ["none", "flaky-cpu"]}, k=3).run(progress=False)


def test_a_tiny_grid_has_one_row_per_trial_with_its_key(tiny: Results) -> None:
    assert len(tiny) == 2 * 3 * 3
    keys = {(r["params"], r["case"], r["repetition"]) for r in tiny.rows}
    assert len(keys) == 18
    assert tiny.params == ["flaw"]
    assert tiny.scores == ["right_answer", "right_peer", "no_error"]
    assert len({r["seed"] for r in tiny.rows}) == 18


def test_the_tiny_grids_pass_rates_and_intervals_are_the_hand_computed_ones(tiny: Results) -> None:
    rows = {r["flaw"]: r for r in tiny.summary_rows()}
    assert (rows["none"]["trials"], rows["none"]["passed"]) == (9, 9)
    assert (rows["flaky-cpu"]["trials"], rows["flaky-cpu"]["passed"]) == (9, 8)
    # Wilson 8/9, z = 1.95996: centre (8 + z²/2) / (9 + z²) = 9.9208 / 12.8415 = 0.77256,
    # half width z·sqrt(8·1/9 + z²/4) / (9 + z²) = 1.95996·1.35990 / 12.8415 = 0.20756.
    assert (rows["flaky-cpu"]["low"], rows["flaky-cpu"]["high"]) == pytest.approx(
        (0.77256 - 0.20756, 0.77256 + 0.20756), abs=1e-4
    )
    assert rows["none"]["high"] == 1.0


def test_the_tiny_grids_pass_at_k_and_pass_hat_k_are_the_hand_computed_ones(tiny: Results) -> None:
    rows = {r["flaw"]: r for r in tiny.pass_k_rows(k=2)}
    # flaky-cpu: disk 3/3, cpu 2/3, logs 3/3. pass^2 of cpu = C(2,2)/C(3,2) = 1/3, the others 1.
    assert rows["flaky-cpu"]["pass^k"] == pytest.approx((1 + 1 / 3 + 1) / 3)
    # pass@2 of cpu = 1 - C(1,2)/C(3,2) = 1: two tries always include a passing one.
    assert rows["flaky-cpu"]["pass@k"] == pytest.approx(1.0)
    assert rows["none"]["pass^k"] == 1.0
    assert tiny.pass_k_rows()[0]["k"] == 3  # default: the fewest tries a case has
    with pytest.raises(ValueError, match="k >= 4"):
        tiny.pass_k_rows(k=4)


def test_the_tiny_grids_routing_confusion_counts_each_trial_once(tiny: Results) -> None:
    assert tiny.confusion_rows() == {
        "storage": {"storage": 6},
        "compute": {"compute": 5, "logs": 1},
        "logs": {"logs": 6},
    }


def test_compare_gives_the_difference_with_newcombes_interval(tiny: Results) -> None:
    rows = {r["flaw"]: r for r in tiny.compare_rows("flaw", baseline="none")}
    _, low, high = newcombe(9, 9, 8, 9)
    assert rows["flaky-cpu"]["diff"] == pytest.approx(-1 / 9)
    assert (rows["flaky-cpu"]["diff_low"], rows["flaky-cpu"]["diff_high"]) == (low, high)
    assert rows["flaky-cpu"]["vs_baseline"] == "no clear difference"  # the interval holds 0
    assert rows["none"]["vs_baseline"] == "baseline"
    with pytest.raises(KeyError, match="'bogus'"):
        tiny.compare_rows("flaw", baseline="bogus")


def test_side_by_side_puts_two_runs_per_setting_with_the_change(tiny: Results) -> None:
    before = Results([r for r in tiny.rows if r["flaw"] == "flaky-cpu"])
    fixed = [dict(r, passed=True) for r in before.rows]
    rows = Results.side_by_side_rows(before, Results(fixed))
    assert len(rows) == 1
    assert rows[0]["before_rate"] == pytest.approx(8 / 9) and rows[0]["after_rate"] == 1.0
    assert rows[0]["diff"] == pytest.approx(1 / 9)


def test_each_row_keeps_its_call_tree(tiny: Results) -> None:
    index = next(
        i
        for i, r in enumerate(tiny.rows)
        if r["flaw"] == "flaky-cpu" and r["case"] == "cpu" and r["repetition"] == 0
    )
    row = tiny.rows[index]
    assert (row["asked"], row["expected_peer"], row["passed"]) == ("logs", "compute", False)
    assert (row["right_peer"], row["right_answer"]) == (False, False)
    tree = tiny.tree(index)
    assert [r.peer for r in tree.roots()] == ["router"]
    assert [r.peer for r in tree.children(tree.roots()[0].call_id)] == ["logs"]
    assert tree.roots()[0].steps and all(isinstance(s, TurnStep) for s in tree.roots()[0].steps)
    assert (row["calls"], row["depth"], row["delegations"]) == (2, 2, 1)


# The same seeds, the same table


def test_the_same_seeds_give_the_same_table_in_one_process_and_through_pickles() -> None:
    experiment = Experiment(routing(), grid={"error_rate": [0.3, 0.6]}, k=3, seed=7)
    first = experiment.run(progress=False)
    again = experiment.run(progress=False)
    with InlinePickler() as executor:
        pickled = experiment.run(progress=False, executor=executor, chunk_size=4)
    assert outcomes(first) == outcomes(again) == outcomes(pickled)
    # The probe, the first trial alone (it checks the peers and prices), then the chunks.
    assert executor.tasks == 1 + 1 + math.ceil(17 / 4)
    assert 0 < sum(r["passed"] for r in first.rows) < len(first)  # the noise made a difference
    other_seed = Experiment(routing(), grid={"error_rate": [0.3, 0.6]}, k=3, seed=8)
    assert outcomes(other_seed.run(progress=False)) != outcomes(first)


def test_noisy_model_decides_once_per_turn_from_the_seed_and_prompt() -> None:
    model = NoisyModel(ScriptedModel(when("disk").ask("storage"), when().ask("compute")), 0.5, 3)
    twin = NoisyModel(ScriptedModel(when("disk").ask("storage"), when().ask("compute")), 0.5, 3)
    prompts = [f"disk question {i}" for i in range(200)]
    wrong = [model._rng(p).random() < 0.5 for p in prompts]
    assert wrong == [twin._rng(p).random() < 0.5 for p in prompts]
    assert 60 < sum(wrong) < 140  # about half
    assert NoisyModel(model.model, 0.0, 3).error_rate == 0.0
    with pytest.raises(ValueError, match="two peers"):
        NoisyModel(ScriptedModel(when().ask("one")), 0.5, 1)
    with pytest.raises(ValueError, match="probability"):
        NoisyModel(model.model, 1.5, 1)


async def test_a_noisy_model_at_rate_one_always_asks_another_peer() -> None:
    fleet = Fleet()
    noisy = NoisyModel(ScriptedModel(when("disk").ask("storage"), when().ask("compute")), 1.0, 9)
    fleet.add_peer("router", behaviors.model(noisy))
    fleet.add_peer("storage", behaviors.reply("disk ok"))
    fleet.add_peer("compute", behaviors.reply("cpu ok"))
    try:
        result = await fleet.call_peer().acall(peer="router", prompt="is the disk full?")
    finally:
        await fleet.aclose()
    assert result.response == "compute: cpu ok"


# Resuming


def counting(scenario: Scenario, seen: list[tuple[Any, ...]]) -> Scenario:
    def build_and_count(trial: Trial) -> Fleet:
        seen.append(trial.key)
        return scenario.build(trial)

    return Scenario(scenario.name, build_and_count, cases=scenario.cases, entry=scenario.entry)


def test_a_rerun_skips_exactly_the_trials_its_file_holds(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    seen: list[tuple[Any, ...]] = []
    scenario = counting(flawed(), seen)
    first = Experiment(scenario, grid={"flaw": ["none"]}, k=2).run(path, progress=False)
    assert len(first) == 6 and len(seen) == 6
    done = set(seen)
    seen.clear()
    grown = Experiment(scenario, grid={"flaw": ["none", "flaky-cpu"]}, k=3)
    second = grown.run(path, progress=False)
    every = {t.key for t in grown.trials()}
    assert set(seen) == every - done  # exactly the missing ones
    assert len(seen) == len(set(seen)) == 18 - 6
    assert second.skipped == 6 and len(second) == 18
    seen.clear()
    third = grown.run(path, progress=False)
    assert seen == [] and third.skipped == 18 and len(third) == 18


def test_rows_are_in_the_file_as_they_arrive(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    counts: list[int] = []

    def build_and_look(trial: Trial) -> Fleet:
        db = sqlite3.connect(path)
        try:
            # The table is made with the first row (a run refused before it leaves no file).
            made = db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'trials'")
            counts.append(
                db.execute("SELECT count(*) FROM trials").fetchone()[0] if made.fetchone()[0] else 0
            )
        finally:
            db.close()
        return build(trial)

    scenario = Scenario("look", build_and_look, cases=CASES, entry="router")
    Experiment(scenario, k=2).run(path, concurrency=1, progress=False)
    assert counts == [0, 1, 2, 3, 4, 5]


def test_an_interrupt_stops_the_run_keeping_the_trials_done_and_a_rerun_finishes(
    tmp_path: Path,
) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a KeyboardInterrupt reaches the main thread only")
    path = tmp_path / "run.sqlite"
    built: list[int] = []

    def build_then_interrupt(trial: Trial) -> Fleet:
        built.append(1)
        fleet = build(trial)
        if len(built) == 4:
            # Ctrl-C, or a kernel's interrupt, as the 4th trial starts: a real SIGINT to the
            # main thread, which wakes its wait (_thread.interrupt_main() is seen only when
            # the wait times out, by which time a quiet machine had run all nine trials).
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            # And the 4th trial cannot end but by the interrupt's cancel, however late the
            # main thread runs on a loaded machine.
            fleet.remove_peer("router")
            fleet.add_peer("router", behaviors.never_finish())
        return fleet

    scenario = Scenario("stop", build_then_interrupt, cases=CASES, entry="router")
    experiment = Experiment(scenario, k=3)
    stopped = experiment.run(path, concurrency=1, progress=False)
    assert stopped.stopped == "interrupted"
    assert len(stopped) == 3  # the three done before it; the one in flight is not kept
    assert len(Results.load(path)) == len(stopped)
    done = len(stopped)
    built.clear()
    built.extend([0] * 10)  # no more interrupts
    finished = experiment.run(path, progress=False)
    assert finished.stopped is None and finished.skipped == done and len(finished) == 9


# Budgets


def per_trial_tokens() -> list[int]:
    rows = Experiment(routing(), k=2).run(concurrency=1, progress=False).rows
    return [r["tokens_in"] + r["tokens_out"] for r in rows]


@pytest.mark.parametrize(("slack", "expected"), [(-1, 3), (0, 3), (1, 4)])
def test_a_token_budget_stops_at_the_trial_that_reaches_it(slack: int, expected: int) -> None:
    spent = per_trial_tokens()
    budget = Budget(tokens=sum(spent[:3]) + slack)
    results = Experiment(routing(), k=2).run(concurrency=1, budget=budget, progress=False)
    assert len(results) == expected
    assert results.stopped == "budget: tokens"


def test_a_budget_counts_only_what_this_run_spends(tmp_path: Path) -> None:
    spent = per_trial_tokens()
    path = tmp_path / "run.sqlite"
    experiment = Experiment(routing(), k=2)
    experiment.run(path, concurrency=1, budget=Budget(tokens=sum(spent[:2])), progress=False)
    resumed = experiment.run(path, concurrency=1, budget=Budget(tokens=sum(spent[2:4])))
    assert resumed.skipped == 2 and len(resumed) == 4 and resumed.stopped == "budget: tokens"


def test_a_cost_budget_needs_prices_and_stops_at_the_trial_that_reaches_it() -> None:
    prices = PriceTable({}, default=Price(1_000_000, 0))  # a dollar per input token
    experiment = Experiment(routing(prices=prices), k=2)
    free = experiment.run(concurrency=1, progress=False)
    costs = [r["cost"] for r in free.rows]
    assert costs == [r["tokens_in"] for r in free.rows]
    results = experiment.run(concurrency=1, budget=Budget(cost=sum(costs[:2])), progress=False)
    assert len(results) == 2 and results.stopped == "budget: cost"
    with pytest.raises(ValueError, match="prices"):
        Experiment(routing(), k=1).run(budget=Budget(cost=1.0), progress=False)


def test_a_wall_time_budget_cancels_the_running_trials_and_keeps_the_done_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The run's clock moves only once the stuck trial runs, so the trials before it are done
    # inside the budget however long a loaded machine takes over them.
    clock = SteppedTime()
    monkeypatch.setattr(experiments_runner, "time", clock)

    async def stuck(turn: Turn) -> None:
        clock.step(0.25)  # the budget's whole wall time, spent while this trial runs
        await turn.narrate("working on it", tool="wait")
        await asyncio.Event().wait()

    def build_stuck(trial: Trial) -> Fleet:
        fleet = build(trial)
        if trial.case.name == "logs":
            fleet.remove_peer("logs")
            fleet.add_peer("logs", behaviors.custom(stuck))
        return fleet

    scenario = Scenario("stuck", build_stuck, cases=CASES, entry="router")
    results = Experiment(scenario, k=1).run(
        concurrency=1, budget=Budget(wall_time=0.25), progress=False
    )
    assert results.stopped == "budget: wall time"
    assert sorted(r["case"] for r in results.rows) == ["cpu", "disk"]


def test_budgets_refuse_values_that_bound_nothing() -> None:
    for bad in (0, -1, math.nan, True, "5"):
        with pytest.raises(ValueError, match="Budget"):
            Budget(tokens=bad)  # type: ignore[arg-type]


# Scenarios


def test_unpicklable_scenarios_fail_before_any_trial_naming_the_fix(tmp_path: Path) -> None:
    seen: list[Any] = []
    scenario = counting(flawed(), seen)  # a closure: pickle refuses it
    path = tmp_path / "run.sqlite"
    with InlinePickler() as executor, pytest.raises(ScenarioError) as caught:
        Experiment(scenario, k=1).run(path, executor=executor, progress=False)
    message = str(caught.value)
    assert "top level of an importable module" in message
    assert "client.get_executor()" in message and "No trial was run" in message
    assert seen == [] and not path.exists()


def test_a_build_that_fails_stops_the_run_naming_the_scenario_and_keeps_the_rows(
    tmp_path: Path,
) -> None:
    def build_some(trial: Trial) -> Fleet:
        if trial.case.name == "logs":
            raise RuntimeError("no logs peer today")
        return build(trial)

    path = tmp_path / "run.sqlite"
    scenario = Scenario("broken", build_some, cases=CASES, entry="router")
    with pytest.raises(ScenarioError, match=r"'broken''s build raised RuntimeError: no logs"):
        Experiment(scenario, k=1).run(path, concurrency=1, progress=False)
    assert sorted(r["case"] for r in Results.load(path)) == ["cpu", "disk"]


def test_scorers_see_the_outcome_and_their_values_are_columns() -> None:
    scenario = routing(
        scorers={"shallow": MaxDepth(1), "one_call": MaxDelegations(1), "tokens": tokens_used}
    )
    results = Experiment(scenario, k=1).run(progress=False)
    assert all(r["shallow"] is False and r["one_call"] is True for r in results.rows)
    assert all(r["tokens"] == r["tokens_in"] + r["tokens_out"] > 0 for r in results.rows)
    assert not any(r["passed"] for r in results.rows)  # the failed depth check fails each trial


def test_a_scorer_returning_something_else_is_an_error_naming_it() -> None:
    scenario = routing(scorers={"bad": lambda outcome: "yes"})
    with pytest.raises(ScenarioError, match="scorer 'bad' returned 'yes'"):
        Experiment(scenario, k=1).run(progress=False)


def test_a_fake_clock_scenario_gives_each_trial_a_fresh_clock_and_checks_it_is_used() -> None:
    clocks: list[Any] = []

    def build_on_clock(trial: Trial) -> Fleet:
        clocks.append(trial.clock)
        return build(trial)

    scenario = Scenario("clock", build_on_clock, cases=CASES, entry="router", fake_clock=True)
    Experiment(scenario, k=1).run(progress=False)
    assert len(clocks) == 3 and all(isinstance(c, FakeClock) for c in clocks)
    assert len({id(c) for c in clocks}) == 3

    def build_ignoring(trial: Trial) -> Fleet:
        fleet = Fleet()
        fleet.add_peer("router", behaviors.reply("hi"))
        return fleet

    ignoring = Scenario("ignoring", build_ignoring, cases=CASES, entry="router", fake_clock=True)
    with pytest.raises(ScenarioError, match=r"Fleet\(clock=trial.clock\)"):
        Experiment(ignoring, k=1).run(progress=False)


def test_grid_values_must_be_json_and_names_must_not_shadow_columns() -> None:
    with pytest.raises(TypeError, match="not a JSON value"):
        Experiment(routing(), grid={"model": [object()]})
    with pytest.raises(ValueError, match="'seed'"):
        Experiment(routing(), grid={"seed": [1]})
    with pytest.raises(TypeError, match=r"\['a'\]"):
        Experiment(routing(), grid={"persona": "a"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="unique"):
        Scenario("x", build, cases=[Case("a", "p"), Case("a", "q")], entry="router")


def test_recorded_models_replay_offline_on_a_rerun(tmp_path: Path) -> None:
    made: list[str] = []

    def build_recorded(trial: Trial) -> Fleet:
        def router() -> ScriptedModel:
            made.append(trial.case.name)
            return ScriptedModel(when("disk").ask("storage"), when().ask("compute"))

        fleet = Fleet()
        fleet.add_peer("router", behaviors.model(trial.recorded("router", router)))
        fleet.add_peer("storage", behaviors.reply(ANSWERS["storage"]))
        fleet.add_peer("compute", behaviors.reply(ANSWERS["compute"]))
        return fleet

    cases = CASES[:2]
    scenario = Scenario("rec", build_recorded, cases=cases, entry="router")
    recordings = tmp_path / "recordings"
    first = Experiment(scenario, k=2).run(recordings=recordings, progress=False)
    assert len(made) == 4 and len(list(recordings.glob("*.json"))) == 4
    made.clear()
    again = Experiment(scenario, k=2).run(recordings=recordings, progress=False)
    assert made == []  # every model was replayed: none was made
    assert outcomes(again) == outcomes(first)


# The table, its files and its looks


def test_results_reload_from_sqlite_and_parquet_with_the_same_rows(
    tiny: Results, tmp_path: Path
) -> None:
    pytest.importorskip("pyarrow")
    saved = tiny.to_parquet(tmp_path / "tiny.parquet")
    loaded = Results.load(saved)
    assert outcomes(loaded) == outcomes(tiny)
    frame = tiny.to_pandas()
    assert len(frame) == 18 and {"flaw", "passed", "asked", "seed"} <= set(frame.columns)
    assert tiny.summary().shape[0] == 2
    confusion = tiny.confusion()
    assert confusion.loc["compute", "logs"] == 1 and confusion.loc["storage", "storage"] == 6


def test_a_run_refuses_a_parquet_path_naming_the_export() -> None:
    with pytest.raises(ValueError, match="to_parquet"):
        Experiment(routing(), k=1).run("x.parquet", progress=False)


def test_the_html_repr_escapes_what_the_run_says_and_names_its_interval() -> None:
    hostile = '<script>alert("x")</script>'
    rows = [
        {
            "scenario": "s", "params": json.dumps({"persona": hostile}), "persona": hostile,
            "case": "c", "seed": 1, "repetition": 0, "passed": True, "duration_ms": 1.0,
            "tokens_in": 1, "tokens_out": 1, "cost": None, "error_kind": None,
        }
    ]  # fmt: skip
    shown = Results(rows, stopped="interrupted")._repr_html_()
    assert "<script>" not in shown and "&lt;script&gt;" in shown
    assert INTERVAL in shown and "stopped: interrupted" in shown
    assert repr(Results(rows, stopped="interrupted")) == (
        "Results(1 trials, 1 passed, stopped: interrupted)"
    )


def test_plots_draw_each_setting(tiny: Results) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        ax = tiny.plot_pass_rate()
        assert [t.get_text() for t in ax.get_yticklabels()] == ["flaw=none", "flaw=flaky-cpu"]
        assert len(tiny.plot_latency().get_yticklabels()) == 2
        assert "tokens" in tiny.plot_cost().get_xlabel()
        assert tiny.plot_cost_vs_accuracy().get_ylabel() == "pass rate"
    finally:
        plt.close("all")


def test_answers_quoting_a_failed_peers_session_are_the_same_on_every_run() -> None:
    def build_dropping(trial: Trial) -> Fleet:
        fleet = build(trial)
        fleet.faults("storage").drop_streams_after = 1  # the router's delegation fails
        return fleet

    scenario = Scenario("drops", build_dropping, cases=CASES[:1], entry="router")
    first, again = (Experiment(scenario, k=2).run(progress=False) for _ in range(2))
    assert outcomes(first) == outcomes(again)
    assert all("(session *)" in r["answer"] for r in first.rows)
    assert "(session *)" not in first.rows[0]["tree"]  # the tree keeps the real ids


def test_parameters_keep_the_grids_order_in_the_table() -> None:
    results = Experiment(flawed(), grid={"zeta": [1], "flaw": ["none"]}, k=1).run(progress=False)
    assert results.params == ["zeta", "flaw"]
    assert list(results.summary_rows()[0])[:2] == ["zeta", "flaw"]
