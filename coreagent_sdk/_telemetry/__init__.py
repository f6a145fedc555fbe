"""What the SDK tells OpenTelemetry (the daemon's `pkg/telemetry`).

Holds: client spans of the attach calls (`_tracing`) and the delegation metrics (`_metrics`),
both lazy: OpenTelemetry is an optional extra and is only imported once a provider is set.

May import: the top-level base modules only. Every room above may report through it.
"""
