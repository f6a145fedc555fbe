"""Per-agent runtime instances (omniagent's `agentruntime`).

Holds: `RuntimeCache`, the bounded LRU with single-flight builds that closes what it evicts
(`_runtime_cache`), and `AgentBuilder`, which builds an instance from an agent's persona,
skills and own secrets (`_builder`).

May import: `_attach`, `_http`, `_telemetry` and the top-level base modules; it stands beside
`_peer` and imports nothing of it. Never `_records` or `_display` (renderers are imported
when a value is shown).
"""
