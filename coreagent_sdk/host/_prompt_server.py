"""uvicorn's `Server`, made to start and stop when told instead of on its next tick.

uvicorn paces itself with sleeps: its main loop wakes every 0.1 s to see whether
it should exit, and its shutdown sleeps 0.1 s after asking its connections to
close, then looks again every 0.1 s until they have. An idle `AgentHost` took
0.11 to 0.19 s from `stop()` to `serve()` returning, and whoever waited for it
to start looked at `started` every 10 or 20 ms. Every server the SDK runs (a
host, a multi-agent host, a served fleet's hub and daemons, the MCP bridge) is a
`PromptServer` instead:

- `started_within` waits on an event set when the sockets listen;
- the main loop waits on an event set with `should_exit` (and still wakes once
  a second, as uvicorn's does, to refresh its `Date` header);
- the shutdown watches the connections every 5 ms, bounded as uvicorn bounds
  it (`timeout_graceful_shutdown`, then the requests still running are
  cancelled), so it takes as long as the connections take to close;
- the process's signals are left to whoever runs the server (a host handles
  SIGTERM itself; uvicorn would re-raise it after shutting down, killing the
  process before the host deregistered).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from ._stop_request import StopRequest

__all__ = ["PromptServer"]

_TICK = 1.0  # uvicorn refreshes its Date header once a second; so does this main loop
_WATCH = 0.005  # how often a shutdown looks whether the connections have closed
_SETTLE = 3  # passes of the loop a shutdown gives connections being accepted and closed
_CANCELLED = "Task cancelled, timeout graceful shutdown exceeded"


class _CutAtShutdown(logging.Filter):
    """Drops uvicorn's traceback of a request the shutdown cancelled itself.

    A caller still sending its body when a server stops is cut off after the
    graceful timeout; uvicorn then logs the cancellation as "Exception in ASGI
    application" with a traceback, as if the server had crashed. The shutdown's
    own line saying it cancelled the requests stays.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, asyncio.CancelledError) and _CANCELLED in str(exc))


_log = logging.getLogger("uvicorn.error")
_CUT_AT_SHUTDOWN = _CutAtShutdown()


class PromptServer(uvicorn.Server):
    """uvicorn's `Server` as the SDK runs it: started and stopped when told, signals left alone.

    Serve with ``await server.serve(sockets=[sock])`` in a task, wait for it with
    `started_within`, stop it with ``server.should_exit = True``.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        # Made before uvicorn's __init__, which sets should_exit through the setter.
        self._stop = StopRequest()
        self._exit = asyncio.Event()  # the serve's own, from startup on
        self._listening = asyncio.Event()
        super().__init__(config)
        _log.addFilter(_CUT_AT_SHUTDOWN)  # once: a logger's filters are a set

    @property
    def should_exit(self) -> bool:
        return self._stop.asked

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        # From any thread (a fleet's sync close sets it from another one), at any moment.
        if value:
            self._stop.ask()
        else:
            self._stop.withdraw()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # Set already if told to stop before its loop was known; a fresh one when served
        # again after a stop and should_exit = False (a set event would make main_loop spin).
        self._exit = self._stop.begin()
        await super().startup(sockets=sockets)
        self._listening.set()

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._exit.wait(), _TICK)
            counter += 10  # on_tick refreshes the Date header when counter % 10 == 0

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for _ in range(_SETTLE):
            # A connection accepted in the pass that woke this stop makes its transport a
            # pass later: on a listener still open (from Python 3.12 on an accept finishing
            # after the close fails, and leaves its transport to the collector).
            await asyncio.sleep(0)
        for server in getattr(self, "servers", ()):
            server.close()
        for sock in sockets or []:
            sock.close()
        state = self.server_state
        bound = self.config.timeout_graceful_shutdown
        loop = asyncio.get_running_loop()
        deadline = None if bound is None else loop.time() + bound
        asked: set[object] = set()

        def ask_to_close() -> None:
            # Idle connections close now, busy ones after their answer; one whose protocol
            # came a pass after the listener closed is asked too, or it would outlive the stop.
            for connection in state.connections - asked:
                connection.shutdown()
                asked.add(connection)

        for _ in range(_SETTLE):  # a closed connection leaves `connections` a pass later
            ask_to_close()
            await asyncio.sleep(0)
        while (state.connections or state.tasks) and not self.force_exit:
            ask_to_close()
            if deadline is not None and loop.time() >= deadline:
                _log.error(
                    "Cancel %s running task(s), timeout graceful shutdown exceeded",
                    len(state.tasks),
                )
                for task in state.tasks:
                    task.cancel(msg=_CANCELLED)
                break
            await asyncio.sleep(_WATCH)
        else:
            # From Python 3.12 on this waits for the connections too: bounded all the same.
            left = None if deadline is None else max(deadline - loop.time(), 0.0)
            for server in getattr(self, "servers", ()):
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(server.wait_closed(), left)
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def started_within(self, serving: asyncio.Task[None], timeout: float) -> bool:
        """Wait until this server listens or `serving` (its task) ends, at most `timeout` s.

        Whether it started: an event, not a poll of `started`.
        """
        listening = asyncio.ensure_future(self._listening.wait())
        try:
            done = asyncio.FIRST_COMPLETED
            await asyncio.wait({listening, serving}, timeout=timeout, return_when=done)
        finally:
            listening.cancel()
        return bool(self.started)
