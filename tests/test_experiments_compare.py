"""Comparing any metric between settings: paired by case where it can be, with its interval."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from coreagent_sdk import Price, PriceTable
from simulator.experiments import Experiment, Results
from simulator.experiments._stats import (
    holm,
    mcnemar_exact,
    mean_interval,
    newcombe,
    newcombe_paired,
    t_quantile,
    welch,
)

from .experiment_fleets import routing


def test_t_quantiles_match_the_published_table() -> None:
    # Student's t table (two-sided 95%: the 0.975 quantile; one-sided 95% for df 5).
    assert t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile(0.975, 10) == pytest.approx(2.2281, abs=1e-4)
    assert t_quantile(0.975, 30) == pytest.approx(2.0423, abs=1e-4)
    assert t_quantile(0.95, 5) == pytest.approx(2.0150, abs=1e-4)
    assert t_quantile(0.025, 10) == pytest.approx(-2.2281, abs=1e-4)
    assert 2.4469 < t_quantile(0.975, 5.5) < 2.5706  # fractional (Welch's) df: between t(6), t(5)


def test_a_means_interval_is_students_t() -> None:
    # 1..5: mean 3, s = sqrt(2.5), se = s / sqrt(5) = 0.70711, t(0.975, 4) = 2.77645.
    mean, low, high = mean_interval([1, 2, 3, 4, 5])
    assert (mean, low, high) == pytest.approx((3, 3 - 1.96324, 3 + 1.96324), abs=1e-4)
    assert all(math.isnan(v) for v in mean_interval([4.0])[1:])


def test_welchs_interval_uses_welchs_degrees_of_freedom() -> None:
    # a: mean 2.5, var 5/3, n 4; b: mean 6, var 10, n 5. se² = 5/12 + 2 = 2.41667;
    # df = se⁴ / ((5/12)²/3 + 2²/4) = 5.84028 / 1.05787 = 5.52081.
    diff, low, high, p = welch([1, 2, 3, 4], [2, 4, 6, 8, 10])
    half = t_quantile(0.975, 5.52081) * math.sqrt(2.41667)
    assert diff == 3.5 and (low, high) == pytest.approx((3.5 - half, 3.5 + half), abs=1e-4)
    assert 2.4469 < half / math.sqrt(2.41667) < 2.5706  # between t(6) and t(5)
    assert 0.01 < p < 0.1


def test_mcnemars_exact_test_is_the_binomial_tail_of_the_discordant_pairs() -> None:
    # 1 vs 9 discordant: 2 · (C(10,0) + C(10,1)) / 2^10 = 22 / 1024.
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
    assert mcnemar_exact(9, 1) == mcnemar_exact(1, 9)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(3, 3) == 1.0


def test_newcombes_paired_interval_by_hand() -> None:
    # both 36, only A 12, only B 2, neither 0 (n 50): p_a = 0.96, p_b = 0.76.
    # Wilson 48/50: 0.86539-0.98896; 38/50: 0.62574-0.85700. ad - bc = -24 < 0: phi =
    # -24 / sqrt(48·2·38·12) = -0.11471. low = -0.2 - sqrt(0.13426² + 2·0.11471·0.13426·0.02896
    # + 0.02896²) = -0.34043; high = -0.2 + sqrt(0.097² + 2·0.11471·0.097·0.09461 + 0.09461²).
    diff, low, high = newcombe_paired(36, 12, 2, 0)
    assert diff == pytest.approx(-0.2)
    assert (low, high) == pytest.approx((-0.34043, -0.05693), abs=1e-4)
    # No discordant pairs: no difference, and an interval about 0.
    diff, low, high = newcombe_paired(10, 0, 0, 10)
    assert diff == 0 and low < 0 < high


def test_holms_adjustment_steps_down_and_keeps_the_order() -> None:
    # sorted 0.01, 0.03, 0.04: 3·0.01 = 0.03, 2·0.03 = 0.06, max(0.06, 1·0.04) = 0.06.
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def _row(setting: str, case: str, repetition: int, passed: bool, cost: float) -> dict[str, Any]:
    return {
        "scenario": "s", "params": json.dumps({"model": setting}), "model": setting,
        "case": case, "seed": hash((setting, case, repetition)) & 0xFFFF,
        "repetition": repetition, "passed": passed, "duration_ms": 1.0,
        "tokens_in": 10, "tokens_out": 5, "cost": cost, "error_kind": None,
    }  # fmt: skip


def _paired() -> Results:
    # Ten cases; A passes 1-8, B passes 1-4 and 9-10 (and fails 5-8): discordant 4 vs 2.
    rows = []
    for i in range(1, 11):
        rows.append(_row("a", f"c{i}", 0, i <= 8, 0.10 + 0.01 * i))
        rows.append(_row("b", f"c{i}", 0, i <= 4 or i >= 9, 0.12 + 0.01 * i + 0.001 * (i % 3)))
    return Results(rows)


def test_settings_asked_the_same_cases_are_compared_case_by_case() -> None:
    rows = {r["model"]: r for r in _paired().compare_rows("model")}
    b = rows["b"]
    assert b["method"] == "paired by case: Newcombe, McNemar exact" and b["pairs"] == 10
    assert b["diff"] == pytest.approx(0.6 - 0.8)
    assert b["p_value"] == pytest.approx(mcnemar_exact(4, 2))
    assert (b["diff_low"], b["diff_high"]) == pytest.approx(newcombe_paired(4, 4, 2, 0)[1:])
    assert b["confidence"] == 0.95 and b["vs_baseline"] == "no clear difference"
    assert rows["a"]["vs_baseline"] == "baseline"
    unpaired = {r["model"]: r for r in _paired().compare_rows("model", paired=False)}
    assert unpaired["b"]["method"] == "independent: Newcombe"
    assert (unpaired["b"]["diff_low"], unpaired["b"]["diff_high"]) == pytest.approx(
        newcombe(8, 10, 6, 10)[1:]
    )


def test_cost_is_compared_as_a_mean_difference_paired_by_case() -> None:
    rows = {r["model"]: r for r in _paired().compare_rows("model", metric="cost")}
    b = rows["b"]
    # Differences b - a per case: 0.02 + 0.001·(i mod 3), a t interval of those ten.
    diffs = [0.02 + 0.001 * (i % 3) for i in range(1, 11)]
    mean, low, high = mean_interval(diffs)
    assert b["method"] == "paired by case: t"
    assert (b["diff"], b["diff_low"], b["diff_high"]) == pytest.approx((mean, low, high))
    assert b["vs_baseline"] == "higher" and b["p_value"] < 1e-6
    assert rows["a"]["mean"] == pytest.approx(sum(0.10 + 0.01 * i for i in range(1, 11)) / 10)


def test_settings_with_different_cases_are_compared_as_independent_samples() -> None:
    rows = [r for r in _paired().rows if not (r["model"] == "b" and r["case"] == "c1")]
    compared = {r["model"]: r for r in Results(rows).compare_rows("model", metric="cost")}
    a = [0.10 + 0.01 * i for i in range(1, 11)]
    b = [0.12 + 0.01 * i + 0.001 * (i % 3) for i in range(2, 11)]
    assert compared["b"]["method"] == "independent: Welch t"
    assert compared["b"]["diff_low"] == pytest.approx(welch(a, b)[1])
    with pytest.raises(ValueError, match="cannot be paired"):
        Results(rows).compare_rows("model", metric="cost", paired=True)


def test_many_settings_against_one_baseline_can_be_corrected() -> None:
    rows = _paired().rows + [
        dict(r, model="c", params=json.dumps({"model": "c"})) for r in _paired().rows
        if r["model"] == "b"
    ]  # fmt: skip
    plain = Results(rows).compare_rows("model", metric="cost")
    held = Results(rows).compare_rows("model", metric="cost", correction="bonferroni")
    assert held[1]["diff_confidence"] == pytest.approx(1 - 0.05 / 2)
    assert held[1]["diff_high"] - held[1]["diff_low"] > plain[1]["diff_high"] - plain[1]["diff_low"]
    assert held[1]["p_value"] == pytest.approx(min(1.0, 2 * plain[1]["p_value"]))
    holmed = Results(rows).compare_rows("model", metric="cost", correction="holm")
    assert [r["p_value"] for r in holmed[1:]] == pytest.approx(
        holm([r["p_value"] for r in plain[1:]])
    )
    with pytest.raises(ValueError, match="correction must be"):
        Results(rows).compare_rows("model", correction="sidak")


def test_an_unknown_metric_names_the_ones_there_are() -> None:
    with pytest.raises(KeyError, match=r"no metric 'dollars'.*'cost'.*'tokens'"):
        _paired().compare_rows("model", metric="dollars")


def test_summary_gives_each_metrics_mean_with_its_interval() -> None:
    summary = {r["model"]: r for r in _paired().summary_rows()}
    costs = [0.10 + 0.01 * i for i in range(1, 11)]
    assert (summary["a"]["mean_cost"], summary["a"]["mean_cost_low"],
            summary["a"]["mean_cost_high"]) == pytest.approx(mean_interval(costs))  # fmt: skip
    assert summary["a"]["mean_tokens"] == 15 and summary["a"]["mean_tokens_low"] == 15


def test_does_the_error_rate_change_cost_case_by_case_in_a_real_run() -> None:
    prices = PriceTable({n: Price(1.0, 2.0) for n in ("scripted", "storage", "compute", "logs")})
    experiment = Experiment(routing(prices=prices), grid={"error_rate": [0.0, 0.6]}, k=4)
    results = experiment.run(progress=False)
    cost = {r["error_rate"]: r for r in results.compare_rows("error_rate", metric="cost")}
    assert cost[0.6]["method"] == "paired by case: t" and cost[0.6]["pairs"] == 12
    assert not math.isnan(cost[0.6]["diff_low"])
    passed = {r["error_rate"]: r for r in results.compare_rows("error_rate")}
    assert passed[0.6]["method"].startswith("paired by case") and passed[0.6]["diff"] < 0
    assert results.compare("error_rate", metric="tokens").shape[0] == 2
