"""OpenTelemetry: a CallPeer call is a client span; simulated daemons trace as real ones do."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from coreagent_sdk.errors import PeerTimeoutError
from simulator import Fleet, behaviors

from .otel_spans import recording


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recording()


def two_hops(fleet: Fleet) -> None:
    fleet.add_peer("region", behaviors.delegate("zone", via=fleet, timeout=5))
    fleet.add_peer("zone", behaviors.reply("3 pods ready"))


@pytest.mark.parametrize("mode", ["in-process", "loopback"])
async def test_a_two_hop_tree_is_traced_as_daemons_trace_it_and_is_one_tree_in_the_fleets_calls(
    spans: InMemorySpanExporter, mode: str
) -> None:
    fleet = Fleet()
    two_hops(fleet)
    served = await fleet.serve() if mode == "loopback" else None
    tool = served.call_peer(timeout=10) if served else fleet.call_peer(timeout=10)
    tracer = trace.get_tracer("test")
    try:
        with tracer.start_as_current_span("notebook cell") as root:
            result = await tool.acall(peer="region", prompt="pods?")
    finally:
        await tool.aclose()
        await fleet.aclose()

    finished = spans.get_finished_spans()
    calls = [s for s in finished if s.kind == SpanKind.CLIENT]
    turns = [s for s in finished if s.name == "agent.turn"]
    invokes = [s for s in finished if s.kind == SpanKind.INTERNAL and s.name.startswith("invoke")]
    injects = [s for s in finished if s.kind == SpanKind.SERVER and s.name.endswith("/inject")]
    call_region = next(s for s in calls if s.attributes["gen_ai.agent.name"] == "region")
    call_zone = next(s for s in calls if s.attributes["gen_ai.agent.name"] == "zone")
    turn_region = next(s for s in turns if s.attributes["gen_ai.agent.name"] == "region")
    turn_zone = next(s for s in turns if s.attributes["gen_ai.agent.name"] == "zone")
    invoke_region = next(s for s in invokes if s.attributes["gen_ai.agent.name"] == "region")
    inject_region = next(s for s in injects if s.parent is not None)
    (inject_zone,) = [s for s in injects if s is not inject_region]

    # The caller's trace reaches region's inject (a SERVER span, child via traceparent) ...
    assert call_region.parent.span_id == root.get_span_context().span_id
    assert inject_region.parent.span_id == call_region.context.span_id
    assert inject_region.context.trace_id == root.get_span_context().trace_id
    if mode == "loopback":
        # Across sockets only the traceparent header can have carried the context.
        assert inject_region.parent.is_remote
    # ... region's turn is a new trace linking that inject (turnspan.go) ...
    assert turn_region.parent is None
    assert turn_region.context.trace_id != root.get_span_context().trace_id
    assert [link.context for link in turn_region.links] == [inject_region.context]
    assert invoke_region.parent.span_id == turn_region.context.span_id
    assert call_zone.parent.span_id == invoke_region.context.span_id
    # ... and region's call to zone sends no traceparent, as a daemon's does not.
    assert inject_zone.parent is None
    assert inject_zone.context.trace_id != turn_region.context.trace_id
    assert [link.context for link in turn_zone.links] == [inject_zone.context]
    # The fleet's own record of calls keeps the tree whole.
    drawn = [prefix + record.peer for prefix, record in fleet.calls.tree().walk()]
    assert drawn == ["region", "└── zone"]
    assert turn_region.attributes["gen_ai.conversation.id"] == result.session_id
    assert call_region.name == "invoke_agent region"
    assert call_region.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert call_region.attributes["gen_ai.conversation.id"] == result.session_id
    assert call_region.attributes["coreagent.call_peer.outcome"] == "ok"
    assert call_region.attributes["coreagent.call_peer.response_bytes"] == len(b"3 pods ready")
    assert call_region.attributes["coreagent.call_peer.truncated"] is False
    assert call_region.attributes["gen_ai.tool.name"] == "call_peer"


async def test_a_failed_call_records_its_error_class_and_outcome(
    spans: InMemorySpanExporter,
) -> None:
    fleet = Fleet()
    fleet.add_peer("stuck", behaviors.never_finish())
    async with fleet.call_peer(timeout=0.2) as tool:
        with pytest.raises(PeerTimeoutError):
            await tool.acall(peer="stuck", prompt="go")
    await fleet.aclose()
    (call,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert call.status.status_code == StatusCode.ERROR
    assert call.attributes["error.type"] == "PeerTimeoutError"
    assert call.attributes["coreagent.call_peer.outcome"] == "timeout"
    assert call.attributes["gen_ai.conversation.id"].startswith("s-")


async def test_a_truncated_answer_is_marked_on_the_span(spans: InMemorySpanExporter) -> None:
    fleet = Fleet()
    fleet.add_peer("big", behaviors.stream(4000, 1000))
    async with fleet.call_peer(timeout=5, max_response_bytes=100) as tool:
        await tool.acall(peer="big", prompt="go")
    (call,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert call.attributes["coreagent.call_peer.truncated"] is True
    assert call.attributes["coreagent.call_peer.outcome"] == "truncated"
    assert call.attributes["coreagent.call_peer.response_bytes"] == 100


async def test_spans_carry_neither_the_prompt_the_answer_nor_the_token(
    spans: InMemorySpanExporter,
) -> None:
    token = "canary-0b7e-trace-token"
    fleet = Fleet(tokens={token: "alice"})
    fleet.add_peer("prod-1", behaviors.echo(), token=token)
    env = {"T": token}
    async with fleet.call_peer(timeout=5, token_env="T", environ=env) as tool:
        await tool.acall(peer="prod-1", prompt="secret prompt text")
    dumped = "".join(s.to_json() for s in spans.get_finished_spans())
    assert "invoke_agent prod-1" in dumped
    assert token not in dumped and "secret prompt text" not in dumped


@pytest.mark.parametrize("install", ["without the extra", "without a tracer provider"])
def test_with_nothing_to_record_no_header_is_sent_and_without_the_extra_nothing_imported(
    install: str,
) -> None:
    # A fresh interpreter: opentelemetry hidden (a plain install), or present but unconfigured.
    hidden = install == "without the extra"
    code = f"""
