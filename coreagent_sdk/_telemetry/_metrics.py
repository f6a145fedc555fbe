"""OpenTelemetry metrics for delegations, when the `otel` extra and a meter provider are there.

The invariant, as for traces (`_tracing`): metrics never change what a call
does, and cost nothing without a provider. Without the `otel` extra, or with
neither `CallPeer(meter_provider=...)` nor a global provider set
(`metrics.set_meter_provider`), no instrument is made and nothing records.

With one, each finished call records, by the generative-AI client
conventions:

- `gen_ai.client.operation.duration` (histogram, seconds) with
  `gen_ai.operation.name` = `invoke_agent`, `gen_ai.provider.name`,
  `gen_ai.agent.name` (the peer) and, on failure, `error.type` (the
  exception's class name);
- `coreagent.call_peer.calls` (counter) with the same attributes and
  `coreagent.call_peer.outcome` (ok, truncated, timeout, turn_error, ...), so
  counts by outcome per peer need no histogram arithmetic.

The peer name is an attribute only for a peer the directory resolved: a
model can make up any number of names, and each one would be a new series in
the backend. No prompt, answer, session id or token is in any attribute.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from .._version import __version__
from . import _tracing

__all__ = ["CallMetrics", "call_metrics"]

# The conventions' advised buckets for gen_ai.client.operation.duration (seconds).
_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_log = logging.getLogger("coreagent_sdk.metrics")
_lock = threading.Lock()
_by_provider: weakref.WeakKeyDictionary[Any, CallMetrics] = weakref.WeakKeyDictionary()


class CallMetrics:
    """The two instruments of one meter provider."""

    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter("coreagent_sdk", __version__)
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self.calls = meter.create_counter(
            "coreagent.call_peer.calls",
            unit="{call}",
            description="CallPeer calls, by peer and outcome",
        )

    def record(
        self,
        *,
        tool: str,
        peer: str | None,
        seconds: float,
        error: BaseException | None,
        truncated: bool = False,
    ) -> None:
        """One finished call: its duration and its outcome (ok, truncated or the error's)."""
        attributes: dict[str, str] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": _tracing.PROVIDER_NAME,
            "gen_ai.tool.name": tool,
        }
        if peer is not None:
            attributes["gen_ai.agent.name"] = peer
        if error is not None:
            attributes["error.type"] = type(error).__name__
        self.duration.record(seconds, attributes)
        outcome = "truncated" if truncated else "ok"
        if error is not None:
            outcome = _tracing.outcome(error)
        self.calls.add(1, {**attributes, "coreagent.call_peer.outcome": outcome})


def _global_provider() -> Any:
    from opentelemetry import metrics

    provider = metrics.get_meter_provider()
    # Unset, the API hands out a proxy that records nothing until one is set.
    return None if type(provider).__name__ == "_ProxyMeterProvider" else provider


def call_metrics(provider: Any = None) -> CallMetrics | None:
    """The instruments for `provider` (None: the global one); None when nothing would record."""
    if provider is None:
        if not _tracing.AVAILABLE:
            return None
        provider = _global_provider()
        if provider is None:
            return None
    with _lock:
        found = _by_provider.get(provider)
        if found is None:
            try:
                found = CallMetrics(provider)
            except Exception:  # a broken provider must not change what a call does
                _log.warning("metrics: the meter provider failed; not recording", exc_info=True)
                return None
            _by_provider[provider] = found
        return found
