"""Delegation by name (the daemon's `pkg/tools/peer`).

Holds: `CallPeer` and its result (`_call_peer`), the directories that resolve a name per call
(`_directory`), joining a hub as a peer (`_registration`), the hop and deadline notes that
bound a chain of delegations (`_hops`), reading back an answer after a stream broke
(`_read_back`), the per-peer call slots (`_slots`), and the loop thread behind the sync calls
(`_loop_thread`).

May import: `_attach`, `_http`, `_telemetry` and the top-level base modules. Never `_records`
or `_display`: a value's `__repr__` / `_repr_html_` imports its renderer when it runs.
"""
