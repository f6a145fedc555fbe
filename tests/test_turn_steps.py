"""Inside each turn: a fleet's record of calls keeps each turn's model rounds and tool calls."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from coreagent_sdk import CallLog, CallPeerEvent, TurnStep
from coreagent_sdk._records._calllog import MAX_STEPS_PER_CALL
from coreagent_sdk._records._steps import MAX_STEP_TEXT
from coreagent_sdk.errors import PeerTurnError
from coreagent_sdk.models import (
    Message,
    ModelError,
    ModelReply,
    ScriptedModel,
    Skill,
    ToolCall,
    ToolSpec,
    Usage,
    when,
)
from simulator import Fleet, behaviors

from .html_parse import Page


def lookup(host: str) -> dict[str, str]:
    """Look a host's disk up."""
    return {"host": host, "disk": "81%"}


def broken(host: str) -> str:
    """Always fails."""
    raise RuntimeError(f"no route to {host}")


def router_fleet() -> Fleet:
    fleet = Fleet()
    fleet.add_peer(
        "router",
        behaviors.model(
            ScriptedModel(when("disk").ask("storage", "How full? {prompt}")), persona="Route."
        ),
    )
    fleet.add_peer(
        "storage",
        behaviors.model(ScriptedModel(when().call("lookup", host="node-3")), tools=[lookup]),
    )
    return fleet


async def test_each_turn_records_its_model_rounds_and_tool_calls_in_order() -> None:
    fleet = router_fleet()
    await fleet.call_peer(timeout=10).acall(peer="router", prompt="Is the disk full?")
    router, storage = fleet.calls.records()
    assert [(s.kind, s.name) for s in router.steps] == [
        ("chat", "scripted"),
        ("tool", "call_peer"),
        ("chat", "scripted"),
    ]
    asked = router.steps[1]
    assert asked.peer == "storage" and asked.session_id == storage.session_id
    assert json.loads(asked.sent) == {"peer": "storage", "prompt": "How full? Is the disk full?"}
    assert asked.received == 'lookup: {"host": "node-3", "disk": "81%"}'
    assert "newest, user: Is the disk full?" in router.steps[0].sent
    assert router.steps[0].received.startswith("→ call_peer")
    assert [(s.kind, s.name) for s in storage.steps] == [
        ("chat", "scripted"),
        ("tool", "lookup"),
        ("chat", "scripted"),
    ]
    assert json.loads(storage.steps[1].received) == {"host": "node-3", "disk": "81%"}
    # Tokens as the model reported them, each round on its own.
    assert all(s.input_tokens and s.output_tokens for s in router.steps if s.kind == "chat")
    # Times: each step starts inside its call, in order; the peer call lasts while storage ran.
    assert router.started <= router.steps[0].started <= asked.started <= router.steps[2].started
    assert asked.duration_ms >= (storage.duration_ms or 0) - 5
    await fleet.aclose()


async def test_a_tree_puts_each_sub_call_under_the_call_peer_step_that_made_it() -> None:
    fleet = router_fleet()
    await fleet.call_peer(timeout=10).acall(peer="router", prompt="Is the disk full?")
    tree = fleet.calls.tree()
    (root,) = tree.roots()
    steps, unclaimed = tree.inside(root.call_id)
    assert [made for _, made in steps][1][0].peer == "storage" and unclaimed == []
    page = Page(tree._repr_html_())
    # Every level collapsed; the sub-call one level under the step, two under the router.
    assert page.opened == 0 and page.balanced
    levels = [(depth, text.split(" ")[0:2]) for depth, text in page.summaries]
    assert levels == [
        (1, ["router", "finished"]),
        (2, ["model", "scripted"]),
        (2, ["tool", "call_peer"]),
        (3, ["storage", "finished"]),
        (4, ["model", "scripted"]),
        (4, ["tool", "lookup"]),
        (4, ["model", "scripted"]),
        (2, ["model", "scripted"]),
    ]
    assert "3 model rounds" not in repr(tree) and "2 model rounds, 1 tool call" in repr(tree)
    await fleet.aclose()


async def test_what_a_step_shows_in_html_is_escaped() -> None:
    fleet = Fleet()
    fleet.add_peer("echoer", behaviors.model(ScriptedModel(when().answer("<script>x</script>"))))
    await fleet.call_peer(timeout=10).acall(peer="echoer", prompt="<img src=x>")
    page = Page(fleet.calls.tree()._repr_html_())
    assert "<script>x</script>" in page.text and "<img src=x>" in page.text
    assert not {"script", "img"} & set(page.tags)
    await fleet.aclose()


