"""The host's OpenTelemetry spans, made as a core-agent daemon makes them (`otel` extra).

Two rules of the daemon, both pinned by tests naming the Go function:

- `pkg/attach/server.go` `Bind` wraps the whole attach handler (agent card and
  auth included) in otelhttp: every request but the polled reads
  (`shouldTraceRequest`) is a SERVER span named ``{method} {path}``
  (`WithSpanNameFormatter`), child of the request's `traceparent` (the global
  propagator), with otelhttp's request attributes, then the response's
  status code and body sizes; a 5xx is an ERROR status, a 4xx is not.
- `pkg/agent/turnspan.go` `startTurnSpan`: a turn is an ``agent.turn`` span
  (INTERNAL) in a NEW trace. The inject handler returns long before the turn
  runs, and several injects drain into one turn, so the turn is not any
  inject's child: it LINKS to the SERVER span of each inject it drained
  (`inboxTraceLinks`: the newest 32, with the count before the cap in
  ``core_agent.inbox.linked_injects``). ADK's ``invoke_agent {agent}`` span
  sits under it on a daemon; the host makes one there too.

What the host does beyond the daemon: inside a turn, the host's spans are
current, so a `call_peer` (``turn.call_peer`` or any `CallPeer` the agent
uses) sends `traceparent` and the callee's trace continues the caller's. The
daemon's attach client sends none. ``AgentHost(propagate_trace=False)`` turns
this off (the simulator's daemons do, to behave as real ones): then
`_tracing.trace_headers` sends nothing from inside the turn.

Costs nothing without OpenTelemetry or without a configured tracer provider:
one check per request and per turn, and no span.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._telemetry import _tracing
from .._version import __version__

__all__ = [
    "MAX_TURN_SPAN_LINKS",
    "TURN_SPAN_NAME",
    "ServerSpans",
    "TurnSpan",
    "inject_span_context",
    "should_trace",
    "turn_span",
]

TURN_SPAN_NAME = "agent.turn"  # turnspan.go turnSpanName
MAX_TURN_SPAN_LINKS = 32  # turnspan.go maxTurnSpanLinks: the newest injects are kept
_SCOPE = "coreagent_sdk.host"

# server.go pollingReadRe: the reads a remote TUI polls every 1-2 s; GET/HEAD only.
_POLLED = re.compile(
    r"^/sessions$"
    r"|^/peers$"
    r"|^/sessions/(?:[^/]+/)?[^/]+/(?:status|usage|tools|agents|context|memory|skills|mcp"
    r"|pricing|perms)$"
)
# otelhttp's methodLookup: the methods `http.request.method` names as they are.
_METHODS = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
)


def should_trace(method: str, path: str) -> bool:
    """Whether the daemon traces a request. Pins `server.go` `shouldTraceRequest`."""
    if method not in ("GET", "HEAD"):
        return True
    return _POLLED.match(path) is None


def _recording() -> bool:
    """A tracer provider is configured: spans could be recorded (else the host makes none)."""
    if not _tracing.AVAILABLE:
        return False
    trace = _tracing._modules().trace
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _tracer() -> Any:
    return _tracing._modules().trace.get_tracer(_SCOPE, __version__)


def _split_host_port(hostport: str) -> tuple[str, int]:
    """otelhttp's `SplitHostPort`: the host, and the port or -1 when none or unparsable."""
    if hostport.startswith("["):
        end = hostport.rfind("]")
        if end < 0:
            return "", -1
        if ":" not in hostport[end:]:
            return hostport[1:end], -1
        host, sep, port = hostport[1:].partition("]:")
        if not sep or "]" in port:
            return "", -1
    else:
        if ":" not in hostport:
            return hostport, -1
        host, _, port = hostport.rpartition(":")
        if ":" in host:  # net.SplitHostPort: too many colons
            return "", -1
    if not (port.isascii() and port.isdigit()) or len(port) > 5 or int(port) > 65535:
        return host, -1
    return host, int(port)


def _request_attributes(scope: Scope, headers: dict[str, str]) -> dict[str, Any]:
    """otelhttp's `RequestTraceAttrs` for an ASGI request, in Go's order."""
    https = scope.get("scheme") in ("https", "wss")
    host, port = _split_host_port(headers.get("host", ""))
    method = scope["method"]
    attrs: dict[str, Any] = {"server.address": host}
    if method in _METHODS:
        attrs["http.request.method"] = method
    else:
        attrs["http.request.method"] = method.upper() if method.upper() in _METHODS else "_OTHER"
        attrs["http.request.method_original"] = method
    attrs["url.scheme"] = "https" if https else "http"
    if port > 0 and port != (443 if https else 80):
        attrs["server.port"] = port
    client = scope.get("client")
    peer = str(client[0]) if client else ""
    if peer:
        attrs["network.peer.address"] = peer
        if client and isinstance(client[1], int) and client[1] > 0:
            attrs["network.peer.port"] = client[1]
    if headers.get("user-agent"):
        attrs["user_agent.original"] = headers["user-agent"]
    client_ip = headers.get("x-forwarded-for", "").split(",", 1)[0] or peer
    if client_ip:
        attrs["client.address"] = client_ip
    if scope.get("path"):
        attrs["url.path"] = scope["path"]
    version = str(scope.get("http_version", "1.1"))
    attrs["network.protocol.version"] = "2.0" if version == "2" else version
    return attrs


