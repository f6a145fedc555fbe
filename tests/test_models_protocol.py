"""The model protocol's values: what a model-driven agent and a model exchange."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from coreagent_sdk import TURN_ERROR_KINDS
from coreagent_sdk.errors import CoreAgentError
from coreagent_sdk.models import (
    ROLES,
    Message,
    Model,
    ModelError,
    ModelReply,
    ToolCall,
    ToolSpec,
    Usage,
)


def test_the_message_builders_give_each_role_its_fields() -> None:
    call = ToolCall("c1", "call_peer", {"peer": "a", "prompt": "hi"})
    assert Message.system("be brief") == Message("system", "be brief")
    assert Message.user("hello").role == "user"
    said = Message.assistant("asking", [call])
    assert (said.role, said.text, said.tool_calls) == ("assistant", "asking", (call,))
    result = Message.tool_result(call, '{"response": "ok"}', is_error=True)
    assert (result.role, result.tool_call_id, result.tool_name, result.is_error) == (
        "tool",
        "c1",
        "call_peer",
        True,
    )


def test_a_message_with_an_unknown_role_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="'model'") as caught:
        Message("model", "hi")  # type: ignore[arg-type]
    for role in ROLES:
        assert role in str(caught.value)


def test_a_tool_calls_arguments_are_copied_so_a_later_change_of_the_dict_does_not_reach_it() -> (
    None
):
    arguments = {"peer": "a"}
    call = ToolCall("c1", "call_peer", arguments)
    arguments["peer"] = "b"
    assert call.arguments == {"peer": "a"}


def test_usage_adds_up_over_the_replies_of_a_turn() -> None:
    total = Usage(10, 2) + Usage(5, 7)
    assert total == Usage(15, 9)
    assert total.total_tokens == 24


def test_a_reply_without_tool_calls_is_an_answer_and_lists_become_tuples() -> None:
    reply = ModelReply(text="done", tool_calls=[ToolCall("c", "t")])
    assert reply.tool_calls == (ToolCall("c", "t"),)
    assert ModelReply(text="done").tool_calls == ()


def test_a_tool_spec_offers_an_empty_object_schema_by_default() -> None:
    assert ToolSpec("lookup").parameters == {"type": "object", "properties": {}}


def test_any_object_with_an_async_complete_is_a_model() -> None:
    class Echo:
        async def complete(
            self, messages: Sequence[Message], tools: Sequence[ToolSpec]
        ) -> ModelReply:
            return ModelReply(text=messages[-1].text)

    assert isinstance(Echo(), Model)
    assert not isinstance(object(), Model)


def test_a_model_error_carries_a_turn_error_kind_and_whether_to_retry() -> None:
    error = ModelError("rate limited by the API", kind="rate_limited", retryable=True, status=429)
    assert isinstance(error, CoreAgentError)
    assert (error.kind, error.retryable, error.status) == ("rate_limited", True, 429)
    assert "rate_limited" in TURN_ERROR_KINDS


def test_a_model_error_with_a_kind_the_daemon_does_not_have_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'throttled'.*rate_limited"):
        ModelError("x", kind="throttled", retryable=True)
