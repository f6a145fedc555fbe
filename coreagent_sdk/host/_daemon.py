"""What the handlers and the events endpoint use of the host they answer for.

A Protocol rather than `AgentHost`: the host imports its handlers to route to them, so
handlers that imported the host back would close a circle. The host has all of it.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Protocol

from ._session_host import SessionHost

if TYPE_CHECKING:
    from starlette.requests import Request

    from ._ratelimit import SessionRateLimiter
    from ._registry import Identity, PeerRegistry
    from ._session import _Session
    from ._store import StoredSession

__all__ = ["Daemon", "StreamHook"]


class StreamHook(Protocol):
    """A seam on every event stream a host writes (the simulator's faults use it)."""

    def before_frame(self) -> bytes:
        """Bytes written before each frame (b"" for none)."""

    def end_after(self, sent: int) -> bool:
        """True ends the stream cleanly after `sent` frames; raising aborts it mid-body."""


class Daemon(SessionHost, Protocol):
    """The host as its request handlers see it."""

    app_name: str
    multi_session: bool
    attach_token_env: str | None
    registry: PeerRegistry | None
    refuse_foreign_reregistration: bool
    stream_hook: StreamHook | None
    rate_limiter: SessionRateLimiter | None
    draining: bool
    sessions: dict[str, _Session]
    _ids: itertools.count[int]
    _listings: dict[tuple[str, tuple[tuple[str, str], ...]], bytes]
    _listing_version: int

    def identify(self, request: Request) -> Identity | None: ...
    def _caller(self, request: Request) -> Identity | None: ...
    def visible(
        self, session: _Session | StoredSession, who: Identity | None, action: str = "read"
    ) -> bool: ...
    async def lookup_session(self, request: Request, action: str = "read") -> _Session | None: ...
    def _admitted(self) -> None: ...
    def capabilities_frame(self, request: Request) -> bytes: ...
    def status_frame(self, session: _Session) -> bytes: ...
