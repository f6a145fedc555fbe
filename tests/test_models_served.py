"""A ModelAgent on a vendor adapter, served by an AgentHost, called with CallPeer: all on loopback.

The model is a real adapter (the vendor SDK's own HTTP client) talking to a
fake OpenAI/Anthropic-compatible server on 127.0.0.1; the router agent and a
specialist are AgentHosts registered on a hub served here; the caller is a
CallPeer that finds the router through the hub. The socket guard refuses DNS
and connects to anything but loopback for the whole test.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from coreagent_sdk import CallPeer, HubDirectory
from coreagent_sdk.errors import PeerTurnError
from coreagent_sdk.host import AgentHost, ModelAgent, PeerRegistry, Turn
from coreagent_sdk.models import AnthropicModel, OpenAIChatModel

from .canary import CANARY
from .model_wire import guard_sockets

pytest.importorskip("openai")
pytest.importorskip("anthropic")
pytest.importorskip("uvicorn")

from .fake_model_server import FakeModelServer


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Any:
    refused = guard_sockets(monkeypatch)
    yield refused
    assert refused == [], f"a test tried to leave loopback: {refused}"


async def serve(host: AgentHost) -> tuple[str, asyncio.Task[None]]:
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    return await asyncio.wait_for(ready, 10), task


async def weather(turn: Turn) -> None:
    await turn.say(f"sunny in Lyon (asked: {turn.prompt})")


@pytest.fixture
async def fleet() -> AsyncIterator[str]:
    """A hub and the `weather` specialist registered on it, on loopback; yields the hub's URL."""
    hub = AgentHost("hub", registry=PeerRegistry(), session_rate_limit=None)
    hub_url, hub_task = await serve(hub)
    specialist = AgentHost("weather", behavior=weather, register_to=hub_url)
    _, specialist_task = await serve(specialist)
    try:
        yield hub_url
    finally:
        for host, task in ((specialist, specialist_task), (hub, hub_task)):
            host.stop()
            await asyncio.wait_for(task, 10)


def adapter(kind: str, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    if kind == "openai":
        monkeypatch.setenv("OPENAI_API_KEY", CANARY)
        return OpenAIChatModel("fake-gpt", base_url=server.openai_url, timeout=10)
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    return AnthropicModel("fake-claude", base_url=server.anthropic_url, timeout=10)


async def ask_router(hub_url: str, model: Any, prompt: str) -> Any:
    router = AgentHost(
        "router", behavior=ModelAgent(model, persona="You route questions."), register_to=hub_url
    )
    _, task = await serve(router)
    directory = HubDirectory(hub_url)
    try:
        async with CallPeer(directory, timeout=20) as tool:
            return await tool.acall(peer="router", prompt=prompt)
    finally:
        await directory.aclose()
        router.stop()
        await asyncio.wait_for(task, 10)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_model_agent_on_an_adapter_delegates_through_the_host_and_answers(
    kind: str, fleet: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeModelServer() as server, adapter(kind, server, monkeypatch) as model:
        result = await ask_router(fleet, model, "ask weather for tomorrow")
    # The fake model asked `weather` through call_peer, got its answer as the tool
    # result, and answered with it: the answer went round the whole loop.
    assert result.response.startswith("The peers said: ")
    assert "sunny in Lyon (asked: ask weather for tomorrow)" in result.response
    assert len(server.requests) == 2
    first, second = (body for _, _, body in server.requests)
    offered = [t["function"]["name"] if kind == "openai" else t["name"] for t in first["tools"]]
    assert "call_peer" in offered
    system = first["messages"][0]["content"] if kind == "openai" else first["system"]
    assert system.startswith("You route questions.")
    assert "sunny in Lyon" in json.dumps(second["messages"][-1])


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_refused_key_reaches_the_caller_as_an_auth_error_without_the_key(
    kind: str, fleet: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeModelServer() as server:
        server.fail_next = [(401, {"error": {"message": f"bad key {CANARY}", "type": "auth"}})]
        async with adapter(kind, server, monkeypatch) as model:
            with pytest.raises(PeerTurnError) as caught:
                await ask_router(fleet, model, "ask weather for tomorrow")
    assert (caught.value.kind, caught.value.retryable) == ("auth_error", False)
    assert "bad key [redacted]" in str(caught.value)
    assert CANARY not in str(caught.value)
