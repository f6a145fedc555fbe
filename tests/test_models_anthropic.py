"""AnthropicModel on the Messages API wire: recorded shapes, respx routes, no network."""

from __future__ import annotations

import logging
import sys
from typing import Any

import httpx
import pytest

from coreagent_sdk.models import AnthropicModel, Message, ModelError, ToolCall, ToolSpec, Usage

from .canary import CANARY, leaked
from .model_wire import BASE, Wire, guard_sockets, shape

anthropic = pytest.importorskip("anthropic")

CALL_PEER = ToolSpec(
    "call_peer",
    "Ask another agent by name and get its answer.",
    {
        "type": "object",
        "properties": {"peer": {"type": "string"}, "prompt": {"type": "string"}},
        "required": ["peer", "prompt"],
    },
)
CONVERSATION = [Message.system("You route questions to peers."), Message.user("Lyon tomorrow?")]


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Any:
    refused = guard_sockets(monkeypatch)
    yield refused
    assert refused == [], f"a test tried to leave loopback: {refused}"


@pytest.fixture
def wire() -> Any:
    wire = Wire()
    yield wire
    assert wire.refused == [], f"a request would have left the machine: {wire.refused}"


@pytest.fixture
def model(wire: Wire, monkeypatch: pytest.MonkeyPatch) -> AnthropicModel:
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    return AnthropicModel("claude-haiku-4-5", base_url=BASE, http_client=wire.httpx2_client())


def route(wire: Wire) -> Any:
    return wire.router.post("/v1/messages")


# ------------------------------------------------------------------ build


def test_building_without_the_anthropic_package_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    with pytest.raises(ImportError, match=r"pip install 'coreagent-sdk\[anthropic\]'"):
        AnthropicModel("claude-haiku-4-5")


def test_an_unset_key_variable_is_a_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "  ")
    with pytest.raises(ModelError, match=r"'ANTHROPIC_API_KEY'.*unset or empty") as caught:
        AnthropicModel("claude-haiku-4-5")
    assert (caught.value.kind, caught.value.retryable) == ("config_error", False)


@pytest.mark.parametrize("max_tokens", [0, -1, True, 1.5])
def test_max_tokens_must_be_a_positive_integer(
    monkeypatch: pytest.MonkeyPatch, max_tokens: Any
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    with pytest.raises(ValueError, match=r"max_tokens.*positive integer"):
        AnthropicModel("claude-haiku-4-5", max_tokens=max_tokens)


def test_the_repr_names_model_and_url_and_never_the_key(model: AnthropicModel) -> None:
    assert repr(model) == "AnthropicModel(model='claude-haiku-4-5', base_url='http://127.0.0.1:9')"
    assert not leaked(repr(model))


async def test_the_default_base_url_is_anthropics_and_the_recording_wire_refuses_it_undialed(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)  # the package would follow it
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    model = AnthropicModel("claude-haiku-4-5", http_client=wire.httpx2_client())
    with pytest.raises(ModelError) as caught:
        await model.complete(CONVERSATION, [])
    assert wire.refused == ["https://api.anthropic.com/v1/messages"]
    assert (caught.value.kind, caught.value.retryable) == ("transient_network", True)
    wire.refused.clear()  # proven; the fixture's own check is for every other test


# ------------------------------------------------------------------ the request


async def test_the_request_puts_system_on_top_and_merges_parallel_tool_results(
    model: AnthropicModel, wire: Wire
) -> None:
    route(wire).respond(200, json=shape("anthropic-answer.json"))
    weather = ToolCall("toolu_1", "call_peer", {"peer": "weather", "prompt": "Rain?"})
    trains = ToolCall("toolu_2", "call_peer", {"peer": "trains", "prompt": "First train?"})
    conversation = [
        Message.system("You route questions to peers."),
        Message.system("Be brief."),
        Message.user("Lyon tomorrow?"),
        Message.assistant("Asking two peers.", [weather, trains]),
        Message.tool_result(weather, '{"response": "rain"}'),
        Message.tool_result(trains, '{"error": "unknown peer"}', is_error=True),
        Message.user("And keep it short."),
    ]
    await model.complete(conversation, [CALL_PEER, ToolSpec("now")])
    assert wire.sent() == [
        {
            "model": "claude-haiku-4-5",
            "max_tokens": 4096,
            "system": "You route questions to peers.\n\nBe brief.",
            "messages": [
                {"role": "user", "content": "Lyon tomorrow?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Asking two peers."},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "call_peer",
                            "input": {"peer": "weather", "prompt": "Rain?"},
                        },
                        {
                            "type": "tool_use",
                            "id": "toolu_2",
                            "name": "call_peer",
                            "input": {"peer": "trains", "prompt": "First train?"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": '{"response": "rain"}',
                        },
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_2",
                            "content": '{"error": "unknown peer"}',
                            "is_error": True,
                        },
                        {"type": "text", "text": "And keep it short."},
                    ],
                },
            ],
            "tools": [
                {
                    "name": "call_peer",
                    "description": "Ask another agent by name and get its answer.",
                    "input_schema": dict(CALL_PEER.parameters),
                },
                {"name": "now", "input_schema": {"type": "object", "properties": {}}},
            ],
        }
    ]
    sent = wire.requests[0]
    # The package chooses the header (x-api-key, or a bearer token in 2.x): the key is in one.
    assert CANARY in (sent.headers.get("x-api-key", ""), sent.headers.get("authorization", "")[7:])
    assert "anthropic-version" in sent.headers
    assert sent.url == httpx.URL(f"{BASE}/v1/messages")


