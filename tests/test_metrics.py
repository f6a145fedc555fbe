"""CallPeer's OpenTelemetry metrics: the GenAI client conventions, only with a provider."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from coreagent_sdk._telemetry import _metrics
from coreagent_sdk.errors import CallPeerError
from simulator import Fleet, behaviors

PROMPT = "summarise incident 4711 for the on-call"


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Data points by metric name."""
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


async def called(tool: Any, peer: str) -> None:
    with contextlib.suppress(CallPeerError):
        await tool.acall(peer=peer, prompt=PROMPT)


async def test_calls_record_duration_and_counts_by_outcome_per_peer() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    fleet.add_peer("flaky", behaviors.fail("rate_limited", "quota", retryable=True))
    tool = fleet.call_peer(timeout=5, meter_provider=provider)
    for peer in ("echo", "echo", "flaky", "made-up-by-the-model"):
        await called(tool, peer)
    await fleet.aclose()
    found = points(reader)

    durations = found["gen_ai.client.operation.duration"]
    by_peer = {p.attributes.get("gen_ai.agent.name"): p for p in durations}
    assert set(by_peer) == {"echo", "flaky", None}  # an unresolved name is no series
    assert by_peer["echo"].count == 2 and "error.type" not in by_peer["echo"].attributes
    assert by_peer["flaky"].attributes["error.type"] == "PeerTurnError"
    assert by_peer[None].attributes["error.type"] == "UnknownPeerError"
    assert all(p.attributes["gen_ai.operation.name"] == "invoke_agent" for p in durations)
    assert 0 < by_peer["echo"].sum < 5  # seconds, not milliseconds

    counts = {
        (
            p.attributes.get("gen_ai.agent.name"),
            p.attributes["coreagent.call_peer.outcome"],
        ): p.value
        for p in found["coreagent.call_peer.calls"]
    }
    assert counts == {("echo", "ok"): 2, ("flaky", "turn_error"): 1, (None, "unknown_peer"): 1}

    # Neither the prompt, the answer (the echo of it) nor a session id is in any attribute.
    shown = json.dumps([dict(p.attributes) for ps in found.values() for p in ps])
    assert "incident" not in shown and "s-0" not in shown


async def test_a_truncated_answer_counts_as_truncated() -> None:
    reader = InMemoryMetricReader()
    fleet = Fleet()
    fleet.add_peer("writer", behaviors.stream(4_000, 1_000))
    tool = fleet.call_peer(
        timeout=5, max_response_bytes=100, meter_provider=MeterProvider(metric_readers=[reader])
    )
    await tool.acall(peer="writer", prompt="write")
    await fleet.aclose()
    [point] = points(reader)["coreagent.call_peer.calls"]
    assert point.attributes["coreagent.call_peer.outcome"] == "truncated"


def test_without_a_provider_no_instrument_is_made() -> None:
    from opentelemetry import metrics

    if type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider":
        pytest.skip("a global meter provider was set by another test in this process")
    assert _metrics.call_metrics() is None


async def test_a_broken_exporter_does_not_change_the_calls_outcome() -> None:
    class Broken:
        def get_meter(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("exporter down")

    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    tool = fleet.call_peer(timeout=5, meter_provider=Broken())
    assert (await tool.acall(peer="echo", prompt="hi")).response == "hi"
    await fleet.aclose()
