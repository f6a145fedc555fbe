"""The vendor adapters as a user runs them: a real client, real sockets, a fake server on 127.0.0.1.

No mock transport here: each adapter builds its vendor SDK's own default
HTTP client, pointed by `base_url` at `FakeModelServer`, and talks to it over
loopback through several rounds of tool calls and answers. The socket guard
refuses DNS and connects to anything but loopback for the whole test.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from coreagent_sdk.models import (
    AnthropicModel,
    Message,
    ModelError,
    OpenAIChatModel,
    ToolSpec,
    Usage,
)

from .canary import CANARY
from .model_wire import guard_sockets

pytest.importorskip("openai")
pytest.importorskip("anthropic")
pytest.importorskip("uvicorn")

from .fake_model_server import FakeModelServer

CALL_PEER = ToolSpec(
    "call_peer",
    "Ask another agent by name.",
    {"type": "object", "properties": {"peer": {"type": "string"}, "prompt": {"type": "string"}}},
)
ROUNDS = 3


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Any:
    refused = guard_sockets(monkeypatch)
    yield refused
    assert refused == [], f"a test tried to leave loopback: {refused}"


@pytest.fixture
async def server() -> Any:
    async with FakeModelServer() as server:
        yield server


def build(kind: str, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    if kind == "openai":
        monkeypatch.setenv("OPENAI_API_KEY", CANARY)
        return OpenAIChatModel("fake-gpt", base_url=server.openai_url, timeout=10)
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    return AnthropicModel("fake-claude", base_url=server.anthropic_url, timeout=10)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_several_rounds_of_tool_call_then_answer_over_loopback_sockets(
    kind: str, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with build(kind, server, monkeypatch) as model:
        total = await rounds(model)
    assert len(server.requests) == 2 * ROUNDS
    # Tokens as the server counted them: 10 per message read (Anthropic's system prompt is
    # no message, and the assistant's call and its result are one message each), 5 written.
    read = (2 + 4) if kind == "openai" else (1 + 3)
    assert total == Usage(ROUNDS * 10 * read, ROUNDS * 2 * 5)
    path, headers, _ = server.requests[0]
    assert path == ("/v1/chat/completions" if kind == "openai" else "/v1/messages")
    assert CANARY in (headers.get("x-api-key"), headers.get("authorization", "")[7:])


async def rounds(model: Any) -> Usage:
    """ROUNDS turns of: the model asks a peer, gets the result, answers with it."""
    total = Usage()
    for round_ in range(ROUNDS):
        conversation = [Message.system("Route."), Message.user(f"ask weather{round_} for Lyon")]
        asked = await model.complete(conversation, [CALL_PEER])
        (call,) = asked.tool_calls
        assert (call.name, call.arguments["peer"]) == ("call_peer", f"weather{round_}")
        result = json.dumps({"response": f"rain {round_}"})
        conversation += [
            Message.assistant(asked.text, asked.tool_calls),
            Message.tool_result(call, result),
        ]
        answered = await model.complete(conversation, [CALL_PEER])
        assert answered.tool_calls == ()
        assert answered.text == f"The peers said: {result}"
        total = total + asked.usage + answered.usage
    return total


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_429_then_a_500_over_loopback_are_retryable_and_the_next_call_works(
    kind: str, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.fail_next = [
        (429, {"error": {"message": f"slow down {CANARY}", "type": "rate_limit_error"}}),
        (500, {"error": {"message": "boom", "type": "api_error"}}),
    ]
    conversation = [Message.user("ask weather now")]
    kinds = []
    async with build(kind, server, monkeypatch) as model:
        for _ in range(2):
            with pytest.raises(ModelError) as caught:
                await model.complete(conversation, [CALL_PEER])
            kinds.append((caught.value.kind, caught.value.retryable, caught.value.status))
            assert CANARY not in str(caught.value)
        reply = await model.complete(conversation, [CALL_PEER])
    assert kinds == [("rate_limited", True, 429), ("transient_network", True, 500)]
    assert reply.tool_calls[0].arguments["peer"] == "weather"
    assert len(server.requests) == 3  # no retries by the SDK behind our back


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_server_that_went_away_is_a_retryable_transient_network_error(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeModelServer() as server:
        model = build(kind, server, monkeypatch)
    # The block ended: the port is closed and a connect is refused at once.
    async with model:
        with pytest.raises(ModelError, match="could not be reached") as caught:
            await model.complete([Message.user("hi")], [])
    assert (caught.value.kind, caught.value.retryable) == ("transient_network", True)
