"""One in-memory span exporter for the whole test process (the OpenTelemetry SDK's).

OpenTelemetry's global tracer provider can be set once per process, so every
test module that reads spans shares this one and switches recording per test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler, SamplingResult

__all__ = ["recording"]


class Switch(SpanProcessor):
    """Forwards finished spans only while a test that reads them runs."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner
        self.on = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            self.inner.on_end(span)


class SwitchedSampler(Sampler):
    """Samples every span while a test reads them, none otherwise: the provider stays set for
    the whole process, and the tests after these should not pay for recording spans."""

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return (ALWAYS_ON if _SWITCH.on else ALWAYS_OFF).should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return "SwitchedSampler"


_EXPORTER = InMemorySpanExporter()
_SWITCH = Switch(SimpleSpanProcessor(_EXPORTER))


def recording() -> Iterator[InMemorySpanExporter]:
    """Body of a fixture: the exporter, recording for the test's duration, cleared around it."""
    if not getattr(trace.get_tracer_provider(), "_coreagent_test", False):
        provider = TracerProvider(sampler=SwitchedSampler())
        provider.add_span_processor(_SWITCH)
        provider._coreagent_test = True  # type: ignore[attr-defined]
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    _SWITCH.on = True
    try:
        yield _EXPORTER
    finally:
        _SWITCH.on = False
        _EXPORTER.clear()