class Echoing:
    """A model that says the secret its tool saw, then fails with it."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        if self.fail:
            raise ModelError(f"quota for key {SECRET} used up", kind="rate_limited", retryable=True)
        if messages[-1].role == "user":
            return ModelReply(
                f"asking with {SECRET}", [ToolCall("c1", "token_seen", {})], usage=Usage(3, 4)
            )
        return ModelReply(f"the tool said {messages[-1].text}; I know {SECRET}", usage=Usage(5, 6))


SECRET = "sk-steps-5e1f0c9a77b2"


def token_seen(secrets: dict[str, str]) -> str:
    """Says the token it was given."""
    return f"token {secrets['API_KEY']}"


async def test_a_secret_a_tool_returns_or_a_model_repeats_never_reaches_a_step() -> None:
    fleet = Fleet()
    skill = Skill("vault", tools=[token_seen], secrets=["API_KEY"])
    fleet.add_peer("leaky", behaviors.model(Echoing(), skills=[skill], secrets={"API_KEY": SECRET}))
    fleet.add_peer("failing", behaviors.model(Echoing(fail=True)))
    tool = fleet.call_peer(timeout=10)
    await tool.acall(peer="leaky", prompt="what is the token?")
    with pytest.raises(PeerTurnError):
        await tool.acall(peer="failing", prompt="again")
    steps = [s for r in fleet.calls.records() for s in r.steps]
    assert len(steps) == 5  # leaky: chat, tool, chat; failing: the chat that raised, the error
    shown = repr(steps) + repr(fleet.calls.tree()) + fleet.calls.tree()._repr_html_()
    assert SECRET not in shown and "[redacted]" in shown
    await fleet.aclose()


async def test_a_failed_tool_a_failed_model_and_a_watchdog_are_recorded_as_errors() -> None:
    fleet = Fleet()
    fleet.add_peer(
        "tools",
        behaviors.model(ScriptedModel(when().call("broken", host="h1")), tools=[broken]),
    )
    fleet.add_peer("model", behaviors.model(Echoing(fail=True)))
    fleet.add_peer(
        "runaway",
        behaviors.model(
            ScriptedModel(when().call("lookup", host="a").call("lookup", host="b")),
            tools=[lookup],
            max_tool_rounds=1,
        ),
    )
    tool = fleet.call_peer(timeout=10)
    await tool.acall(peer="tools", prompt="go")
    for peer in ("model", "runaway"):
        with pytest.raises(PeerTurnError):
            await tool.acall(peer=peer, prompt="go")
    by_peer = {r.peer: r for r in fleet.calls.records()}
    failed_tool = by_peer["tools"].steps[1]
    assert failed_tool.kind == "tool" and failed_tool.error is not None
    assert "RuntimeError: no route to h1" in failed_tool.error
    chat, error = by_peer["model"].steps
    assert chat.kind == "chat" and "ModelError" in (chat.error or "")
    assert (error.kind, error.name) == ("error", "rate_limited")
    assert [s.kind for s in by_peer["runaway"].steps] == ["chat", "tool", "chat", "error"]
    assert by_peer["runaway"].steps[-1].name == "watchdog"
    assert "max_tool_rounds=1" in (by_peer["runaway"].steps[-1].error or "")
    await fleet.aclose()


def _log_with(calls: int) -> CallLog:
    log = CallLog(max_steps=10)
    for call_id in range(1, calls + 1):
        log.on_event(CallPeerEvent("started", "call_peer", f"p{call_id}", call_id=call_id))
    return log


def test_one_call_keeps_at_most_max_steps_per_call_and_counts_the_rest() -> None:
    log = CallLog()
    log.on_event(CallPeerEvent("started", "call_peer", "p", call_id=1))
    for i in range(MAX_STEPS_PER_CALL + 3):
        log.on_step(1, TurnStep("tool", f"t{i}"))
    (record,) = log.records()
    assert len(record.steps) == MAX_STEPS_PER_CALL and record.steps_dropped == 3
    assert record.steps[-1].name == f"t{MAX_STEPS_PER_CALL - 1}"  # the first ones are kept


def test_past_max_steps_the_oldest_finished_calls_give_up_their_steps_first() -> None:
    log = _log_with(3)
    for _ in range(4):
        log.on_step(1, TurnStep("chat", "m"))  # call 1: running, oldest
    for _ in range(3):
        log.on_step(2, TurnStep("chat", "m"))
    log.on_event(CallPeerEvent("finished", "call_peer", "p2", call_id=2))
    for _ in range(3):
        log.on_step(3, TurnStep("chat", "m"))  # 10 steps: exactly at the bound
    assert [len(r.steps) for r in log.records()] == [4, 3, 3]
    log.on_step(3, TurnStep("chat", "m"))  # one past it: the finished call sheds, not call 1
    assert [(len(r.steps), r.steps_dropped) for r in log.records()] == [(4, 0), (0, 3), (4, 0)]
    for _ in range(2):
        log.on_step(3, TurnStep("chat", "m"))  # the room freed is used before more is shed
    assert [len(r.steps) for r in log.records()] == [4, 0, 6]
    log.on_step(3, TurnStep("chat", "m"))  # only running calls left: the oldest of them sheds
    assert [(len(r.steps), r.steps_dropped) for r in log.records()] == [(0, 4), (0, 3), (7, 0)]
    assert sum(len(r.steps) for r in log.records()) <= log.max_steps


def test_a_single_turn_past_max_steps_drops_its_own_newest_steps() -> None:
    log = _log_with(1)
    for i in range(12):
        log.on_step(1, TurnStep("tool", f"t{i}"))
    (record,) = log.records()
    assert len(record.steps) == 10 and record.steps_dropped == 2


def test_steps_dropped_with_their_record_free_room_for_new_ones() -> None:
    log = CallLog(max_records=1, max_steps=4)
    log.on_event(CallPeerEvent("finished", "call_peer", "a", call_id=1))
    for _ in range(4):
        log.on_step(1, TurnStep("chat", "m"))
    log.on_event(CallPeerEvent("started", "call_peer", "b", call_id=2))  # call 1 is dropped
    for _ in range(4):
        log.on_step(2, TurnStep("chat", "m"))
    ((record),) = log.records()
    assert record.peer == "b" and len(record.steps) == 4 and record.steps_dropped == 0


def test_a_step_for_a_call_the_log_does_not_hold_is_ignored_and_listeners_hear_of_steps() -> None:
    log = _log_with(1)
    heard: list[str] = []
    log.subscribe(lambda e: heard.append(f"{e.kind} {e.call_id}"))
    log.on_step(99, TurnStep("chat", "m"))
    log.on_step(1, TurnStep("chat", "m"))
    assert heard == ["step 1"] and log.records()[0].steps[0].name == "m"


def test_a_steps_text_is_cut_and_its_kind_checked() -> None:
    step = TurnStep("tool", "t", sent="x" * 10_000, received="y" * 10_000, error="z" * 10_000)
    assert len(step.sent) == len(step.received) == len(step.error or "") == MAX_STEP_TEXT
    assert step.sent.endswith("…")
    with pytest.raises(ValueError, match="kind must be one of chat, tool, error, got 'talk'"):
        TurnStep("talk", "t")


async def test_a_turn_no_one_records_runs_the_same_and_records_nothing() -> None:
    from coreagent_sdk.host import AgentHost, ModelAgent

    from .test_model_agent import run_turn

    model = ScriptedModel(when().call("lookup", host="node-3"))
    host = AgentHost("solo", behavior=ModelAgent(model, tools=[lookup]))
    outcome = await run_turn(host, "go")
    assert outcome.answer == 'lookup: {"host": "node-3", "disk": "81%"}'


async def test_the_roster_names_the_model_each_model_driven_peer_runs(tmp_path: Path) -> None:
    from coreagent_sdk.models import RecordingModel

    fleet = router_fleet()
    fleet.add_peer("named", behaviors.model(RecordingModel(Named(), tmp_path / "named.json")))
    behaviours = {row.name: row.behavior for row in fleet.roster()}
    assert behaviours == {
        "named": "model: gpt-test-1",  # looked through the recording to the model it wraps
        "router": "model: ScriptedModel",
        "storage": "model: ScriptedModel",
    }
    await fleet.aclose()


class Named:
    """A model that names itself as a vendor's adapter does."""

    model = "gpt-test-1"

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        return ModelReply("hi")


