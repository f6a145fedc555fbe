"""Serving a host on a socket: listen, join the fleet, and stop cleanly within 10 s.

The invariant is the stop: whatever a hub or a peer does, `serve` returns
within `STOP_BUDGET` seconds of SIGTERM, SIGINT or `AgentHost.stop()`:

1. new injects and wakes answer 503 (the daemon's `rejectDraining`), and
   running turns get up to `grace` seconds to finish;
2. the host deregisters from its hub (one request, bounded by
   `HUB_TIMEOUT`); the heartbeat stops first;
3. every event stream ends, uvicorn closes its connections (bounded), and
   the host's turns, tools and clients are closed.

Joining is `PeerRegistration`'s: registered under the host's name once the
socket listens (so a caller resolving it can connect at once), heartbeats at
a third of the lease, registers again after a failure, deregisters on the
way out. (The daemon's `main.go` cancels its own heartbeat right after
registering, so a daemon's lease lapses after one TTL; a host keeps it.)
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .._peer._registration import PeerRegistration
from ._collector import serving_collector
from ._prompt_server import PromptServer

if TYPE_CHECKING:
    from ._host import AgentHost

__all__ = ["HUB_TIMEOUT", "STOP_BUDGET", "serve"]

STOP_BUDGET = 10.0  # seconds from the stop signal to serve() returning, at most
HUB_TIMEOUT = 2.0  # each request to the hub while joining or leaving
_CLOSE_TIMEOUT = 1.0  # uvicorn's own graceful shutdown, after streams have ended
_SHUTDOWN_WAIT = 2 * _CLOSE_TIMEOUT + 1  # how long serve() waits for uvicorn to return
# What is left of the budget for running turns: the hub's DELETE and uvicorn's shutdown
# each take up to their own bound after it.
_MAX_GRACE = STOP_BUDGET - HUB_TIMEOUT - _SHUTDOWN_WAIT
_STARTUP_TIMEOUT = 10.0
_POLL = 0.02


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP matters: asyncio turns Nagle off (TCP_NODELAY) only on accepted sockets
    # whose listener says it is TCP; with Nagle on, each small SSE frame after the first
    # waits out the client's delayed ACK (~40 ms a turn, and a queue behind it under load).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _in_kernel() -> bool:
    """Whether this process is a Jupyter (IPython) kernel; IPython is looked up, never imported."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


@contextlib.contextmanager
def _signals(stop: asyncio.Event, enabled: bool) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` while serving (main thread only), then are restored.

    Not in a Jupyter kernel: there SIGINT is the interrupt button (it must stop the cell,
    not the host) and SIGTERM is the kernel manager ending the kernel; `stop()` stops the host.
    """
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if enabled and threading.current_thread() is threading.main_thread() and not _in_kernel():
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def serve(
    host_app: AgentHost,
    host: str,
    port: int,
    *,
    grace: float,
    on_ready: Callable[[str], None] | None,
    handle_signals: bool,
    tune_gc: bool,
) -> None:
    """Serve `host_app` on `host:port` until told to stop; see the module docstring."""
    import uvicorn

    from ._limits import uvicorn_options
    from ._server_logs import quiet_server_options

    if not 0 <= grace <= _MAX_GRACE:
        raise ValueError(
            f"AgentHost.serve: grace must be between 0 and {_MAX_GRACE:g} seconds (the stop "
            f"takes at most {STOP_BUDGET:g} s in all), got {grace!r}"
        )
    stop = host_app._stop.begin()  # before the first wait: a stop from now on is this serve's
    try:
        await host_app.open()  # a store that cannot be read fails here, before listening
        sock = _listen(host, port)
    except BaseException:
        host_app._stop.end()
        raise
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}"
    config = uvicorn.Config(
        host_app.app,
        lifespan="off",
        timeout_graceful_shutdown=int(_CLOSE_TIMEOUT) or 1,
        # The daemon's header limits; idle connections kept 30 s; no access log, and the
        # process's loggers left as their user set them (see _server_logs).
        **quiet_server_options(uvicorn_options()),
    )
    server = PromptServer(config)
    serving = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    registration: PeerRegistration | None = None
    try:
        with _signals(stop, handle_signals), serving_collector(tune_gc, _in_kernel()):
            if not await server.started_within(serving, _STARTUP_TIMEOUT):
                raise RuntimeError(f"AgentHost.serve: {url} did not start listening")
            if host_app.register_to is not None:
                registration = PeerRegistration(
                    host_app.register_to,
                    name=host_app.name,
                    endpoint=host_app.endpoint or url,
                    labels=host_app.labels,
                    ttl=host_app.ttl,
                    token_env=host_app.token_env,
                    transport=host_app.peer_transport,
                    timeout=HUB_TIMEOUT,
                    clock=host_app.clock,  # the host's clock of leases: tests pass time
                )
                await registration.__aenter__()
            if on_ready is not None:
                on_ready(url)
            waiter = asyncio.get_running_loop().create_task(stop.wait())
            await asyncio.wait({waiter, serving}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            await _drain(host_app, grace)
    finally:
        host_app._stop.end()
        if registration is not None:
            await registration.__aexit__(None, None, None)  # bounded by HUB_TIMEOUT
        host_app.close_streams()
        server.should_exit = True
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(serving), _SHUTDOWN_WAIT)
        if not serving.done():
            serving.cancel()
        await host_app.aclose()
        sock.close()
        host_app.draining = False


async def _drain(host_app: AgentHost, grace: float) -> None:
    """Refuse new work, then give running turns up to `grace` seconds (polled, bounded)."""
    host_app.draining = True
    deadline = time.monotonic() + grace
    for _ in range(int(grace / _POLL) + 1):  # bounded by grace, and by a count
        if not host_app.busy() or time.monotonic() >= deadline:
            break
        await asyncio.sleep(_POLL)
