"""A served agent over Streamable HTTP on loopback: the SDK's client, a bearer token, refusals."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from coreagent_sdk import FakeClock
from coreagent_sdk.errors import TokenUnsetError
from coreagent_sdk.mcp import AgentMCPServer, FleetMCPServer
from simulator import Fleet, behaviors

TOKEN = "mcp-test-token-" + "k" * 24


@contextlib.asynccontextmanager
async def _client(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    # The SDK leaves a client it is handed open: it is ours to close.
    async with (
        httpx.AsyncClient(headers=headers, timeout=10) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        yield client


async def test_the_sdks_http_client_calls_a_served_agent_on_loopback() -> None:
    served = AgentMCPServer(behaviors.echo(), name="echo")
    async with served.serve_http(port=0) as url, Client(url) as client:
        (tool,) = (await client.list_tools()).tools
        result = await client.call_tool("echo", {"request": "over http"})
    assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
    assert tool.name == "echo"
    assert result.content[0].text == "over http"


@pytest.mark.parametrize(
    "headers",
    [{"Authorization": f"Bearer {TOKEN}"}, {"X-Attach-Token": TOKEN}],
    ids=["bearer", "x-attach-token"],
)
async def test_a_server_with_a_token_answers_a_client_that_presents_it(
    monkeypatch: pytest.MonkeyPatch, headers: dict[str, str]
) -> None:
    monkeypatch.setenv("MCP_SERVE_TOKEN", TOKEN)
    served = AgentMCPServer(behaviors.echo(), name="echo")
    async with (
        served.serve_http(port=0, token_env="MCP_SERVE_TOKEN") as url,
        _client(url, headers) as client,
    ):
        result = await client.call_tool("echo", {"request": "with the token"})
    assert result.content[0].text == "with the token"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-" + TOKEN},
        {"Authorization": f"bearer {TOKEN}"},  # lower case is no token on a daemon either
        {"X-Attach-Token": "wrong", "Authorization": f"Bearer {TOKEN}"},  # the side header decides
    ],
    ids=["none", "wrong", "lower-case-scheme", "wrong-side-header"],
)
async def test_a_request_without_the_token_is_refused_in_one_line_that_never_repeats_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, headers: dict[str, str]
) -> None:
    monkeypatch.setenv("MCP_SERVE_TOKEN", TOKEN)
    served = AgentMCPServer(behaviors.echo(), name="echo")
    async with (
        served.serve_http(port=0, token_env="MCP_SERVE_TOKEN") as url,
        httpx.AsyncClient(timeout=10) as http,
    ):
        answer = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1})
    assert answer.status_code == 401
    assert answer.text == "unauthorized\n"
    assert answer.headers["www-authenticate"] == 'Bearer realm="mcp"'
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1
    assert TOKEN not in caplog.text and "wrong" not in refusals[0].replace("a wrong token", "")


def test_a_token_variable_that_is_unset_is_refused_before_anything_listens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MCP_SERVE_UNSET", raising=False)
    served = AgentMCPServer(behaviors.echo(), name="echo")
    with pytest.raises(TokenUnsetError, match=r"^mcp: token_env names \$MCP_SERVE_UNSET"):
        served.http_app(token_env="MCP_SERVE_UNSET")


async def test_serving_beyond_loopback_without_a_token_is_refused_before_binding() -> None:
    served = AgentMCPServer(behaviors.echo(), name="echo")
    with pytest.raises(ValueError, match="without a token would let anyone"):
        async with served.serve_http(host="0.0.0.0", port=0):
            pass


async def test_a_request_naming_another_host_is_refused_by_the_sdks_rebinding_guard() -> None:
    served = AgentMCPServer(behaviors.echo(), name="echo")
    async with served.serve_http(port=0) as url, httpx.AsyncClient(timeout=10) as http:
        # The Host header a page on a rebound name would send; the socket is loopback.
        answer = await http.post(
            url, headers={"Host": "evil.example:80"}, json={"jsonrpc": "2.0", "id": 1}
        )
    assert answer.status_code in (400, 421)


async def test_an_http_client_of_the_handshake_era_is_told_when_the_fleet_changes() -> None:
    clock = FakeClock()
    fleet = Fleet(clock=clock)
    fleet.add_peer("alpha", behaviors.echo())
    told: list[object] = []

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            told.append(message)

    served = FleetMCPServer(fleet.call_peer(), clock=clock, poll_interval=1)
    try:
        async with (
            served.serve_http(port=0) as url,
            Client(url, mode="legacy", message_handler=on_message) as client,
        ):
            before = [t.name for t in (await client.list_tools()).tools]
            fleet.add_peer("beta", behaviors.echo())
            await clock.until_sleeping()
            clock.advance(1)
            for _ in range(300):  # bounded: three seconds at most
                if told:
                    break
                await asyncio.sleep(0.01)
            after = [t.name for t in (await client.list_tools()).tools]
    finally:
        await fleet.aclose()
    assert (before, after, len(told)) == (["alpha"], ["alpha", "beta"], 1)


async def test_a_body_that_is_not_json_rpc_is_refused_and_the_server_goes_on() -> None:
    served = AgentMCPServer(behaviors.echo(), name="echo")
    async with served.serve_http(port=0) as url, httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(
            url,
            content=b"{this is not json",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        )
        async with Client(url) as client:
            result = await client.call_tool("echo", {"request": "still here"})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == -32700
    assert result.content[0].text == "still here"


def test_the_served_token_variable_is_never_handed_to_an_mcp_server_of_the_same_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coreagent_sdk._scrub import register, scoped
    from coreagent_sdk.mcp._env import server_environment

    monkeypatch.setenv("MCP_SERVE_TOKEN_CRED_TEST", "serve-token-71c9e2d4")
    with scoped():
        AgentMCPServer(behaviors.echo(), name="echo").http_app(
            token_env="MCP_SERVE_TOKEN_CRED_TEST"
        )
        # A host of many agents reads each one's secrets: the scrubber keeps the latest 256,
        # so its knowing the token's value cannot be what keeps the variable from a server.
        for i in range(300):
            register(f"agent-{i}-secret-3b8e0f")
        parent = {"PATH": "/bin", "MCP_SERVE_TOKEN_CRED_TEST": "serve-token-71c9e2d4"}
        env = server_environment({"LEAK": "${env:MCP_SERVE_TOKEN_CRED_TEST}"}, {}, parent)
    assert "MCP_SERVE_TOKEN_CRED_TEST" not in env and env["PATH"] == "/bin"
    assert env["LEAK"] == ""  # not even by reference
    assert "serve-token-71c9e2d4" not in "".join(env.values())