async def test_an_assistant_message_of_tool_calls_alone_sends_no_empty_text_block(
    model: AnthropicModel, wire: Wire
) -> None:
    route(wire).respond(200, json=shape("anthropic-answer.json"))
    call = ToolCall("toolu_1", "now")
    await model.complete(
        [
            Message.user("time?"),
            Message.assistant("", [call]),
            Message.tool_result(call, '"12:00"'),
        ],
        [ToolSpec("now")],
    )
    assert wire.sent()[0]["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}],
    }


async def test_max_tokens_and_options_are_sent_as_configured_and_no_tools_means_no_field(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    model = AnthropicModel(
        "claude-haiku-4-5",
        base_url=BASE,
        http_client=wire.httpx2_client(),
        max_tokens=256,
        options={"temperature": 0.2},
    )
    route(wire).respond(200, json=shape("anthropic-answer.json"))
    await model.complete([Message.user("hi")], [])
    assert wire.sent()[0] == {
        "model": "claude-haiku-4-5",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2,
    }


# ------------------------------------------------------------------ replies


async def test_a_tool_use_round_trip_asks_then_answers_with_the_result(
    model: AnthropicModel, wire: Wire
) -> None:
    route(wire).mock(
        side_effect=[
            httpx.Response(200, json=shape("anthropic-tool-use.json")),
            httpx.Response(200, json=shape("anthropic-answer.json")),
        ]
    )
    asked = await model.complete(CONVERSATION, [CALL_PEER])
    call = ToolCall(
        "toolu_01A09q90qw90lq917835lq9",
        "call_peer",
        {"peer": "weather", "prompt": "Forecast for Lyon tomorrow?"},
    )
    assert asked.tool_calls == (call,)
    assert (asked.text, asked.stop_reason, asked.usage) == (
        "I'll ask the weather agent.",
        "tool_use",
        Usage(412, 71),
    )
    assert asked.model == "claude-haiku-4-5-20251001"

    conversation = [
        *CONVERSATION,
        Message.assistant(asked.text, asked.tool_calls),
        Message.tool_result(call, '{"response": "light rain, 14 C"}'),
    ]
    answered = await model.complete(conversation, [CALL_PEER])
    assert answered.tool_calls == ()
    assert answered.text.startswith("Tomorrow in Lyon")
    assert (answered.stop_reason, answered.usage) == ("end_turn", Usage(520, 22))

    second = wire.sent()[1]["messages"]
    assert second[1]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_01A09q90qw90lq917835lq9",
        "name": "call_peer",
        "input": {"peer": "weather", "prompt": "Forecast for Lyon tomorrow?"},
    }
    assert second[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                "content": '{"response": "light rain, 14 C"}',
            }
        ],
    }


async def test_parallel_tool_uses_come_back_in_the_models_order(
    model: AnthropicModel, wire: Wire
) -> None:
    route(wire).respond(200, json=shape("anthropic-parallel-tool-use.json"))
    reply = await model.complete(CONVERSATION, [CALL_PEER])
    assert [(c.id, c.arguments["peer"]) for c in reply.tool_calls] == [
        ("toolu_01X2y3Z4a5B6c7D8e9F0g1H2", "weather"),
        ("toolu_01J3k4L5m6N7o8P9q0R1s2T3", "trains"),
    ]
    assert (reply.text, reply.usage) == ("", Usage(430, 96))


async def test_blocks_of_other_types_are_skipped_and_texts_joined(
    model: AnthropicModel, wire: Wire
) -> None:
    body = shape("anthropic-answer.json")
    body["content"] = [
        {"type": "thinking", "thinking": "hmm", "signature": "abc"},
        {"type": "text", "text": "one"},
        {"type": "text", "text": "two"},
    ]
    route(wire).respond(200, json=body)
    assert (await model.complete(CONVERSATION, [])).text == "one\ntwo"


# ------------------------------------------------------------------ failures


