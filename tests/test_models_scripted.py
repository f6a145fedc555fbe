"""ScriptedModel: deterministic rules a notebook cell can write, read from the conversation."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from coreagent_sdk.host import CALL_PEER_SPEC
from coreagent_sdk.models import (
    Message,
    ModelError,
    ModelReply,
    ScriptedModel,
    ToolCall,
    ToolSpec,
    when,
)

TOOLS = (CALL_PEER_SPEC, ToolSpec("lookup"))


def answered(messages: list[Message], reply: ModelReply, *results: dict[str, object]) -> None:
    """Append the reply's calls and one result per call, as the loop does."""
    messages.append(Message.assistant(reply.text, reply.tool_calls))
    for call, result in zip(reply.tool_calls, results, strict=True):
        messages.append(Message.tool_result(call, json.dumps(result)))


async def test_the_first_matching_rule_asks_its_peer_then_answers_with_the_results() -> None:
    model = ScriptedModel(
        when("disk", "storage").ask("storage", "Disks? {prompt}"),
        when().answer("no idea"),
    )
    messages = [Message.system("route"), Message.user("Is the DISK full?")]

    first = await model.complete(messages, TOOLS)
    assert first.text == "" and first.stop_reason == "tool_use"
    assert [(c.name, dict(c.arguments)) for c in first.tool_calls] == [
        ("call_peer", {"peer": "storage", "prompt": "Disks? Is the DISK full?"})
    ]
    answered(messages, first, {"peer": "storage", "response": "80% full"})
    second = await model.complete(messages, TOOLS)
    assert (second.text, second.tool_calls, second.stop_reason) == ("storage: 80% full", (), "stop")
    other = await model.complete([Message.user("cpu?")], TOOLS)
    assert other.text == "no idea"
    assert model.requests == 3


async def test_rounds_play_in_order_and_ask_all_asks_in_parallel() -> None:
    model = ScriptedModel(
        when(re.compile(r"\bprod-\d\b"))
        .ask_all(("a", "one"), ("b", "two"))
        .call("lookup", key="{prompt}")
        .answer("[{prompt}] {results}")
    )
    messages = [Message.user("check prod-1")]
    first = await model.complete(messages, TOOLS)
    assert [c.arguments["peer"] for c in first.tool_calls] == ["a", "b"]
    assert len({c.id for c in first.tool_calls}) == 2
    answered(messages, first, {"peer": "a", "response": "ok"}, {"error": "call_peer: timed out"})
    second = await model.complete(messages, TOOLS)
    assert [(c.name, dict(c.arguments)) for c in second.tool_calls] == [
        ("lookup", {"key": "check prod-1"})
    ]
    answered(messages, second, {"result": 7})
    third = await model.complete(messages, TOOLS)
    assert third.text == "[check prod-1] a: ok\ncall_peer failed: call_peer: timed out\nlookup: 7"


async def test_the_same_conversation_gets_the_same_reply_whatever_runs_beside_it() -> None:
    model = ScriptedModel(when("x").ask("p", "{prompt}"))
    replies = await asyncio.gather(
        *(model.complete([Message.user(f"x {i}")], TOOLS) for i in range(20))
    )
    assert [r.tool_calls[0].arguments["prompt"] for r in replies] == [f"x {i}" for i in range(20)]
    again = await model.complete([Message.user("x 3")], TOOLS)
    assert again == replies[3]


async def test_no_matching_rule_is_a_config_error_naming_the_rules_and_the_fix() -> None:
    model = ScriptedModel(when("disk").answer("a"), when(re.compile("cpu|load")).answer("b"))
    with pytest.raises(ModelError) as caught:
        await model.complete([Message.user("memory?")], TOOLS)
    assert (caught.value.kind, caught.value.retryable) == ("config_error", False)
    assert str(caught.value) == (
        "ScriptedModel: no rule matches the prompt 'memory?' (rules: when('disk'), "
        "when(cpu|load)); add a rule for it, or a catch-all when().answer(...) last"
    )


async def test_asking_a_peer_without_call_peer_offered_says_so() -> None:
    model = ScriptedModel(when().ask("p"))
    with pytest.raises(ModelError, match="offers no call_peer tool"):
        await model.complete([Message.user("hi")], [ToolSpec("lookup")])


async def test_a_step_function_may_answer_or_call_and_usage_is_estimated() -> None:
    model = ScriptedModel(
        when(lambda p: p.startswith("!")).step(
            lambda s: [ToolCall("z", "lookup", {"q": s.prompt})]
        ),
        when().step(lambda s: f"round {s.round}: {s.prompt}"),
    )
    called = await model.complete([Message.user("!go")], TOOLS)
    assert called.tool_calls == (ToolCall("z", "lookup", {"q": "!go"}),)
    said = await model.complete([Message.user("a" * 40)], TOOLS)
    assert said.text == "round 0: " + "a" * 40
    assert said.usage.input_tokens == 10 and said.usage.output_tokens == len(said.text) // 4


async def test_a_delay_makes_each_reply_take_that_long() -> None:
    model = ScriptedModel(when().answer("ok"), delay=0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await model.complete([Message.user("hi")], TOOLS)
    assert loop.time() - started >= 0.05


def test_what_is_not_a_rule_is_refused_with_the_way_to_write_one() -> None:
    with pytest.raises(TypeError, match=r"build rules with when\(\.\.\.\)"):
        ScriptedModel("disk")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay must be seconds >= 0"):
        ScriptedModel(delay=-1)
    with pytest.raises(ValueError, match="at least one"):
        when().ask_all()


async def test_the_same_conversation_reports_the_same_usage_whatever_the_peers_timing() -> None:
    # Experiments compare runs of the same trial: a call that took 99 ms or 100 ms, in another
    # session, must not change the tokens the scripted model reports.
    model = ScriptedModel(when("disk").ask("storage"))
    usages = []
    for duration, session in ((99, "s-1"), (100, "s-0002abcdef")):
        messages = [Message.user("is the disk full?")]
        reply = await model.complete(messages, TOOLS)
        answered(
            messages,
            reply,
            {"peer": "storage", "session_id": session, "response": "81%", "duration_ms": duration},
        )
        usages.append((await model.complete(messages, TOOLS)).usage)
    assert usages[0] == usages[1]
