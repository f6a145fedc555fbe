"""The daemon's attach protocol: what goes over the wire and how a client speaks it.

Holds: the typed frames and records of `protocol.md` (`_wire`), the bounded SSE decoder
(`_sse`), `AttachClient` (`_client`), the agent card (`_agentcard`), inbox items (`_inbox`),
token reading and checking (`_token`), Go's `%q` quoting (`_quote`), lone-surrogate handling
(`_surrogates`), frames too large to keep (`_oversized`), and recordings of a session's
frames (`_recording`).

May import: `_http`, `_telemetry` and the top-level base modules. A new wire field goes here.
"""
