"""OpenTelemetry for delegations, when the `otel` extra is installed; nothing otherwise.

The invariant: tracing never changes what a call does, and costs nothing
without OpenTelemetry. How each rule holds it:

- Whether `opentelemetry` is installed is decided once, without importing it
  (`importlib.util.find_spec`); without it every hook here returns None at
  the cost of one global read, and the package is never imported.
- With it, spans come from the global tracer provider (as OpenTelemetry's
  own instrumentations do): configure one (`trace.set_tracer_provider`) to
  record. Without one, and without a current span to continue, a call makes
  no span and sends no header.
- A `CallPeer` call is an `invoke_agent {peer}` span of kind CLIENT (the
  generative-AI agent conventions' "invoke agent client span"), current
  while the call runs, so `AttachClient.inject` sends its context as W3C
  `traceparent` / `tracestate` headers. Its attributes follow those
  conventions where they fit (`gen_ai.operation.name`, `gen_ai.agent.name`,
  `gen_ai.conversation.id` = the peer's session, `gen_ai.tool.name`,
  `error.type`) and say the rest under `coreagent.call_peer.*`.
- The agent host's server and turn spans are the daemon's (`host/_spans.py`):
  a turn is a new trace that links to its injects. Inside a turn of a host
  made with `propagate_trace=False` (the simulator's daemons, as real ones)
  `no_propagation` is in force and `trace_headers` sends nothing.
- No span carries the prompt, the answer or any credential.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

from .._version import __version__

__all__ = [
    "AVAILABLE",
    "PROVIDER_NAME",
    "call_span",
    "no_propagation",
    "outcome",
    "trace_headers",
]

AVAILABLE = importlib.util.find_spec("opentelemetry") is not None
PROVIDER_NAME = "core-agent"  # gen_ai.provider.name: the system answering an invoke_agent
_SCOPE = "coreagent_sdk"
_HEADERS = ("traceparent", "tracestate")

T = TypeVar("T")
# False inside a turn of a host that does not propagate: its calls send no traceparent.
_PROPAGATE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "coreagent_propagate_trace", default=True
)

_otel: Any = None  # the opentelemetry modules, imported on first use


def _modules() -> Any:
    global _otel
    if _otel is None:
        from opentelemetry import context, propagate, trace

        class _Otel:
            pass

        found = _Otel()
        found.context = context  # type: ignore[attr-defined]
        found.propagate = propagate  # type: ignore[attr-defined]
        found.trace = trace  # type: ignore[attr-defined]
        _otel = found
    return _otel


def _tracer() -> Any:
    return _modules().trace.get_tracer(_SCOPE, __version__)


class CallSpan:
    """One `CallPeer` call's client span; `run` makes it current while the call runs."""

    def __init__(self, tool: str, peer: str) -> None:
        otel = _modules()
        self._trace = otel.trace
        self.span = _tracer().start_span(
            f"invoke_agent {peer}" if peer else "invoke_agent",
            kind=otel.trace.SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": PROVIDER_NAME,
                "gen_ai.agent.name": peer,
                "gen_ai.tool.name": tool,
            },
        )

    async def run(self, call: Any, work: Awaitable[T]) -> T:
        """Await `work` with this span current; record how it ended on the span and end it."""
        span = self.span
        trace = self._trace
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False):
                result = await work
        except BaseException as exc:
            if call.session_id:
                span.set_attribute("gen_ai.conversation.id", call.session_id)
            span.set_attribute("error.type", type(exc).__name__)
            span.set_attribute("coreagent.call_peer.outcome", outcome(exc))
            span.set_attribute("coreagent.call_peer.duration_ms", call.elapsed_ms())
            # The class and the outcome say what happened; the message may quote a peer.
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
            span.end()
            raise
        response = getattr(result, "response", "")
        truncated = bool(getattr(result, "truncated", False))
        span.set_attributes(
            {
                "gen_ai.conversation.id": getattr(result, "session_id", ""),
                "coreagent.call_peer.outcome": "truncated" if truncated else "ok",
                "coreagent.call_peer.truncated": truncated,
                "coreagent.call_peer.response_bytes": len(response.encode()),
                "coreagent.call_peer.duration_ms": int(getattr(result, "duration_ms", 0)),
            }
        )
        span.end()
        return result


def outcome(exc: BaseException) -> str:
    """What a failed call's outcome attribute says: a short word for the error's class."""
    name = type(exc).__name__
    return {
        "PeerTimeoutError": "timeout",
        "PeerTurnError": "turn_error",
        "StreamEndedError": "stream_ended",
        "UnknownPeerError": "unknown_peer",
        "PermissionDeniedError": "denied",
        "CancelledError": "cancelled",
    }.get(name, "error")


def _idle(trace: Any) -> bool:
    """No provider is configured and no span is current: a span could record nothing."""
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider) and not (
        trace.get_current_span().get_span_context().is_valid
    )


def call_span(tool: str, peer: str) -> CallSpan | None:
    """A client span for one call; None without OpenTelemetry, or with nothing to record."""
    if not AVAILABLE or _idle(_modules().trace):
        return None
    return CallSpan(tool, peer)


def trace_headers() -> dict[str, str] | None:
    """`traceparent` (and `tracestate`) of the current span, or None when there is none."""
    if not AVAILABLE or not _PROPAGATE.get():
        return None
    trace = _modules().trace
    if not trace.get_current_span().get_span_context().is_valid:
        return None  # nothing to continue: send no header
    carrier: dict[str, str] = {}
    _modules().propagate.inject(carrier)
    picked = {k: v for k, v in carrier.items() if k in _HEADERS}
    return picked or None


@contextlib.contextmanager
def no_propagation() -> Iterator[None]:
    """Within it (and the tasks it starts), calls send no `traceparent`: as a daemon's don't."""
    token = _PROPAGATE.set(False)
    try:
        yield
    finally:
        _PROPAGATE.reset(token)
