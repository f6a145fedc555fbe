"""The agent host traces as core-agent's Go daemon does (the OTel SDK's in-memory exporter).

Each fidelity test names the Go function it pins: `pkg/attach/server.go`
`Bind` (otelhttp around the attach handler) and `shouldTraceRequest`,
`pkg/agent/turnspan.go` `startTurnSpan` and `inboxTraceLinks`. Then the
host's own addition: a production host's `call_peer` sends `traceparent`, a
simulated daemon's (as a real one's) does not, and `propagate_trace=False`
turns it off.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from coreagent_sdk import ASGITransport, Peer, RoutingTransport, StaticDirectory
from coreagent_sdk.host import AgentHost, Turn
from simulator import Fleet, behaviors

from .otel_spans import recording

TRACE_ID = "0b177bbe8a4aafe7abcbec1d77fe84ca"  # the daemon's inject_trace_test.go id
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recording()


def traceparent(span_id: str) -> dict[str, str]:
    return {**JSON, "traceparent": f"00-{TRACE_ID}-{span_id}-01"}


def client(host: AgentHost) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=ASGITransport(host.app), base_url="http://agent.test:8080")


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


async def settle(spans: InMemorySpanExporter, name: str, count: int) -> list[ReadableSpan]:
    """The `count` finished spans called `name`, waiting for turns to end (bounded: 5 s)."""
    for _ in range(500):
        found = named(spans, name)
        if len(found) >= count:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"{count} {name!r} spans never finished: {named(spans, name)}")


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with client(AgentHost("agent", session_rate_limit=None)) as http:
        yield http


# --- server.go: Bind -------------------------------------------------------


async def test_bind_a_request_is_a_server_span_named_method_and_path_child_of_its_traceparent(
    spans: InMemorySpanExporter, http: httpx.AsyncClient
) -> None:
    sent = await http.post(
        "/sessions/core-agent/default/inject",
        json={"message": "pod CrashLoopBackOff"},
        headers={**traceparent("aaaaaaaaaaaaaaa1"), "User-Agent": "watcher/1"},
    )
    assert sent.status_code == 200
    (span,) = named(spans, "POST /sessions/core-agent/default/inject")
    assert span.kind == SpanKind.SERVER
    assert span.parent is not None and span.parent.is_remote
    assert f"{span.parent.trace_id:032x}" == TRACE_ID
    assert f"{span.parent.span_id:016x}" == "aaaaaaaaaaaaaaa1"
    assert span.context.trace_id == span.parent.trace_id
    attrs = dict(span.attributes or {})
    assert attrs.pop("network.peer.address") == attrs.pop("client.address")
    assert isinstance(attrs.pop("network.peer.port"), int)
    assert attrs == {
        "server.address": "agent.test",
        "http.request.method": "POST",
        "url.scheme": "http",
        "server.port": 8080,
        "user_agent.original": "watcher/1",
        "url.path": "/sessions/core-agent/default/inject",
        "network.protocol.version": "1.1",
        "http.request.body.size": len(sent.request.content),
        "http.response.body.size": len(sent.content),
        "http.response.status_code": 200,
    }
    assert span.status.status_code == StatusCode.UNSET


async def test_bind_a_request_without_traceparent_is_a_root_server_span(
    spans: InMemorySpanExporter, http: httpx.AsyncClient
) -> None:
    await http.post("/sessions", headers=JSON)
    (span,) = named(spans, "POST /sessions")
    assert span.kind == SpanKind.SERVER and span.parent is None


async def test_bind_a_5xx_is_an_error_span_and_a_4xx_is_not(
    spans: InMemorySpanExporter,
) -> None:
    host = AgentHost("agent", session_rate_limit=None)
    async with client(host) as http:
        missing = await http.post("/sessions/core-agent/nope/inject", json={"message": "x"})
        host.draining = True  # a stopping host answers 503 (rejectDraining)
        refused = await http.post("/sessions/core-agent/default/inject", json={"message": "x"})
    assert (missing.status_code, refused.status_code) == (404, 503)
    (not_found,) = named(spans, "POST /sessions/core-agent/nope/inject")
    (unavailable,) = named(spans, "POST /sessions/core-agent/default/inject")
    assert not_found.status.status_code == StatusCode.UNSET
    assert not_found.attributes is not None
    assert not_found.attributes["http.response.status_code"] == 404
    assert unavailable.status.status_code == StatusCode.ERROR
    assert unavailable.attributes is not None
    assert unavailable.attributes["http.response.status_code"] == 503


async def test_bind_traces_the_refusals_of_auth_and_the_public_agent_card(
    spans: InMemorySpanExporter,
) -> None:
    # otelhttp wraps cardBypass(card, Auth.Middleware(...)): both are inside the span.
    host = AgentHost("agent", tokens={"tok": "alice"}, description="answers", skills={"a": "b"})
    async with client(host) as http:
        assert (await http.post("/sessions", headers=JSON)).status_code == 401
        assert (await http.get("/.well-known/agent-card.json")).status_code == 200
    (denied,) = named(spans, "POST /sessions")
    (card,) = named(spans, "GET /.well-known/agent-card.json")
    assert denied.attributes is not None and card.attributes is not None
    assert denied.attributes["http.response.status_code"] == 401
    assert card.attributes["http.response.status_code"] == 200


@pytest.mark.parametrize(
    ("method", "path", "traced"),
    [
        ("GET", "/sessions", False),
        ("HEAD", "/sessions", False),
        ("GET", "/peers", False),
        ("GET", "/sessions/core-agent/default/status", False),
        ("GET", "/sessions/default/usage", False),
        ("GET", "/sessions/core-agent/default/perms", False),
        ("POST", "/sessions", True),
        ("POST", "/peers", True),
        ("DELETE", "/sessions/core-agent/s1", True),
        ("GET", "/sessions/core-agent/default/events", True),
        ("GET", "/whoami", True),
        ("GET", "/sessions/", True),
        ("GET", "/sessions/a/b/c/status", True),
        ("POST", "/sessions/core-agent/default/status", True),
    ],
)
async def test_should_trace_request_skips_only_the_polled_reads(
    spans: InMemorySpanExporter, method: str, path: str, traced: bool
) -> None:
    async with client(AgentHost("agent", session_rate_limit=None)) as http:
        await http.request(method, path, headers=JSON, timeout=5, extensions={}) if (
            not path.endswith("/events")
        ) else await _open_and_close(http, path)
    assert bool(named(spans, f"{method} {path}")) is traced


async def _open_and_close(http: httpx.AsyncClient, path: str) -> None:
    async with http.stream("GET", path) as response:
        assert response.status_code == 200


async def test_bind_an_event_stream_span_lasts_as_long_as_the_stream(
    spans: InMemorySpanExporter, http: httpx.AsyncClient
) -> None:
    async with http.stream("GET", "/sessions/core-agent/default/events") as response:
        async for _ in response.aiter_bytes():
            break
        assert named(spans, "GET /sessions/core-agent/default/events") == []  # still open
    (stream,) = await settle(spans, "GET /sessions/core-agent/default/events", 1)
    assert stream.attributes is not None
    assert stream.attributes["http.response.body.size"] > 0


# --- turnspan.go: startTurnSpan, inboxTraceLinks ------------------------------


async def test_start_turn_span_a_turn_is_a_new_trace_linking_its_inject(
    spans: InMemorySpanExporter, http: httpx.AsyncClient
) -> None:
    await http.post(
        "/sessions/core-agent/default/inject",
        json={"message": "pods?"},
        headers=traceparent("aaaaaaaaaaaaaaa1"),
    )
    (turn,) = await settle(spans, "agent.turn", 1)
    (inject,) = named(spans, "POST /sessions/core-agent/default/inject")
    (invoke,) = named(spans, "invoke_agent agent")
    assert turn.parent is None and turn.kind == SpanKind.INTERNAL
    assert turn.context.trace_id != inject.context.trace_id
    assert [link.context for link in turn.links] == [inject.context]
    assert dict(turn.attributes or {}) == {
        "gen_ai.conversation.id": "default",
        "gen_ai.agent.name": "agent",
        "core_agent.inbox.linked_injects": 1,
    }
    # ADK's invoke_agent span sits under the turn span, in the turn's trace.
    assert invoke.parent is not None and invoke.parent.span_id == turn.context.span_id
    assert turn.status.status_code == StatusCode.UNSET


async def test_inbox_trace_links_several_injects_drained_into_one_turn_are_several_links(
    spans: InMemorySpanExporter, http: httpx.AsyncClient
) -> None:
    url = "/sessions/core-agent/default/inject"
    for i, wake in enumerate((False, False, True)):
        sent = await http.post(
            url, json={"message": f"m{i}", "wake": wake}, headers=traceparent(f"{i + 1:016x}")
        )
        assert sent.status_code == 200
    (turn,) = await settle(spans, "agent.turn", 1)
    injects = named(spans, f"POST {url}")
    assert [link.context for link in turn.links] == [s.context for s in injects]
    assert turn.attributes is not None
    assert turn.attributes["core_agent.inbox.linked_injects"] == 3


@pytest.mark.parametrize("queued", [32, 33, 40])
async def test_inbox_trace_links_keep_the_newest_32_and_count_them_all(
    spans: InMemorySpanExporter, http: httpx.AsyncClient, queued: int
) -> None:
    url = "/sessions/core-agent/default/inject"
    for i in range(queued):
        wake = i == queued - 1
        await http.post(url, json={"message": f"m{i}", "wake": wake}, headers=JSON)
    (turn,) = await settle(spans, "agent.turn", 1)
    injects = named(spans, f"POST {url}")
    assert len(injects) == queued
    assert [link.context for link in turn.links] == [s.context for s in injects[-32:]]
    assert turn.attributes is not None
    assert turn.attributes["core_agent.inbox.linked_injects"] == queued


async def test_start_turn_span_a_failed_turn_is_an_error_span_with_its_error(
    spans: InMemorySpanExporter,
) -> None:
    async def refuse(turn: Turn) -> None:
        await turn.error("model", "quota exhausted")

    async def crash(turn: Turn) -> None:
        raise RuntimeError("bug")

    for behavior in (refuse, crash):
        async with client(AgentHost("agent", behavior=behavior)) as http:
            await http.post("/sessions/core-agent/default/inject", json={"message": "x"})
    failed, crashed = await settle(spans, "agent.turn", 2)
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.status.description == "quota exhausted"
    assert [e.name for e in failed.events] == ["exception"]
    assert crashed.status.status_code == StatusCode.ERROR
    assert crashed.status.description == "behaviour raised RuntimeError('bug')"
    assert crashed.events[0].attributes is not None
    assert crashed.events[0].attributes["exception.type"] == "RuntimeError"


# --- call_peer: the host sends traceparent, a daemon (and a simulated one) does not -----


def spy(app: Any, seen: list[dict[str, str]]) -> Any:
    """`app`, noting the headers of every inject it is sent."""

    async def spied(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/inject"):
            seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)

    return spied


async def _ask(host: AgentHost) -> None:
    async with client(host) as http:
        await http.post("/sessions/core-agent/default/inject", json={"message": "go"})


@pytest.mark.parametrize("propagate", [True, False])
async def test_a_hosts_call_peer_sends_traceparent_of_its_turn_unless_switched_off(
    spans: InMemorySpanExporter, propagate: bool
) -> None:
    seen: list[dict[str, str]] = []
    helper = AgentHost("helper")
    routes = RoutingTransport({"helper.test": ASGITransport(spy(helper.app, seen))})

    async def asks(turn: Turn) -> None:
        result = await turn.call_peer("helper", "hello")
        await turn.say(str(result.get("response")))

    directory = StaticDirectory([Peer("helper", "http://helper.test")])
    kwargs: dict[str, Any] = {} if propagate else {"propagate_trace": False}
    host = AgentHost("asker", behavior=asks, directory=directory, peer_transport=routes, **kwargs)
    assert host.propagate_trace is propagate
    await _ask(host)
    turns = await settle(spans, "agent.turn", 2)
    (asker_turn,) = [
        s for s in turns if s.attributes and s.attributes["gen_ai.agent.name"] == "asker"
    ]
    (inject,) = seen
    (helper_inject,) = [
        s
        for s in spans.get_finished_spans()
        if s.name.startswith("POST /sessions/core-agent/s-") and s.name.endswith("/inject")
    ]
    if propagate:
        assert inject["traceparent"].split("-")[1] == f"{asker_turn.context.trace_id:032x}"
        assert helper_inject.parent is not None
        assert helper_inject.context.trace_id == asker_turn.context.trace_id
    else:
        assert "traceparent" not in inject and "tracestate" not in inject
        assert helper_inject.parent is None
        assert helper_inject.context.trace_id != asker_turn.context.trace_id


async def test_a_simulated_daemons_sub_call_sends_no_traceparent(
    spans: InMemorySpanExporter,
) -> None:
    from opentelemetry import trace

    fleet = Fleet()
    fleet.add_peer("region", behaviors.delegate("zone", via=fleet, timeout=5))
    zone = fleet.add_peer("zone", behaviors.reply("3 pods ready"))
    assert zone.propagate_trace is False
    seen_zone: list[dict[str, str]] = []
    seen_region: list[dict[str, str]] = []
    fleet.transport.mount(f"zone.{fleet.domain}", ASGITransport(spy(zone.app, seen_zone)))
    region = fleet.peer("region")
    fleet.transport.mount(f"region.{fleet.domain}", ASGITransport(spy(region.app, seen_region)))
    try:
        with trace.get_tracer("test").start_as_current_span("notebook cell"):
            async with fleet.call_peer(timeout=10) as tool:
                result = await tool.acall(peer="region", prompt="pods?")
    finally:
        await fleet.aclose()
    assert "3 pods ready" in result.response
    # The notebook's own CallPeer sends traceparent; the daemon's sub-call sends none.
    assert "traceparent" in seen_region[0]
    assert "traceparent" not in seen_zone[0]
    # The tree is still one tree in the fleet's own record of calls.
    drawn = [prefix + record.peer for prefix, record in fleet.calls.tree().walk()]
    assert drawn == ["region", "└── zone"]
