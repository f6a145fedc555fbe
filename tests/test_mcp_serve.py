"""Agents and fleets served as MCP servers, called by the official MCP SDK's own client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError

from coreagent_sdk import ASGITransport, CallPeer, FakeClock, Peer, StaticDirectory
from coreagent_sdk.host import AgentHost, Turn
from coreagent_sdk.mcp import AgentMCPServer, FleetMCPServer
from simulator import Fleet, behaviors

from .otel_spans import recording  # imported once, at collection: it sets up a logger

# The SDK's two eras: the initialize handshake (2025-11-25 and before), and 2026-07-28's
# per-request envelope, which `Client` picks by default against a server that serves it.
ERAS = ["legacy", "auto"]


async def streams_then_answers(turn: Turn) -> None:
    await turn.chunk("thinking ")
    await turn.chunk("harder")
    await turn.say(f"you asked: {turn.prompt}")


@pytest.mark.parametrize("mode", ERAS)
async def test_one_agent_is_one_tool_that_takes_a_request_and_returns_its_final_answer(
    mode: str,
) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async with (
        AgentMCPServer(streams_then_answers, name="helper") as served,
        Client(served.server, mode=mode) as client,
    ):
        (tool,) = (await client.list_tools()).tools
        result = await client.call_tool(
            "helper", {"request": "what is 2+2?"}, progress_callback=on_progress
        )
    assert tool.name == "helper"
    assert tool.input_schema["required"] == ["request"]
    assert not result.is_error
    assert [c.text for c in result.content if isinstance(c, types.TextContent)] == [
        "you asked: what is 2+2?"
    ]
    assert result.structured_content["peer"] == "helper"
    assert result.structured_content["session_id"].startswith("s-")
    assert result.structured_content["truncated"] is False
    assert progress == [(1, "thinking "), (2, "harder")]


async def test_an_agent_host_is_served_as_configured_and_described_by_its_card_text() -> None:
    host = AgentHost(
        "invoices", behavior=behaviors.echo(), description="Answers questions about invoices."
    )
    async with AgentMCPServer(host) as served, Client(served.server) as client:
        (tool,) = (await client.list_tools()).tools
        result = await client.call_tool("invoices", {"request": "total for March"})
    await host.aclose()
    assert tool.description.startswith("Answers questions about invoices.")
    assert result.content[0].text == "total for March"


@pytest.mark.parametrize(("answer", "cut"), [("x" * 16, False), ("x" * 17, True)])
async def test_an_answer_is_cut_at_the_byte_cap_and_the_result_says_so(
    answer: str, cut: bool
) -> None:
    async def says(turn: Turn) -> None:
        await turn.say(answer)

    async with (
        AgentMCPServer(says, name="says", max_response_bytes=16) as served,
        Client(served.server) as client,
    ):
        result = await client.call_tool("says", {"request": "go"})
    assert result.structured_content["truncated"] is cut
    assert result.structured_content["response"] == "x" * 16
    assert result.structured_content["max_response_bytes"] == 16
    assert result.content[0].text == "x" * 16
    assert ("cut at 16 bytes" in result.content[-1].text) is cut


async def test_a_failed_turn_is_a_tool_error_with_the_agents_own_words() -> None:
    async def fails(turn: Turn) -> None:
        await turn.error("tool", "the ledger is locked")

    async with AgentMCPServer(fails, name="fails") as served, Client(served.server) as client:
        result = await client.call_tool("fails", {"request": "go"})
    assert result.is_error
    assert "the ledger is locked" in result.content[0].text


async def test_a_call_past_its_deadline_is_a_tool_error_that_says_so() -> None:
    never = asyncio.Event()

    async def stalls(turn: Turn) -> None:
        await never.wait()

    async with (
        AgentMCPServer(stalls, name="stalls", timeout=0.2) as served,
        Client(served.server) as client,
    ):
        result = await client.call_tool("stalls", {"request": "go"})
    assert result.is_error
    assert "did not finish within 0.2 s" in result.content[0].text


@pytest.mark.parametrize("mode", ERAS)
async def test_an_unknown_tool_is_invalid_params_naming_the_tools_there_are(mode: str) -> None:
    async with (
        AgentMCPServer(behaviors.echo(), name="echo") as served,
        Client(served.server, mode=mode) as client,
    ):
        await client.list_tools()
        with pytest.raises(MCPError) as raised:
            await client.call_tool("nope", {"request": "hi"})
    assert raised.value.error.code == types.INVALID_PARAMS
    assert '"nope"' in raised.value.error.message
    assert '["echo"]' in raised.value.error.message


@pytest.mark.parametrize(
    ("arguments", "said"),
    [({}, "no request"), ({"request": 7}, "request as int"), ({"request": "a", "x": 1}, '"x"')],
)
async def test_arguments_other_than_one_request_string_are_invalid_params(
    arguments: dict[str, Any], said: str
) -> None:
    async with (
        AgentMCPServer(behaviors.echo(), name="echo") as served,
        Client(served.server, mode="legacy") as client,
    ):
        with pytest.raises(MCPError) as raised:
            await client.call_tool("echo", arguments)
    assert raised.value.error.code == types.INVALID_PARAMS
    assert said in raised.value.error.message


async def test_a_fleet_is_one_tool_per_peer_described_from_its_agent_card(fleet: Fleet) -> None:
    fleet.add_peer("billing", behaviors.echo(), labels={"cluster": "prod-1"})
    fleet.add_peer("triage", behaviors.echo())
    fleet.peer("billing").description = "Answers billing questions."
    fleet.peer("billing").skills = {"refunds": "Issues refunds under 100 EUR."}
    served = FleetMCPServer(fleet.call_peer(), card_transport=fleet.transport)
    async with served, Client(served.server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("billing", {"request": "refund order 7"})
    assert sorted(tools) == ["billing", "triage"]
    assert tools["billing"].description.startswith(
        "Answers billing questions. Skills: refunds: Issues refunds under 100 EUR."
    )
    assert "cluster=prod-1" in tools["billing"].description
    assert "'triage'" in tools["triage"].description  # no card: described plainly
    assert result.structured_content["peer"] == "billing"
    assert result.content[0].text == "refund order 7"


async def test_a_peers_card_text_is_cut_and_scrubbed_of_the_fleets_token(fleet: Fleet) -> None:
    fleet.add_peer("chatty", behaviors.echo())
    secret = "tok-" + "s3cr3t" * 4
    fleet.peer("chatty").description = f"I hold {secret} and " + "blah " * 2000
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MCP_FLEET_TOKEN", secret)
        tool = fleet.call_peer(token_env="MCP_FLEET_TOKEN")
        await tool.acall("chatty", "register the token with the scrubber")
        served = FleetMCPServer(tool, card_transport=fleet.transport)
        async with served, Client(served.server) as client:
            (listed,) = (await client.list_tools()).tools
    assert secret not in listed.description
    assert len(listed.description) < 2500


async def test_peer_names_a_model_cannot_take_are_made_fit_and_a_collision_serves_the_first(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    from coreagent_sdk import Peer, StaticDirectory

    directory = StaticDirectory(
        [
            Peer("b.b", "http://b-b.sim"),
            Peer("b_b", "http://b-b2.sim"),
            Peer("données", "http://x.sim"),
            Peer("...", "http://y.sim"),
            Peer("z" * 80, "http://z.sim"),
        ]
    )
    from coreagent_sdk import CallPeer

    served = FleetMCPServer(CallPeer(directory, transport=fleet.transport))
    async with served, Client(served.server) as client:
        names = [t.name for t in (await client.list_tools()).tools]
    await served.call_peer.aclose()
    assert names == ["b_b", "donn_es", "z" * 64]
    assert {t.peer for t in served.tools} == {"b.b", "données", "z" * 80}
    assert "are both tool 'b_b'" in caplog.text


async def test_a_fleet_serves_at_most_max_tools_peers(fleet: Fleet) -> None:
    for name in ("p1", "p2", "p3"):
        fleet.add_peer(name, behaviors.echo())
    served = FleetMCPServer(fleet.call_peer(), max_tools=2)
    async with served, Client(served.server) as client:
        names = [t.name for t in (await client.list_tools()).tools]
    assert names == ["p1", "p2"]


async def _settled(until: Any, clock: FakeClock) -> None:
    await clock.until_sleeping()
    clock.advance(1)
    for _ in range(200):  # bounded: two seconds at most
        if until():
            return
        await asyncio.sleep(0.01)


async def test_the_tool_list_follows_the_roster_and_a_handshake_era_client_is_told() -> None:
    clock = FakeClock()
    fleet = Fleet(clock=clock)
    fleet.add_peer("alpha", behaviors.echo())
    told: list[object] = []

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            told.append(message)

    served = FleetMCPServer(fleet.call_peer(), clock=clock, poll_interval=1)
    try:
        async with served, Client(served.server, mode="legacy", message_handler=on_message) as c:
            before = [t.name for t in (await c.list_tools()).tools]
            fleet.add_peer("beta", behaviors.echo())
            await _settled(lambda: told, clock)
            after = [t.name for t in (await c.list_tools()).tools]
            fleet.remove_peer("alpha")
            await _settled(lambda: len(told) > 1, clock)
            last = [t.name for t in (await c.list_tools()).tools]
            capabilities = c.server_capabilities
    finally:
        await fleet.aclose()
    assert (before, after, last) == (["alpha"], ["alpha", "beta"], ["beta"])
    assert len(told) == 2
    assert capabilities.tools is not None and capabilities.tools.list_changed


async def test_a_2026_era_client_listening_for_tool_changes_is_told_of_a_new_peer() -> None:
    clock = FakeClock()
    fleet = Fleet(clock=clock)
    fleet.add_peer("alpha", behaviors.echo())
    served = FleetMCPServer(fleet.call_peer(), clock=clock, poll_interval=1)
    try:
        async with served, Client(served.server) as client:
            assert client.protocol_version == "2026-07-28"
            async with client.listen(tools_list_changed=True) as events:
                fleet.add_peer("beta", behaviors.echo())
                await clock.until_sleeping()
                clock.advance(1)
                event = await asyncio.wait_for(events.__anext__(), 5)
            names = [t.name for t in (await client.list_tools()).tools]
    finally:
        await fleet.aclose()
    assert type(event).__name__ == "ToolsListChanged"
    assert names == ["alpha", "beta"]


async def test_an_unchanged_roster_tells_no_one(fleet: Fleet) -> None:
    fleet.add_peer("alpha", behaviors.echo())
    told: list[object] = []

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            told.append(message)

    served = FleetMCPServer(fleet.call_peer(), poll_interval=1)
    async with served, Client(served.server, mode="legacy", message_handler=on_message) as c:
        await c.list_tools()
        assert await served.refresh() is False
        fleet.add_peer("beta", behaviors.echo())
        assert await served.refresh() is True
        await c.list_tools()
    assert len(told) == 1


def _open_streams(daemon: AgentHost) -> int:
    return sum(len(s.subscribers) for s in daemon.sessions.values())


async def _cancelled_mid_turn(call: Any, started: asyncio.Event) -> None:
    task = asyncio.ensure_future(call)
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_cancelled_mid_turn_leaves_the_peer_what_a_cancelled_call_peer_leaves(
    fleet: Fleet, mode: str
) -> None:
    started = asyncio.Event()

    async def stalls(turn: Turn) -> None:
        started.set()
        await turn.sleep(30)

    fleet.add_peer("slow", stalls)
    daemon = fleet.peer("slow")
    baseline_tool = fleet.call_peer()
    await _cancelled_mid_turn(baseline_tool.acall("slow", "work"), started)
    await asyncio.sleep(0.05)
    left_by_call_peer = (len(daemon.sessions), _open_streams(daemon))
    started.clear()
    served = FleetMCPServer(fleet.call_peer())
    async with served, Client(served.server, mode=mode) as client:
        await _cancelled_mid_turn(client.call_tool("slow", {"request": "work"}), started)
        for _ in range(100):  # bounded: the server hears the cancel, its call unwinds
            if _open_streams(daemon) == left_by_call_peer[1]:
                break
            await asyncio.sleep(0.01)
        after_mcp = (len(daemon.sessions) - left_by_call_peer[0] + 1, _open_streams(daemon))
    assert left_by_call_peer[1] == 0
    assert after_mcp == (2, 0)  # the startup session and the call's, as CallPeer leaves it


async def test_a_client_that_disconnects_mid_call_leaves_no_stream_open_on_the_peer(
    fleet: Fleet,
) -> None:
    started = asyncio.Event()

    async def stalls(turn: Turn) -> None:
        started.set()
        await turn.sleep(30)

    fleet.add_peer("slow", stalls)
    daemon = fleet.peer("slow")
    served = FleetMCPServer(fleet.call_peer())
    async with served:
        async with Client(served.server, mode="legacy") as client:
            task = asyncio.ensure_future(client.call_tool("slow", {"request": "work"}))
            await asyncio.wait_for(started.wait(), 5)
        # Leaving the client closed the connection under the call.
        with pytest.raises((asyncio.CancelledError, Exception)):
            await task
        for _ in range(100):
            if not _open_streams(daemon):
                break
            await asyncio.sleep(0.01)
    assert _open_streams(daemon) == 0
    assert len(daemon.sessions) == 2  # the startup session and the call's


async def test_a_roster_that_cannot_be_read_keeps_the_tools_last_read(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    from coreagent_sdk import CallPeer, DirectoryFunc, Peer
    from coreagent_sdk.errors import DirectoryError

    alpha, beta = Peer("alpha", "http://alpha.sim"), Peer("beta", "http://beta.sim")
    down = DirectoryError("hub: down")
    answers: list[object] = [[alpha], down, down, [alpha, beta]]

    def roster() -> list[Peer]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    served = FleetMCPServer(CallPeer(DirectoryFunc(roster), transport=fleet.transport))
    async with served, Client(served.server) as client:
        assert await served.refresh() is False  # the hub is down now
        assert await served.refresh() is False  # and still
        names = [t.name for t in (await client.list_tools()).tools]
        assert await served.refresh() is True  # back, with a new peer
    await served.call_peer.aclose()
    assert names == ["alpha"]
    said = [r.getMessage() for r in caplog.records if r.name == "coreagent_sdk.mcp"]
    assert said == [
        "mcp: reading the fleet's roster failed (hub: down); serving the tools last read until "
        "it can be read again",
        "mcp: the fleet's roster can be read again",
    ]


async def test_a_request_over_the_inject_cap_is_a_tool_error_before_any_session_opens(
    fleet: Fleet,
) -> None:
    fleet.add_peer("alpha", behaviors.echo())
    daemon = fleet.peer("alpha")
    served = FleetMCPServer(fleet.call_peer())
    async with served, Client(served.server) as client:
        result = await client.call_tool("alpha", {"request": "x" * (8 * 1024)})
    assert result.is_error
    assert "8 KiB" in result.content[0].text
    assert len(daemon.sessions) == 1  # only the startup session: nothing was opened


async def test_a_peer_that_echoes_the_fleets_token_never_shows_it_to_the_mcp_client(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "fleet-token-" + "q" * 24
    monkeypatch.setenv("MCP_FLEET_TOKEN", secret)

    async def leaks(turn: Turn) -> None:
        await turn.chunk(f"partial {secret}")
        await turn.say(f"the token is {secret}")

    fleet.add_peer("leaky", leaks)
    progress: list[str | None] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    served = FleetMCPServer(fleet.call_peer(token_env="MCP_FLEET_TOKEN"))
    async with served, Client(served.server) as client:
        result = await client.call_tool("leaky", {"request": "go"}, progress_callback=on_progress)
    shown = result.model_dump_json() + repr(progress)
    assert secret not in shown
    assert "the token is [redacted]" in result.content[0].text
    assert progress == ["partial [redacted]"]


@pytest.mark.parametrize("tracing", [False, True])
async def test_a_clients_trace_context_reaches_the_peer_with_or_without_a_tracer(
    tracing: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx
    from opentelemetry import trace

    class Recording(httpx.AsyncBaseTransport):
        def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
            self.inner = inner
            self.traceparents: list[str] = []

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            self.traceparents.append(request.headers.get("traceparent", ""))
            return await self.inner.handle_async_request(request)

    if not tracing:  # as in a process where no tracer provider was ever set
        monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    spans = recording() if tracing else iter([None])
    exporter = next(spans)
    host = AgentHost("ops", behavior=behaviors.echo())
    wire = Recording(ASGITransport(host.app))
    tool = CallPeer(StaticDirectory([Peer("ops", "http://ops.test")]), transport=wire)
    trace_id = 0x5CE0A11C0FFEE0000000000000000035
    caller = trace.SpanContext(
        trace_id, 0x00F1EE7A9E470035, is_remote=False, trace_flags=trace.TraceFlags(1)
    )
    served = FleetMCPServer(tool)
    try:
        async with served, Client(served.server, mode="legacy") as client:
            # The SDK's client puts the current span's traceparent in the call's _meta.
            with trace.use_span(trace.NonRecordingSpan(caller)):
                result = await client.call_tool("ops", {"request": "status?"})
            first = len(wire.traceparents)
            untraced = await client.call_tool("ops", {"request": "again"})
        finished = exporter.get_finished_spans() if exporter is not None else ()
    finally:
        await host.aclose()
        for _ in spans:  # ends the recording
            pass
    assert result.content[0].text == "status?" and untraced.content[0].text == "again"
    ours = f"00-{trace_id:032x}-"
    sent = [t for t in wire.traceparents[:first] if t]
    assert sent and all(t.startswith(ours) for t in sent)
    assert not any(t.startswith(ours) for t in wire.traceparents[first:])
    if tracing:
        # Tracing on: the SDK's own server span for the call, the caller's span its parent.
        named = [(s.name, s.parent.trace_id if s.parent else None) for s in finished]
        assert ("tools/call ops", trace_id) in named, named
