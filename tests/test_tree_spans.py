"""`CallTree.export_spans`: the fleet's record as OpenTelemetry spans, one trace per delegation."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from coreagent_sdk import CallLog, CallPeerEvent, CallRecord, CallTree, TurnStep
from simulator import behaviors

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from .test_turn_steps import router_fleet


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    # A provider of the test's own: the global one is never set, so nothing outlives the test.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _shape(spans: Any) -> list[tuple[int, str]]:
    """(depth, name) of each span, depth first, children by start time."""
    by_parent: dict[int | None, list[Any]] = {}
    ids = {s.context.span_id for s in spans}
    for s in sorted(spans, key=lambda s: s.start_time):
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        by_parent.setdefault(parent, []).append(s)
    out: list[tuple[int, str]] = []
    stack = [(s, 0) for s in reversed(by_parent.get(None, []))]
    while stack:
        span, depth = stack.pop()
        out.append((depth, span.name))
        stack.extend((k, depth + 1) for k in reversed(by_parent.get(span.context.span_id, [])))
    return out


async def test_a_delegation_is_one_trace_nested_down_to_the_model_rounds_and_tools() -> None:
    fleet = router_fleet()
    fleet.add_peer("plain", behaviors.reply("ok"))
    tool = fleet.call_peer(timeout=10)
    await tool.acall(peer="router", prompt="Is the disk full?")
    await tool.acall(peer="plain", prompt="hi")
    provider, exporter = _provider()

    made = fleet.calls.tree().export_spans(provider)

    spans = exporter.get_finished_spans()
    assert made == len(spans) == 9
    assert len({s.context.trace_id for s in spans}) == 2  # one trace per delegation
    assert _shape(spans) == [
        (0, "invoke_agent router"),
        (1, "chat scripted"),
        (1, "execute_tool call_peer"),
        (2, "invoke_agent storage"),
        (3, "chat scripted"),
        (3, "execute_tool lookup"),
        (3, "chat scripted"),
        (1, "chat scripted"),
        (0, "invoke_agent plain"),
    ]
    by_name = {s.name: s for s in spans}
    chat = next(s for s in spans if s.name == "chat scripted")
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "scripted"
    assert chat.attributes["gen_ai.usage.input_tokens"] > 0
    peer_tool = by_name["execute_tool call_peer"]
    assert peer_tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert peer_tool.attributes["gen_ai.agent.name"] == "storage"
    storage = by_name["invoke_agent storage"]
    assert storage.attributes["gen_ai.agent.name"] == "storage"
    assert (
        storage.attributes["gen_ai.conversation.id"]
        == peer_tool.attributes["gen_ai.conversation.id"]
    )
    # Times as the record holds them: each span inside its parent, the sub-call inside its tool.
    index = {s.context.span_id: s for s in spans}
    for span in spans:
        if span.parent is not None:
            parent = index[span.parent.span_id]
            assert parent.start_time <= span.start_time, span.name
            assert span.end_time <= parent.end_time, span.name
    # Names, tokens and outcomes only: no prompt, no answer.
    shown = repr([dict(s.attributes) for s in spans])
    assert "Is the disk full?" not in shown and "81%" not in shown
    await fleet.aclose()


def test_failures_are_error_spans_and_a_turn_error_an_event() -> None:
    log = CallLog()
    log.on_event(CallPeerEvent("started", "call_peer", "p", call_id=1))
    log.on_step(1, TurnStep("chat", "m", error="ModelError: quota used up"))
    log.on_step(1, TurnStep("tool", "lookup", error="lookup: raised KeyError"))
    log.on_step(1, TurnStep("error", "watchdog", error="too many rounds"))
    log.on_event(CallPeerEvent("failed", "call_peer", "p", call_id=1, error_type="PeerTurnError"))
    provider, exporter = _provider()
    log.tree().export_spans(provider)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["chat m"].attributes["error.type"] == "ModelError"
    assert spans["execute_tool lookup"].attributes["error.type"] == "tool_error"
    call = spans["invoke_agent p"]
    assert call.status.status_code.name == "ERROR" and call.status.description == "PeerTurnError"
    assert [(e.name, e.attributes["error.type"]) for e in call.events] == [
        ("turn-error", "watchdog")
    ]
    assert "too many rounds" not in repr(call.events[0].attributes)


def test_a_deep_chain_and_a_cycle_are_spanned_once_each_without_recursion() -> None:
    deep = tuple(
        CallRecord(
            i,
            "t",
            f"p{i}",
            "finished",
            started=float(i),
            ended=float(i) + 1,
            parent=i - 1 if i else None,
        )
        for i in range(3_000)
    )
    cycle = (
        CallRecord(10_001, "t", "a", "finished", 0.0, 1.0, parent=10_002),
        CallRecord(10_002, "t", "b", "finished", 0.5, 1.0, parent=10_001),
    )
    provider, exporter = _provider()
    assert CallTree(deep + cycle).export_spans(provider) == 3_002
    assert len({s.context.span_id for s in exporter.get_finished_spans()}) == 3_002


def test_without_opentelemetry_export_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(ImportError, match=r"pip install 'coreagent-sdk\[otel\]'"):
        CallLog().tree().export_spans()
