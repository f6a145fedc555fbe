"""Fault injection per daemon: latency, error answers, dropped streams, malformed frames."""

from __future__ import annotations

import asyncio

import attrs
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["FaultInjector", "Faults", "StreamAborted"]

_MALFORMED = b"event: agent\ndata: {not json\n\n"


class StreamAborted(Exception):
    """Raised inside an event stream by the `abort_streams_after` fault."""


@attrs.define
class Faults:
    """What goes wrong on one daemon; change the fields at any time, `clear()` to heal.

    Attributes:
        latency: Seconds added before every request is handled.
        error_status: Answer every request whose path starts with one of
            ``error_paths`` with this status (e.g. 503); None: no error.
        error_paths: Path prefixes `error_status` applies to (all paths when empty).
        drop_streams_after: Close each event stream after this many frames.
        abort_streams_after: Break each event stream after this many frames, as a
            crashing daemon would (no clean end of the body).
        malformed_frames: Send a frame whose data is not JSON before each real one.
    """

    latency: float = 0.0
    error_status: int | None = None
    error_paths: tuple[str, ...] = ()
    drop_streams_after: int | None = None
    abort_streams_after: int | None = None
    malformed_frames: bool = False

    def clear(self) -> None:
        """Heal the daemon: every field back to its default."""
        for field in attrs.fields(Faults):
            setattr(self, field.name, field.default)

    # The host's StreamHook: how these faults reach every event stream it writes.

    def before_frame(self) -> bytes:
        """A frame whose data is not JSON, before each real one, while `malformed_frames`."""
        return _MALFORMED if self.malformed_frames else b""

    def end_after(self, sent: int) -> bool:
        """Close the stream (`drop_streams_after`) or break it (`abort_streams_after`)."""
        if self.drop_streams_after is not None and sent >= self.drop_streams_after:
            return True
        if self.abort_streams_after is not None and sent >= self.abort_streams_after:
            raise StreamAborted(f"injected fault: stream aborted after {sent} frames")
        return False

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """`app` with these request-level faults in front of it (the host's middleware)."""
        return FaultInjector(app, self)


class FaultInjector:
    """ASGI middleware applying a daemon's request-level `Faults`."""

    def __init__(self, app: ASGIApp, faults: Faults) -> None:
        self.app = app
        self.faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        faults = self.faults
        if scope["type"] == "http":
            if faults.latency > 0:
                await asyncio.sleep(faults.latency)
            status = faults.error_status
            if status is not None and (
                not faults.error_paths
                or any(scope["path"].startswith(p) for p in faults.error_paths)
            ):
                response = PlainTextResponse(f"injected fault: {status}\n", status_code=status)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