@pytest.mark.parametrize(
    ("status", "fixture", "kind", "retryable"),
    [
        (429, "anthropic-error-429.json", "rate_limited", True),
        (529, "anthropic-error-529.json", "transient_network", True),
        (500, "anthropic-error-529.json", "transient_network", True),
        (401, "anthropic-error-401.json", "auth_error", False),
        (403, "anthropic-error-401.json", "auth_error", False),
        (404, "anthropic-error-404.json", "model_not_found", False),
        (400, "anthropic-error-400.json", "config_error", False),
        (413, "anthropic-error-400.json", "unknown", False),
    ],
)
async def test_an_error_status_maps_to_the_daemons_turn_error_kind(
    model: AnthropicModel, wire: Wire, status: int, fixture: str, kind: str, retryable: bool
) -> None:
    route(wire).respond(status, json=shape(fixture))
    with pytest.raises(ModelError) as caught:
        await model.complete(CONVERSATION, [])
    error = caught.value
    assert (error.kind, error.retryable, error.status) == (kind, retryable, status)
    assert str(error).startswith("AnthropicModel: ")
    assert shape(fixture)["error"]["message"][:60] in str(error)
    assert error.__cause__ is None and error.__context__ is None


async def test_the_sdks_own_retries_are_off_so_one_failure_is_one_request(
    model: AnthropicModel, wire: Wire
) -> None:
    route(wire).respond(529, json=shape("anthropic-error-529.json"))
    with pytest.raises(ModelError):
        await model.complete(CONVERSATION, [])
    assert len(wire.requests) == 1


async def test_no_http_answer_is_a_retryable_transient_network_error(
    model: AnthropicModel, wire: Wire
) -> None:
    route(wire).mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(ModelError, match="check base_url") as caught:
        await model.complete(CONVERSATION, [])
    assert (caught.value.kind, caught.value.retryable) == ("transient_network", True)


async def test_a_server_echoing_the_key_everywhere_leaks_it_nowhere(
    model: AnthropicModel, wire: Wire, caplog: pytest.LogCaptureFixture
) -> None:
    echo = {"type": "error", "error": {"type": CANARY, "message": f"invalid x-api-key {CANARY}"}}
    route(wire).respond(401, json=echo, headers={"request-id": CANARY, "x-echo": CANARY})
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ModelError) as caught:
        await model.complete(CONVERSATION, [])
    assert "invalid x-api-key [redacted]" in str(caught.value)
    assert not leaked(caplog.text) and not leaked(str(caught.value)) and not leaked(repr(model))


async def test_a_users_own_client_is_used_as_configured_and_its_key_is_scrubbed(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    client = anthropic.AsyncAnthropic(
        api_key=CANARY, base_url=BASE, http_client=wire.httpx2_client(), max_retries=0
    )
    model = AnthropicModel("claude-haiku-4-5", client=client)
    route(wire).respond(200, json={**shape("anthropic-answer.json"), "model": CANARY})
    reply = await model.complete(CONVERSATION, [])
    assert reply.model == "[redacted]"
    sent = wire.requests[0].headers
    assert CANARY in (sent.get("x-api-key", ""), sent.get("authorization", "")[7:])


# ------------------------------------------------------------------ hostile answers


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"content": None}, "content is missing"),
        ({"content": "hello"}, "content is a string"),
        ({"content": [7]}, r"content\[0\] is a number"),
        ({"content": [{"text": "no type"}]}, r"content\[0\]\.type is missing"),
        ({"content": [{"type": "text", "text": 5}]}, r"content\[0\]\.text is a number"),
        ({"stop_reason": 3}, "stop_reason is a number"),
        ({"usage": []}, "usage is a list of 0"),
    ],
)
async def test_a_hostile_answer_is_a_model_error_naming_the_field(
    model: AnthropicModel, wire: Wire, change: dict[str, Any], named: str
) -> None:
    route(wire).respond(200, json={**shape("anthropic-tool-use.json"), **change})
    with pytest.raises(ModelError, match=named) as caught:
        await model.complete(CONVERSATION, [])
    assert (caught.value.kind, caught.value.retryable) == ("unknown", False)


async def test_a_huge_answer_is_refused_by_the_size_bound_not_a_crash(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    model = AnthropicModel(
        "claude-haiku-4-5", base_url=BASE, http_client=wire.httpx2_client(), max_response_bytes=4096
    )
    body = {**shape("anthropic-answer.json"), "content": [{"type": "text", "text": "y" * 5000}]}
    route(wire).respond(200, json=body)
    with pytest.raises(ModelError, match="passed max_response_bytes=4096"):
        await model.complete(CONVERSATION, [])


async def test_closing_the_model_closes_the_client_it_built_but_not_one_it_was_given(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    http = wire.httpx2_client()
    async with AnthropicModel("m", base_url=BASE, http_client=http):
        pass
    assert http.is_closed
    given = anthropic.AsyncAnthropic(
        api_key=CANARY, base_url=BASE, http_client=wire.httpx2_client()
    )
    async with AnthropicModel("m", client=given):
        pass
    assert not given.is_closed()
    await given.close()
