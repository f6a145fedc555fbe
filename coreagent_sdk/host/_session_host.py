"""What a session and its turns use of the host they run in (an `AgentHost` is one).

A Protocol rather than the class: the host imports the sessions it keeps, so a session that
imported the host back would close a circle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ._runtimes import TurnHost

if TYPE_CHECKING:
    from .._clock import Clock
    from ._store import SessionStore

__all__ = ["SessionHost"]


class SessionHost(TurnHost, Protocol):
    """A session's host: its name, clock, model, store, delegation and task set."""

    name: str
    clock: Clock
    model: str
    store: SessionStore
    on_agent_error: Callable[[Exception], None] | None
    propagate_trace: bool
    _tasks: set[asyncio.Task[None]]

    async def call_peer(self, peer: str, prompt: str) -> dict[str, Any]: ...
