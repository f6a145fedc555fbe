"""A served fleet logs no request line and leaves the process's uvicorn loggers to their user.

`Fleet.serve()` gave uvicorn `access_log=False`, which uvicorn carries out by emptying the
process's `uvicorn.access` logger (its handlers, and propagation off): a user's own uvicorn
app in the same process (a notebook's, a test suite's) lost its access log for good once a
fleet had served. Each of the fleet's servers now turns off its own access log only.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import httpx
import uvicorn

from simulator import Fleet, behaviors

_UVICORN = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


def _state() -> dict[str, tuple[object, ...]]:
    loggers = (logging.getLogger(n) for n in _UVICORN)
    return {lg.name: (lg.level, tuple(lg.handlers), lg.propagate, lg.disabled) for lg in loggers}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def _users_app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _serve_users_app_once(path: str) -> None:
    """The user's own uvicorn server, with its access log on, answering one GET of `path`."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(_users_app, lifespan="off", log_config=None, access_log=True)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):  # up to 5 s
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        assert server.started
        async with httpx.AsyncClient(timeout=5) as client:
            assert (await client.get(f"http://127.0.0.1:{port}{path}")).status_code == 200
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


async def test_a_users_own_uvicorn_access_log_still_logs_after_a_fleet_has_served() -> None:
    access = logging.getLogger("uvicorn.access")
    users = _Lines()
    access.addHandler(users)
    old_level, old_propagate, old_handlers = access.level, access.propagate, access.handlers[:]
    access.setLevel(logging.INFO)
    try:
        before = _state()
        fleet = Fleet()
        fleet.add_peer("echo", behaviors.echo())
        try:
            served = await fleet.serve()
            assert _state() == before  # serving configured no logger of the process
            async with httpx.AsyncClient(timeout=5) as client:
                await client.get(served.urls["echo"] + "/sessions?note=fleet-4711")
        finally:
            await fleet.aclose()
        assert _state() == before
        assert not any("fleet-4711" in line for line in users.lines), users.lines  # none of its
        await _serve_users_app_once("/users-own-2323")
        assert any("/users-own-2323" in line for line in users.lines), users.lines
    finally:
        access.handlers[:] = old_handlers  # put back whatever serving changed, for the next test
        access.setLevel(old_level)
        access.propagate = old_propagate
