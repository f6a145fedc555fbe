"""OpenAIChatModel on the Chat Completions wire: recorded shapes, respx routes, no network."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from typing import Any

import httpx
import pytest

from coreagent_sdk.models import Message, ModelError, OpenAIChatModel, ToolCall, ToolSpec, Usage

from .canary import CANARY, leaked
from .model_wire import BASE, Wire, guard_sockets, shape

openai = pytest.importorskip("openai")

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
def model(wire: Wire, monkeypatch: pytest.MonkeyPatch) -> OpenAIChatModel:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    return OpenAIChatModel("gpt-4o-mini", base_url=f"{BASE}/v1", http_client=wire.httpx_client())


def route(wire: Wire) -> Any:
    return wire.router.post("/v1/chat/completions")


# ------------------------------------------------------------------ import and build


def test_importing_the_models_package_imports_neither_vendor_package() -> None:
    code = (
        "import sys, coreagent_sdk.models\n"
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_building_without_the_openai_package_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # what `import openai` sees uninstalled
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    with pytest.raises(ImportError, match=r"pip install 'coreagent-sdk\[openai\]'"):
        OpenAIChatModel("gpt-4o-mini")


def test_an_unset_key_variable_is_a_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MY_OPENAI_KEY", raising=False)
    with pytest.raises(ModelError, match="'MY_OPENAI_KEY'") as caught:
        OpenAIChatModel("gpt-4o-mini", api_key_env="MY_OPENAI_KEY")
    assert (caught.value.kind, caught.value.retryable) == ("config_error", False)


def test_the_repr_names_model_and_url_and_never_the_key(model: OpenAIChatModel) -> None:
    assert repr(model) == "OpenAIChatModel(model='gpt-4o-mini', base_url='http://127.0.0.1:9/v1')"
    assert not leaked(repr(model)) and not leaked(str(vars(model).get("base_url")))


def test_a_base_url_that_is_not_http_is_refused_before_any_client_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    with pytest.raises(ValueError, match=r"'file:///etc'.*only http and https"):
        OpenAIChatModel("gpt-4o-mini", base_url="file:///etc")


async def test_the_default_base_url_is_openais_and_the_recording_wire_refuses_it_undialed(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)  # the package would follow it
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    model = OpenAIChatModel("gpt-4o-mini", http_client=wire.httpx_client())
    with pytest.raises(ModelError) as caught:
        await model.complete(CONVERSATION, [])
    # The wire saw where the request was going and answered it itself: no DNS, no socket.
    assert wire.refused == ["https://api.openai.com/v1/chat/completions"]
    assert (caught.value.kind, caught.value.retryable) == ("transient_network", True)
    wire.refused.clear()  # proven; the fixture's own check is for every other test


# ------------------------------------------------------------------ the request


async def test_the_request_is_the_chat_completions_shape_for_every_role(
    model: OpenAIChatModel, wire: Wire
) -> None:
    route(wire).respond(200, json=shape("openai-answer.json"))
    call = ToolCall("call_1", "call_peer", {"peer": "weather", "prompt": "Lyon?"})
    conversation = [
        *CONVERSATION,
        Message.assistant("Asking weather.", [call]),
        Message.tool_result(call, '{"response": "rain"}'),
        Message.assistant("", [ToolCall("call_2", "call_peer", {"peer": "x", "prompt": "y"})]),
        Message.tool_result(
            ToolCall("call_2", "call_peer"), '{"error": "unknown peer"}', is_error=True
        ),
    ]
    await model.complete(conversation, [CALL_PEER, ToolSpec("now")])
    assert wire.sent() == [
        {
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You route questions to peers."},
                {"role": "user", "content": "Lyon tomorrow?"},
                {
                    "role": "assistant",
                    "content": "Asking weather.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": "call_peer",
                                "arguments": '{"peer": "weather", "prompt": "Lyon?"}',
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": '{"response": "rain"}'},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {
                                "name": "call_peer",
                                "arguments": '{"peer": "x", "prompt": "y"}',
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_2", "content": '{"error": "unknown peer"}'},
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "call_peer",
                        "description": "Ask another agent by name and get its answer.",
                        "parameters": dict(CALL_PEER.parameters),
                    },
                },
                {
                    "type": "function",
                    "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
                },
            ],
        }
    ]
    sent = wire.requests[0]
    assert sent.headers["authorization"] == f"Bearer {CANARY}"
    assert sent.url == httpx.URL(f"{BASE}/v1/chat/completions")


async def test_no_tools_means_no_tools_field_and_options_are_sent_as_given(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    model = OpenAIChatModel(
        "gpt-4o-mini",
        base_url=f"{BASE}/v1",
        http_client=wire.httpx_client(),
        options={"temperature": 0, "max_completion_tokens": 50},
    )
    route(wire).respond(200, json=shape("openai-answer.json"))
    await model.complete(CONVERSATION, [])
    assert wire.sent()[0] == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You route questions to peers."},
            {"role": "user", "content": "Lyon tomorrow?"},
        ],
        "temperature": 0,
        "max_completion_tokens": 50,
    }


async def test_a_local_server_that_needs_no_key_is_reached_without_the_variable(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIChatModel(
        "llama3.2", base_url=f"{BASE}/v1", api_key_env=None, http_client=wire.httpx_client()
    )
    route(wire).respond(200, json=shape("openai-answer.json"))
    reply = await model.complete(CONVERSATION, [])
    assert reply.text.startswith("Tomorrow in Lyon")


# ------------------------------------------------------------------ replies


async def test_a_tool_call_round_trip_asks_then_answers_with_the_result(
    model: OpenAIChatModel, wire: Wire
) -> None:
    route(wire).mock(
        side_effect=[
            httpx.Response(200, json=shape("openai-tool-call.json")),
            httpx.Response(200, json=shape("openai-answer.json")),
        ]
    )
    asked = await model.complete(CONVERSATION, [CALL_PEER])
    call = ToolCall(
        "call_Qx7BEwqK1JdUq3yT6nF1aB2c",
        "call_peer",
        {"peer": "weather", "prompt": "Forecast for Lyon tomorrow?"},
    )
    assert asked.tool_calls == (call,)
    assert (asked.text, asked.stop_reason, asked.usage) == ("", "tool_calls", Usage(112, 24))
    assert asked.model == "gpt-4o-mini-2024-07-18"

    conversation = [
        *CONVERSATION,
        Message.assistant(asked.text, asked.tool_calls),
        Message.tool_result(call, '{"response": "light rain, 14 C"}'),
    ]
    answered = await model.complete(conversation, [CALL_PEER])
    assert answered.tool_calls == ()
    assert answered.text == "Tomorrow in Lyon: light rain in the morning, 14 C by the afternoon."
    assert (answered.stop_reason, answered.usage) == ("stop", Usage(171, 19))
    assert asked.usage + answered.usage == Usage(283, 43)

    second = wire.sent()[1]["messages"]
    assert second[2]["tool_calls"][0]["id"] == "call_Qx7BEwqK1JdUq3yT6nF1aB2c"
    assert json.loads(second[2]["tool_calls"][0]["function"]["arguments"]) == dict(call.arguments)
    assert second[3] == {
        "role": "tool",
        "tool_call_id": "call_Qx7BEwqK1JdUq3yT6nF1aB2c",
        "content": '{"response": "light rain, 14 C"}',
    }


async def test_parallel_tool_calls_come_back_in_the_models_order(
    model: OpenAIChatModel, wire: Wire
) -> None:
    route(wire).respond(200, json=shape("openai-parallel-tool-calls.json"))
    reply = await model.complete(CONVERSATION, [CALL_PEER])
    assert [(c.id, c.arguments["peer"]) for c in reply.tool_calls] == [
        ("call_7nJd0sK2mQ9wLx4Rb5Tc6Vy1", "weather"),
        ("call_Hk3Pz8Yf2Wq6Ns1Dm4Lr9Xe0", "trains"),
    ]
    assert reply.usage == Usage(130, 58)


async def test_a_reply_without_usage_from_a_compatible_server_counts_zero_tokens(
    model: OpenAIChatModel, wire: Wire
) -> None:
    body = shape("openai-answer.json")
    del body["usage"]
    route(wire).respond(200, json=body)
    assert (await model.complete(CONVERSATION, [])).usage == Usage(0, 0)


async def test_empty_arguments_for_a_tool_without_parameters_are_an_empty_object(
    model: OpenAIChatModel, wire: Wire
) -> None:
    body = shape("openai-tool-call.json")
    body["choices"][0]["message"]["tool_calls"][0]["function"] = {"name": "now", "arguments": ""}
    route(wire).respond(200, json=body)
    reply = await model.complete(CONVERSATION, [ToolSpec("now")])
    assert reply.tool_calls == (ToolCall("call_Qx7BEwqK1JdUq3yT6nF1aB2c", "now", {}),)


async def test_a_refusal_is_the_replys_text(model: OpenAIChatModel, wire: Wire) -> None:
    body = shape("openai-answer.json")
    body["choices"][0]["message"].update(content=None, refusal="I can't help with that.")
    route(wire).respond(200, json=body)
    assert (await model.complete(CONVERSATION, [])).text == "I can't help with that."


# ------------------------------------------------------------------ failures


@pytest.mark.parametrize(
    ("status", "fixture", "kind", "retryable"),
    [
        (429, "openai-error-429.json", "rate_limited", True),
        (500, "openai-error-500.json", "transient_network", True),
        (503, "openai-error-500.json", "transient_network", True),
        (401, "openai-error-401.json", "auth_error", False),
        (403, "openai-error-401.json", "auth_error", False),
        (404, "openai-error-404.json", "model_not_found", False),
        (400, "openai-error-404.json", "config_error", False),
        (409, "openai-error-404.json", "unknown", False),
    ],
)
async def test_an_error_status_maps_to_the_daemons_turn_error_kind(
    model: OpenAIChatModel, wire: Wire, status: int, fixture: str, kind: str, retryable: bool
) -> None:
    route(wire).respond(status, json=shape(fixture))
    with pytest.raises(ModelError) as caught:
        await model.complete(CONVERSATION, [])
    error = caught.value
    assert (error.kind, error.retryable, error.status) == (kind, retryable, status)
    assert str(error).startswith("OpenAIChatModel: ")
    assert shape(fixture)["error"]["message"][:60] in str(error)
    # The SDK's own exception (raw response and all) is not chained to ours.
    assert error.__cause__ is None and error.__context__ is None


async def test_the_sdks_own_retries_are_off_so_one_failure_is_one_request(
    model: OpenAIChatModel, wire: Wire
) -> None:
    route(wire).respond(503, json=shape("openai-error-500.json"))
    with pytest.raises(ModelError):
        await model.complete(CONVERSATION, [])
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    "error",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("x")],
)
async def test_no_http_answer_is_a_retryable_transient_network_error(
    model: OpenAIChatModel, wire: Wire, error: Exception
) -> None:
    route(wire).mock(side_effect=error)
    with pytest.raises(ModelError, match=r"127\.0\.0\.1:9.*check base_url") as caught:
        await model.complete(CONVERSATION, [])
    assert (caught.value.kind, caught.value.retryable, caught.value.status) == (
        "transient_network",
        True,
        None,
    )


async def test_a_server_echoing_the_key_everywhere_leaks_it_nowhere(
    model: OpenAIChatModel, wire: Wire, caplog: pytest.LogCaptureFixture
) -> None:
    echo = {"error": {"message": f"bad key {CANARY} (Bearer {CANARY})", "type": CANARY}}
    headers = {"x-request-id": CANARY, "x-echo": f"Bearer {CANARY}"}
    route(wire).respond(401, json=echo, headers=headers)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ModelError) as caught:
        await model.complete(CONVERSATION, [])
    assert "bad key [redacted]" in str(caught.value)
    assert not leaked(caplog.text) and not leaked(str(caught.value)) and not leaked(repr(model))


async def test_a_key_echoed_into_the_models_answer_is_redacted_there_too(
    model: OpenAIChatModel, wire: Wire
) -> None:
    body = shape("openai-tool-call.json")
    message = body["choices"][0]["message"]
    message["content"] = f"your key is {CANARY}"
    message["tool_calls"][0]["function"]["arguments"] = json.dumps({"peer": CANARY})
    route(wire).respond(200, json=body, headers={"x-request-id": CANARY})
    reply = await model.complete(CONVERSATION, [])
    assert reply.text == "your key is [redacted]"
    assert reply.tool_calls[0].arguments == {"peer": "[redacted]"}


async def test_a_users_own_client_is_used_as_configured_and_its_key_is_scrubbed(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = openai.AsyncOpenAI(
        api_key=CANARY, base_url=f"{BASE}/v1", http_client=wire.httpx_client(), max_retries=0
    )
    model = OpenAIChatModel("gpt-4o-mini", client=client)
    route(wire).respond(429, json={"error": {"message": f"slow down, {CANARY}"}})
    with pytest.raises(ModelError, match=r"slow down, \[redacted\]") as caught:
        await model.complete(CONVERSATION, [])
    assert caught.value.kind == "rate_limited"
    assert wire.requests[0].headers["authorization"] == f"Bearer {CANARY}"


# ------------------------------------------------------------------ hostile answers


def _answer_with(path: list[Any], value: Any) -> dict[str, Any]:
    body = shape("openai-tool-call.json")
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (["choices"], KeyError, "choices is missing"),
        (["choices"], {"0": 1}, "choices is an object"),
        (["choices"], [], "choices is a list of 0"),
        (["choices", 0], "x", r"choices\[0\] is a string"),
        (["choices", 0, "message"], KeyError, r"choices\[0\]\.message is missing"),
        (["choices", 0, "message", "content"], 7, r"message\.content is a number"),
        (["choices", 0, "message", "tool_calls"], "call_peer", r"tool_calls is a string"),
        (["choices", 0, "finish_reason"], True, r"finish_reason is a boolean"),
        (["model"], ["m"], r"model is a list of 1"),
    ],
)
async def test_a_hostile_answer_is_a_model_error_naming_the_field(
    model: OpenAIChatModel, wire: Wire, path: list[Any], value: Any, named: str
) -> None:
    route(wire).respond(200, json=_answer_with(path, value))
    with pytest.raises(ModelError, match=named) as caught:
        await model.complete(CONVERSATION, [])
    assert (caught.value.kind, caught.value.retryable) == ("unknown", False)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"<html>502 Bad Gateway</html>", r"a web page, not JSON: '<html>502 Bad Gateway</html>'"),
        (b"[1, 2, 3]", r"not a JSON object: '\[1, 2, 3\]'"),
        (b"\xff\xfe not utf-8", "not a JSON object: '\ufffd\ufffd not utf-8'"),
    ],
)
async def test_an_answer_that_is_not_a_json_object_is_a_model_error_quoting_it(
    model: OpenAIChatModel, wire: Wire, content: bytes, said: str
) -> None:
    route(wire).respond(200, content=content, headers={"content-type": "application/json"})
    with pytest.raises(ModelError, match=said) as caught:
        await model.complete(CONVERSATION, [])
    assert (caught.value.kind, caught.value.retryable) == ("unknown", False)


async def test_an_answer_over_the_size_bound_is_refused_and_one_at_the_bound_is_read(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    body = shape("openai-answer.json")
    body["choices"][0]["message"]["content"] = "x" * 100_000
    exact = len(json.dumps(body).encode())
    route(wire).respond(200, content=json.dumps(body).encode())
    at_bound = OpenAIChatModel(
        "m", base_url=f"{BASE}/v1", http_client=wire.httpx_client(), max_response_bytes=exact
    )
    assert len((await at_bound.complete(CONVERSATION, [])).text) == 100_000
    below = OpenAIChatModel(
        "m", base_url=f"{BASE}/v1", http_client=wire.httpx_client(), max_response_bytes=exact - 1
    )
    with pytest.raises(ModelError, match=f"passed max_response_bytes={exact - 1}"):
        await below.complete(CONVERSATION, [])


async def test_closing_the_model_closes_the_client_it_built_but_not_one_it_was_given(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    http = wire.httpx_client()
    async with OpenAIChatModel("m", base_url=f"{BASE}/v1", http_client=http):
        pass
    assert http.is_closed
    given = openai.AsyncOpenAI(
        api_key=CANARY, base_url=f"{BASE}/v1", http_client=wire.httpx_client()
    )
    async with OpenAIChatModel("m", client=given):
        pass
    assert not given.is_closed()
    await given.close()
