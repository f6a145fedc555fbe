"""Model-driven peers in a simulated fleet: `behaviors.model(...)`."""

from __future__ import annotations

import json

import httpx
import pytest

from coreagent_sdk.host import ModelAgent
from coreagent_sdk.models import OpenAIChatModel, ScriptedModel, when
from simulator import Fleet, behaviors


def router() -> ScriptedModel:
    return ScriptedModel(
        when("disk").ask("storage", "How full are the disks? {prompt}"),
        when("cpu").ask_all(("compute", "CPU load?"), ("storage", "IO wait?")),
        when("logs").ask("logs", "{prompt}"),
        when().answer("I route disk, cpu and logs questions."),
    )


async def test_a_model_driven_router_delegates_by_name_and_the_fleet_records_the_tree() -> None:
    fleet = Fleet()
    fleet.add_peer("router", behaviors.model(router(), persona="You route."))
    fleet.add_peer("storage", behaviors.reply("disks 80% full"))
    fleet.add_peer("compute", behaviors.reply("load 0.7"))
    async with fleet.call_peer(timeout=10) as tool:
        disk = await tool.acall(peer="router", prompt="disk?")
        cpu = await tool.acall(peer="router", prompt="cpu?")
        other = await tool.acall(peer="router", prompt="weather?")
    calls = list(fleet.calls)
    await fleet.aclose()

    assert disk.response == "storage: disks 80% full"
    assert cpu.response == "compute: load 0.7\nstorage: disks 80% full"
    assert other.response == "I route disk, cpu and logs questions."
    top = [c for c in calls if c.parent is None]
    assert [c.peer for c in top] == ["router"] * 3
    children = {c.peer: c.parent for c in calls if c.parent is not None}
    assert sorted(c.peer for c in calls if c.parent == top[1].call_id) == ["compute", "storage"]
    assert set(children) == {"storage", "compute"}


async def test_a_truncated_and_a_slow_specialist_reach_the_router_as_a_daemon_reports_them() -> (
    None
):
    fleet = Fleet()
    fleet.add_peer("router", behaviors.model(router()))
    fleet.add_peer("logs", behaviors.stream(40_000))
    fleet.add_peer("storage", behaviors.slow(0.3, behaviors.reply("disks 80% full")))
    async with fleet.call_peer(timeout=10) as tool:
        logs = await tool.acall(peer="router", prompt="logs please")
        disk = await tool.acall(peer="router", prompt="disk?")
    calls = list(fleet.calls)
    await fleet.aclose()

    (cut,) = [c for c in calls if c.peer == "logs"]
    assert cut.truncated and cut.parent is not None
    assert logs.response.startswith("logs: xxxx") and len(logs.response) < 40_000
    (slow,) = [c for c in calls if c.peer == "storage"]
    assert slow.duration_ms is not None and slow.duration_ms >= 300
    assert disk.response == "storage: disks 80% full"


async def test_a_model_peer_whose_rule_names_an_unknown_peer_answers_with_the_roster() -> None:
    fleet = Fleet()
    fleet.add_peer("router", behaviors.model(ScriptedModel(when().ask("dbs", "rows?"))))
    fleet.add_peer("db", behaviors.reply("12 rows"))
    async with fleet.call_peer(timeout=10) as tool:
        result = await tool.acall(peer="router", prompt="go")
    await fleet.aclose()
    assert result.response == (
        'call_peer failed: call_peer: unknown peer "dbs" (registered: "db", "router")'
    )


async def test_python_tools_of_a_model_peer_run_and_answer() -> None:
    def rows(table: str) -> int:
        """Rows in a table."""
        return len(table) * 3

    fleet = Fleet()
    fleet.add_peer(
        "db", behaviors.model(ScriptedModel(when().call("rows", table="{prompt}")), tools=[rows])
    )
    async with fleet.call_peer(timeout=10) as tool:
        result = await tool.acall(peer="db", prompt="users")
    await fleet.aclose()
    assert result.response == "rows: 15"
    assert json.loads(json.dumps(result.to_dict()))["peer"] == "db"


async def test_a_fleet_closes_the_model_adapter_of_a_model_agent_and_a_later_fleet_reuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Left open, the adapter's pooled connections outlive the loop: a notebook or a test
    # that forgets aclose() on it gets "Event loop is closed" noise at exit.
    pytest.importorskip("openai")
    pytest.importorskip("uvicorn")
    from .fake_model_server import FakeModelServer

    class Counted(OpenAIChatModel):
        closes = 0

        async def aclose(self) -> None:
            Counted.closes += 1
            await super().aclose()

    async with FakeModelServer() as server:
        given = httpx.AsyncClient()
        url = server.openai_url
        on_given = OpenAIChatModel("m", base_url=url, api_key_env=None, http_client=given)
        agent = ModelAgent(Counted("m", base_url=url, api_key_env=None), call_peer=False)
        for round_ in range(2):  # a second fleet reuses the model its first one closed
            fleet = Fleet()
            fleet.add_peer("a", agent)
            fleet.add_peer("b", agent)  # one agent, two peers: closed once
            if round_ == 0:
                fleet.add_peer("c", ModelAgent(on_given, call_peer=False))
            async with fleet.call_peer(timeout=10) as tool:
                for peer in ("a", "c") if round_ == 0 else ("a",):
                    result = await tool.acall(peer=peer, prompt=f"hello {round_}")
                    assert result.response.startswith("The peers said")
            await fleet.aclose()
            assert Counted.closes == round_ + 1
            assert given.is_closed  # the client given to an adapter is closed with it
