"""What tracing costs a CallPeer call: off, and on with the in-memory exporter, against today.

Three variants of the same in-process delegation (CallPeer -> simulated peer,
`behaviors.reply`), interleaved round by round so drift hits all alike:

- baseline: the tracing hooks disabled, exactly what a call costs without the
  `otel` extra (the hooks return None before importing anything);
- off: OpenTelemetry installed, no tracer provider configured (non-recording
  spans; no traceparent is sent because there is no valid span context);
- on: an SDK `TracerProvider` with a `SimpleSpanProcessor` into an
  `InMemorySpanExporter` (a client span per call, `traceparent` on inject, the
  simulated daemon's SERVER span per request and its turn as a trace of its own,
  linked to the inject), cleared each round.

    python bench/bench_tracing.py [--calls 200] [--rounds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

import opentelemetry.trace as otel_trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from coreagent_sdk import CallPeer, Peer, StaticDirectory
from coreagent_sdk._telemetry import _tracing
from simulator import Fleet, behaviors

PROMPT = "How is the cluster doing?"
EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))


@contextmanager
def variant(name: str) -> Iterator[None]:
    # A benchmark may flip OpenTelemetry's global provider; an application sets it once.
    available = _tracing.AVAILABLE
    _tracing.AVAILABLE = name != "baseline"
    otel_trace._TRACER_PROVIDER = PROVIDER if name == "on" else None  # type: ignore[attr-defined]
    try:
        yield
    finally:
        _tracing.AVAILABLE = available
        otel_trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
        EXPORTER.clear()


async def timed(tool: CallPeer, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        result = await tool.acall(peer="prod-1", prompt=PROMPT)
        assert result.response == "3 nodes ready"
    return (time.perf_counter() - started) * 1000 / calls


async def main(calls: int, rounds: int) -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.reply("3 nodes ready"))
    tool = CallPeer(
        StaticDirectory([Peer("prod-1", fleet.url("prod-1"))]), transport=fleet.transport
    )
    names = ("baseline", "off", "on")
    with variant("on"):
        await tool.acall(peer="prod-1", prompt=PROMPT)
        spans = sorted(span.name for span in EXPORTER.get_finished_spans())
        print("spans of one traced call:", ", ".join(spans))
        # The client span, the peer's SERVER span per traced request, and its turn's own trace
        # (agent.turn and invoke_agent), as a daemon traces since the agent-host issue.
        assert "agent.turn" in spans, spans
        assert len(spans) >= 4, spans
    for name in names:  # warm-up
        with variant(name):
            await timed(tool, calls)
    ms: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(rounds):
        for name in names:
            with variant(name):
                ms[name].append(await timed(tool, calls))
    base_min, base_median = min(ms["baseline"]), statistics.median(ms["baseline"])
    print(f"{rounds} interleaved rounds of {calls} sequential in-process calls")
    print(f"{'variant':>9}  {'ms/call (min)':>13}  {'ratio (min)':>11}  {'ratio (median)':>14}")
    for name in names:
        lo, med = min(ms[name]), statistics.median(ms[name])
        print(f"{name:>9}  {lo:>13.3f}  {lo / base_min:>11.3f}  {med / base_median:>14.3f}")
    await tool.aclose()
    await fleet.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