async def test_one_delegation_shows_opened_down_to_each_model_round_and_tool_call() -> None:
    fleet = router_fleet()
    tool = fleet.call_peer(timeout=10)
    for _ in range(2):
        await tool.acall(peer="router", prompt="Is the disk full?")
    tree = fleet.calls.tree()
    newest = tree.roots()[-1]
    one = tree.delegation(newest.call_id)
    assert {r.call_id for r in one.records} == {newest.call_id} | {
        r.call_id for r in tree.children(newest.call_id)
    }
    page = Page(one._repr_html_())
    assert page.opened == len(page.summaries) == 8  # every level open: 2 calls, 6 steps
    text = repr(one).splitlines()
    assert text[1].startswith("router finished") and text[2].startswith("  · chat scripted")
    assert any(line.startswith("└── storage finished") for line in text)
    assert any(line.startswith("      · tool lookup") for line in text)
    assert Page(tree.delegation(newest.call_id, opened=False)._repr_html_()).opened == 0
    with pytest.raises(KeyError, match=r"no call 999 in this tree \(its roots: \d+, \d+\)"):
        tree.delegation(999)
    await fleet.aclose()


class FailingScripted(ScriptedModel):
    """A scripted model whose rounds fail, as a misconfigured vendor model's do."""

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        raise RuntimeError("config_error")


async def test_a_failed_model_round_is_named_as_the_models_replies_are_and_priced() -> None:
    from coreagent_sdk import Price, PriceTable

    fleet = Fleet()
    fleet.add_peer("ok", behaviors.model(ScriptedModel(when().answer("hi"), name="m-1")))
    fleet.add_peer("broken", behaviors.model(FailingScripted(name="m-1")))
    tool = fleet.call_peer(timeout=10)
    await tool.acall(peer="ok", prompt="go")
    with pytest.raises(PeerTurnError):
        await tool.acall(peer="broken", prompt="go")
    by_peer = {r.peer: r for r in fleet.calls.records()}
    assert by_peer["broken"].steps[0].name == by_peer["ok"].steps[0].name == "m-1"
    usage = fleet.calls.usage(PriceTable({"m-1": Price(1.0, 2.0)}))
    assert usage.cost_usd is not None and usage.cost_usd > 0
    await fleet.aclose()