import sys, asyncio, importlib.util
real = importlib.util.find_spec
def hide(name, *a):
    return None if name.startswith("opentelemetry") else real(name, *a)
if {hidden}:
    importlib.util.find_spec = hide
from simulator import Fleet, behaviors
from coreagent_sdk._telemetry import _tracing
assert _tracing.AVAILABLE is (not {hidden})
seen = []
made = []  # every span started, by any tracer: with nothing to record there is none
if not {hidden}:
    from opentelemetry import trace
    for cls in (trace.ProxyTracer, trace.NoOpTracer):
        for name in ("start_span", "start_as_current_span"):
            def counting(self, *a, _real=getattr(cls, name), _name=name, **k):
                made.append((type(self).__name__, _name, a[:1]))
                return _real(self, *a, **k)
            setattr(cls, name, counting)
async def main():
    fleet = Fleet()
    async def look(turn):
        return "ok"
    fleet.add_peer("p", behaviors.custom(look))
    daemon = fleet.peer("p")
    original = daemon.app
    async def spy(scope, receive, send):
        if scope["path"].endswith("/inject"):
            seen.append({{k.decode(): v for k, v in scope["headers"]}})
        await original(scope, receive, send)
    from coreagent_sdk import ASGITransport
    fleet.transport.mount("p.sim", ASGITransport(spy))
    async with fleet.call_peer(timeout=5) as tool:
        assert (await tool.acall(peer="p", prompt="hi")).response == "ok"
    await fleet.aclose()
asyncio.run(main())
assert seen and "traceparent" not in seen[0], seen
assert made == [], made
imported = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
assert not ({hidden} and imported), imported
print("clean")
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "clean"


async def test_no_span_attribute_carries_a_token_a_peer_chose_as_its_session_id(
    spans: InMemorySpanExporter,
) -> None:
    """Issue 16 item 1: the id is refused before `gen_ai.conversation.id` could hold it."""
    from coreagent_sdk import CallPeer
    from coreagent_sdk.errors import PeerRequestError

    from .canary import CANARY, leaked
    from .hostile.servers import SESSION, daemon, one_peer

    directory, transport = one_peer(daemon(session=dict(SESSION, sessionID=CANARY)))
    tool = CallPeer(directory, transport=transport, token_env="T", environ={"T": CANARY}, timeout=5)
    async with tool:
        with pytest.raises(PeerRequestError, match="credential"):
            await tool.acall(peer="evil", prompt="go")
    (span,) = spans.get_finished_spans()
    assert span.name == "invoke_agent evil" and span.attributes is not None
    assert "gen_ai.conversation.id" not in span.attributes
    assert span.attributes["error.type"] == "PeerRequestError"
    assert not leaked(span.to_json())
