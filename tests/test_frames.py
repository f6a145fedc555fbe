"""`to_pandas()`: the record of calls, a call tree and token usage as pandas tables."""

from __future__ import annotations

import sys

import pytest

from coreagent_sdk import CallLog, CallPeerEvent, Price, PriceTable, TurnStep
from simulator import Fleet, behaviors

from .test_turn_steps import router_fleet

pd = pytest.importorskip("pandas")


async def _asked_twice() -> Fleet:
    fleet = router_fleet()
    fleet.add_peer("plain", behaviors.reply("no model here"))
    tool = fleet.call_peer(timeout=10)
    for _ in range(2):
        await tool.acall(peer="router", prompt="Is the disk full?")
    await tool.acall(peer="plain", prompt="hi")
    return fleet


async def test_the_record_of_calls_is_one_row_per_call_with_what_each_turn_did() -> None:
    fleet = await _asked_twice()
    table = fleet.calls.to_pandas()
    records = fleet.calls.records()
    assert list(table["call_id"]) == [r.call_id for r in records]
    assert list(table["peer"]) == ["router", "storage", "router", "storage", "plain"]
    assert list(table["model_rounds"]) == [2, 2, 2, 2, 0]
    assert list(table["tool_calls"]) == [1, 1, 1, 1, 0]
    router = records[0]
    in_tokens = sum(s.input_tokens or 0 for s in router.steps)
    assert table.loc[0, "input_tokens"] == in_tokens > 0
    assert pd.isna(table.loc[4, "input_tokens"])  # no model drove "plain": not a zero
    assert str(table["input_tokens"].dtype) == "Int64" and str(table["parent"].dtype) == "Int64"
    assert table.loc[1, "parent"] == router.call_id and pd.isna(table.loc[0, "parent"])
    await fleet.aclose()


async def test_a_tree_is_one_row_per_call_in_tree_order_or_one_per_step() -> None:
    fleet = await _asked_twice()
    tree = fleet.calls.tree()
    table = tree.to_pandas()
    assert list(zip(table["peer"], table["depth"], strict=True)) == [
        ("router", 0),
        ("storage", 1),
        ("router", 0),
        ("storage", 1),
        ("plain", 0),
    ]
    roots = [r.call_id for r in tree.roots()]
    assert list(table["root"]) == [roots[0], roots[0], roots[1], roots[1], roots[2]]
    steps = tree.to_pandas(steps=True)
    assert len(steps) == sum(len(r.steps) for r in tree.records) == 12
    first = steps.iloc[:3]
    assert list(first["kind"]) == ["chat", "tool", "chat"] and set(first["peer"]) == {"router"}
    assert first.iloc[1]["step_peer"] == "storage" and first.iloc[1]["name"] == "call_peer"
    await fleet.aclose()


async def test_usage_per_turn_and_per_agent_adds_up_and_is_priced_by_the_table_given() -> None:
    fleet = await _asked_twice()
    prices = PriceTable({"scripted": Price(2.0, 8.0)})
    usage = fleet.calls.usage(prices)
    turns = usage.to_pandas()
    assert list(turns["agent"]) == ["router", "storage", "router", "storage"]  # plain: no model
    steps = [s for r in fleet.calls.records() for s in r.steps if s.kind == "chat"]
    assert turns["input_tokens"].sum() == sum(s.input_tokens or 0 for s in steps)
    assert turns["output_tokens"].sum() == sum(s.output_tokens or 0 for s in steps)
    expected = sum(
        ((s.input_tokens or 0) * 2.0 + (s.output_tokens or 0) * 8.0) / 1e6 for s in steps
    )
    assert turns["cost_usd"].sum() == pytest.approx(expected) and expected > 0
    agents = usage.to_pandas(by="agent").set_index("agent")
    assert list(agents.index) == ["router", "storage"] and list(agents["turns"]) == [2, 2]
    assert agents["total_tokens"].sum() == usage.input_tokens + usage.output_tokens
    assert agents["cost_usd"].sum() == pytest.approx(usage.cost_usd)
    assert pd.isna(fleet.calls.usage().to_pandas()["cost_usd"]).all()  # no prices: no cost
    assert "scripted" in PriceTable({"scripted": Price(0, 0)})
    with pytest.raises(KeyError, match='no price for model "scripted"'):
        fleet.calls.usage(PriceTable({"gpt-x": Price(1, 1)}))
    with pytest.raises(TypeError, match="prices must be a PriceTable"):
        fleet.calls.usage({"scripted": Price(1, 1)})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match='by must be "turn" or "agent"'):
        usage.to_pandas(by="model")
    await fleet.aclose()


def test_a_turn_of_two_models_is_priced_by_each_rounds_own_model() -> None:
    log = CallLog()
    log.on_event(CallPeerEvent("started", "call_peer", "p", call_id=1))
    log.on_step(1, TurnStep("chat", "cheap", input_tokens=1_000_000, output_tokens=0))
    log.on_step(1, TurnStep("chat", "dear", input_tokens=1_000_000, output_tokens=0))
    prices = PriceTable({"cheap": Price(1, 0), "dear": Price(10, 0)})
    (turn,) = log.usage(prices).turns
    assert turn.models == ("cheap", "dear") and turn.cost_usd == pytest.approx(11.0)
    assert log.tree().usage(prices).cost_usd == pytest.approx(11.0)


def test_without_pandas_to_pandas_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if not installed
    log = CallLog()
    for table in (log.to_pandas, log.tree().to_pandas, log.usage().to_pandas):
        with pytest.raises(ImportError, match=r"pip install 'coreagent-sdk\[jupyter\]'"):
            table()


def test_importing_the_sdk_does_not_import_pandas() -> None:
    import subprocess

    code = "import sys, coreagent_sdk, simulator; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
