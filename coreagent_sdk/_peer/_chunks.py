"""Where a delegation's partial chunks go while it runs: a sink set for one call, or none.

`CallPeer` reads a peer's partial (streaming) events and skips them: only the
final answer is the call's result. A bridge that shows progress (the MCP server
turns each chunk into a progress notification) sets a sink around its call;
`CallPeer._read` awaits it with each chunk's text, already scrubbed. A context
variable rather than an argument: the chunks belong to one call, made from one
task, and the tool's signature stays `acall(peer, prompt)` (the model's view).
Unset, reading a chunk costs one lookup.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable

__all__ = ["ChunkSink", "chunk_sink"]

ChunkSink = Callable[[str], Awaitable[None]]
"""Awaited with each partial chunk's text (scrubbed) of the call made in this context."""

chunk_sink: contextvars.ContextVar[ChunkSink | None] = contextvars.ContextVar(
    "coreagent_chunk_sink", default=None
)