class ServerSpans:
    """ASGI middleware: a SERVER span per traced request. Pins `server.go` `Bind` (otelhttp)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not _recording()
            or not should_trace(scope["method"], scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        otel = _tracing._modules()
        trace = otel.trace
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:
            # Go's Header.Get: the first value of a repeated header.
            headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
        parent = otel.propagate.extract(headers)
        span = _tracer().start_span(
            f"{scope['method']} {scope['path']}",  # the daemon's formatter: method and path
            context=parent,
            kind=trace.SpanKind.SERVER,
            attributes=_request_attributes(scope, headers),
        )
        status = 200  # otelhttp's default when a handler writes nothing
        read = written = 0

        async def counting_receive() -> Message:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            nonlocal status, written
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                written += len(message.get("body", b""))
            await send(message)

        try:
            with trace.use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                await self.app(scope, counting_receive, counting_send)
        finally:
            # otelhttp's ResponseTraceAttrs and Status.
            if read > 0:
                span.set_attribute("http.request.body.size", read)
            if written > 0:
                span.set_attribute("http.response.body.size", written)
            span.set_attribute("http.response.status_code", status)
            if status < 100 or status >= 600:
                span.set_status(
                    trace.Status(trace.StatusCode.ERROR, f"Invalid HTTP status code {status}")
                )
            elif status >= 500:
                span.set_status(trace.Status(trace.StatusCode.ERROR))
            span.end()


def inject_span_context() -> Any:
    """The span context an inject arrives with (its SERVER span), or None: the turn links it.

    Pins `inbox.go` `push` keeping `spanCtx` per message (`InjectAsContext`).
    """
    if not _tracing.AVAILABLE:
        return None
    context = _tracing._modules().trace.get_current_span().get_span_context()
    return context if context.is_valid else None


class TurnSpan:
    """The open turn span (None inside when nothing records); `fail` marks the turn's error."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def fail(self, kind: str, message: str) -> None:
        """Record the turn's terminal error as Go's `RecordError` + `SetStatus(Error)` do."""
        if self.span is None:
            return
        trace = _tracing._modules().trace
        self.span.add_event("exception", {"exception.type": kind, "exception.message": message})
        self.span.set_status(trace.Status(trace.StatusCode.ERROR, message))


@contextlib.contextmanager
def turn_span(
    agent: str,
    session_id: str,
    prompt_id: str,
    injects: Sequence[Any],
    *,
    propagate: bool,
) -> Iterator[TurnSpan]:
    """Run a turn in `agent.turn` (a new trace linking `injects`) and `invoke_agent {agent}`.

    Pins `turnspan.go` `startTurnSpan` and `inboxTraceLinks`. With
    ``propagate=False`` no call made inside sends `traceparent`.
    """
    with contextlib.ExitStack() as stack:
        if not propagate:
            stack.enter_context(_tracing.no_propagation())
        if not _recording():
            yield TurnSpan(None)
            return
        otel = _tracing._modules()
        trace = otel.trace
        valid = [c for c in injects if c is not None and c.is_valid]
        attributes: dict[str, Any] = {
            "gen_ai.conversation.id": session_id,
            "gen_ai.agent.name": agent,
        }
        if valid:
            attributes["core_agent.inbox.linked_injects"] = len(valid)  # before the cap
        tracer = _tracer()
        root = tracer.start_span(
            TURN_SPAN_NAME,
            context=otel.context.Context(),  # a new trace: the loop's context has no span
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            links=[trace.Link(c) for c in valid[-MAX_TURN_SPAN_LINKS:]],
        )
        handle = TurnSpan(root)
        invoke = tracer.start_span(  # ADK's span under the daemon's turn span
            f"invoke_agent {agent}",
            context=trace.set_span_in_context(root),
            kind=trace.SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": _tracing.PROVIDER_NAME,
                "gen_ai.agent.name": agent,
                "gen_ai.conversation.id": session_id,
                "coreagent.prompt_id": prompt_id,
            },
        )
        try:
            # The agent runs with the invoke span current: its calls are the turn's children.
            with trace.use_span(
                invoke, end_on_exit=True, record_exception=False, set_status_on_exception=False
            ):
                yield handle
        except BaseException as exc:  # a cancelled turn ends as the daemon's does: an error
            handle.fail(type(exc).__name__, str(exc) or type(exc).__name__)
            raise
        finally:
            root.end()
