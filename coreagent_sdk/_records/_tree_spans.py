"""A `CallTree` as OpenTelemetry spans: one trace per delegation, nested as it happened.

Daemons trace each hop on its own (a turn is a new trace that *links* to its
injects), so a tracing backend shows a delegation as many small traces. The
fleet's own record knows the whole tree, so this module writes it out as one
trace per root call, after the fact, with the times the record holds:

    invoke_agent {peer}            a call (CLIENT), as `CallPeer`'s live span names it
      chat {model}                 one model round of the called turn (CLIENT)
      execute_tool {tool}          one tool call of that turn (INTERNAL)
        invoke_agent {sub-peer}    the sub-call a `call_peer` tool call made
          ...

Names and attributes follow the generative-AI semantic conventions
(`gen_ai.operation.name`, `gen_ai.agent.name`, `gen_ai.request.model`,
`gen_ai.usage.*`, `gen_ai.tool.name`, `error.type`); as `_tracing`'s spans,
none carries a prompt, an answer or any text a peer wrote, only names,
counts, times and outcomes. The walk is iterative (a tree thousands deep
cannot recurse) and visits each record once (a cycle of parent ids cannot
loop). OpenTelemetry is imported only when spans are made.
"""

from __future__ import annotations

import importlib
import time
from typing import TYPE_CHECKING, Any

from .._telemetry._tracing import PROVIDER_NAME
from .._version import __version__
from ._calltree import claim

if TYPE_CHECKING:
    from ._calltree import CallTree
    from ._record import CallRecord
    from ._steps import TurnStep

__all__ = ["export_spans"]

_SCOPE = "coreagent_sdk.calltree"


def _otel() -> Any:
    try:
        return importlib.import_module("opentelemetry.trace")
    except ImportError as exc:
        raise ImportError(
            "CallTree.export_spans: needs OpenTelemetry; pip install 'coreagent-sdk[otel]'"
        ) from exc


def _call_attributes(record: CallRecord) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": PROVIDER_NAME,
        "gen_ai.agent.name": record.peer,
        "coreagent.call.id": record.call_id,
        "coreagent.call_peer.outcome": record.state,
        "coreagent.call_peer.truncated": record.truncated,
    }
    if record.tool:
        attributes["gen_ai.tool.name"] = record.tool
    if record.session_id:
        attributes["gen_ai.conversation.id"] = record.session_id
    if record.response_bytes is not None:
        attributes["coreagent.call_peer.response_bytes"] = record.response_bytes
    if record.error_type:
        attributes["error.type"] = record.error_type
    if record.steps_dropped:
        attributes["coreagent.steps_dropped"] = record.steps_dropped
    return attributes


def _step_span(step: TurnStep) -> tuple[str, str, dict[str, Any], str | None]:
    """(name, kind, attributes, error type) of a chat or tool step's span."""
    if step.kind == "chat":
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": step.name,
        }
        if step.input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = step.input_tokens
        if step.output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = step.output_tokens
        # A model's error is kept as "Type: message": the type alone goes on the span.
        failed = None if step.error is None else step.error.split(":", 1)[0] or "error"
        return f"chat {step.name}", "CLIENT", attributes, failed
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": step.name,
        # An MCP server's tool is the conventions' "extension" (an agent-side tool).
        "gen_ai.tool.type": "extension" if step.server else "function",
    }
    if step.server:
        attributes["mcp.method.name"] = "tools/call"
    if step.peer:
        attributes["gen_ai.agent.name"] = step.peer
    if step.session_id:
        attributes["gen_ai.conversation.id"] = step.session_id
    failed = None if step.error is None else "tool_error"
    return f"execute_tool {step.name}", "INTERNAL", attributes, failed


class _Writer:
    """Writes calls as spans; each record once, however many times a cycle reaches it."""

    def __init__(self, tree: CallTree, tracer: Any, trace: Any, epoch: float, latest: float):
        self.tracer = tracer
        self.trace = trace
        self.epoch_ns = round(epoch * 1_000_000_000)
        self.latest = latest
        self.children = tree._children()
        self.seen: set[int] = set()
        self.made = 0

    def ns(self, seconds: float) -> int:
        # The epoch in whole ns first: a float of 1.7e9 s holds only ~0.2 µs, enough to swap
        # the ends of a step and the call that ended right after it.
        return self.epoch_ns + round(seconds * 1_000_000_000)

    def write(self, root: CallRecord, parent: Any) -> None:
        """Span `root` and every call under it (an explicit stack: no recursion)."""
        trace = self.trace
        stack: list[tuple[CallRecord, Any]] = [(root, parent)]
        while stack:
            record, context = stack.pop()
            if record.call_id in self.seen:
                continue
            self.seen.add(record.call_id)
            end = record.ended if record.ended is not None else self.latest
            span = self.tracer.start_span(
                f"invoke_agent {record.peer}" if record.peer else "invoke_agent",
                context=context,
                kind=trace.SpanKind.CLIENT,
                attributes=_call_attributes(record),
                start_time=self.ns(record.started),
            )
            self.made += 1
            inside = trace.set_span_in_context(span)
            steps, rest = claim(record, self.children.get(record.call_id, []))
            turn_error = None
            for step, sub_calls in steps:
                if step.kind == "error":
                    turn_error = step.name
                    span.add_event(
                        "turn-error", {"error.type": step.name}, timestamp=self.ns(step.started)
                    )
                    continue
                child = self._step(step, inside)
                stack.extend((k, trace.set_span_in_context(child)) for k in reversed(sub_calls))
            stack.extend((k, inside) for k in reversed(rest))
            if record.state == "failed" or turn_error is not None:
                described = record.error_type or turn_error or "error"
                span.set_status(trace.Status(trace.StatusCode.ERROR, described))
            span.end(end_time=self.ns(end))

    def _step(self, step: TurnStep, context: Any) -> Any:
        trace = self.trace
        name, kind, attributes, failed = _step_span(step)
        if failed is not None:
            attributes["error.type"] = failed
        span = self.tracer.start_span(
            name,
            context=context,
            kind=getattr(trace.SpanKind, kind),
            attributes=attributes,
            start_time=self.ns(step.started),
        )
        self.made += 1
        if failed is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, failed))
        span.end(end_time=self.ns(step.started + step.duration_ms / 1000))
        return span


def export_spans(tree: CallTree, tracer_provider: Any = None) -> int:
    """Write `tree` as spans through `tracer_provider` (the global one when None).

    Returns how many spans were made. Each root call starts a new trace.
    """
    trace = _otel()
    context = importlib.import_module("opentelemetry.context")
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    latest = max(
        [r.ended if r.ended is not None else r.started for r in tree.records]
        + [s.started + s.duration_ms / 1000 for r in tree.records for s in r.steps],
        default=0.0,
    )
    # The records' time 0 on the wall clock: the log's own, else as if the last call ended now.
    epoch = tree.epoch if tree.epoch is not None else time.time() - latest
    writer = _Writer(tree, provider.get_tracer(_SCOPE, __version__), trace, epoch, latest)
    # Roots first; then any record left over (only a cycle of parent ids leaves one), as a root.
    for record in (*tree.roots(), *sorted(tree.records, key=lambda r: (r.started, r.call_id))):
        if record.call_id not in writer.seen:
            writer.write(record, context.Context())  # a new trace: no current span is its parent
    return writer.made
