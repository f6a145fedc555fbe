"""The one-line swap: a ModelAgent on a vendor adapter, over respx routes, never the network."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from coreagent_sdk.host import ModelAgent
from coreagent_sdk.models import OpenAIChatModel

from .canary import CANARY
from .model_wire import BASE, Wire, guard_sockets
from .test_model_agent import hosted, run_turn

pytest.importorskip("openai")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Any:
    refused = guard_sockets(monkeypatch)
    yield refused
    assert refused == [], f"a test tried to leave loopback: {refused}"


def completion(message: dict[str, Any], usage: tuple[int, int], reason: str) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": reason, "message": message}],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": sum(usage),
            },
        },
    )


async def test_an_openai_router_delegates_with_call_peer_and_reports_its_usage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    wire = Wire()
    bodies: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        last = body["messages"][-1]
        if last["role"] == "tool":
            said = json.loads(last["content"])["response"]
            return completion(
                {"role": "assistant", "content": f"storage: {said}"}, (120, 9), "stop"
            )
        call = {
            "id": "call_1",
            "type": "function",
            "function": {
                "name": "call_peer",
                "arguments": json.dumps({"peer": "storage", "prompt": "disk usage?"}),
            },
        }
        return completion(
            {"role": "assistant", "content": None, "tool_calls": [call]}, (100, 20), "tool_calls"
        )

    wire.router.post("/v1/chat/completions").mock(side_effect=answer)
    model = OpenAIChatModel("gpt-4o-mini", base_url=f"{BASE}/v1", http_client=wire.httpx_client())
    host, peers = hosted(ModelAgent(model, persona="You route."), "storage")

    outcome = await run_turn(host, "is the disk full?")
    await host.aclose()

    assert outcome.answer == "storage: DISK USAGE?"
    assert peers["storage"].turns == 1
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["call_peer"]
    assert [m["role"] for m in bodies[1]["messages"]] == ["system", "user", "assistant", "tool"]
    assert bodies[1]["messages"][3]["tool_call_id"] == "call_1"
    assert outcome.complete is not None
    assert (outcome.complete.tokens_in, outcome.complete.tokens_out) == (220, 29)
    assert CANARY not in repr(outcome.events)
    assert wire.refused == []


async def test_a_429_from_the_vendor_is_the_turns_rate_limited_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    wire = Wire()
    wire.router.post("/v1/chat/completions").mock(
        return_value=httpx.Response(429, json={"error": {"message": "slow down", "type": "x"}})
    )
    model = OpenAIChatModel("gpt-4o-mini", base_url=f"{BASE}/v1", http_client=wire.httpx_client())
    host, _ = hosted(ModelAgent(model), "storage")
    outcome = await run_turn(host, "hi")
    await host.aclose()
    assert outcome.error is not None
    assert (outcome.error.kind, outcome.error.retryable) == ("rate_limited", True)
    assert CANARY not in outcome.error.message
