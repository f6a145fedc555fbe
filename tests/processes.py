"""Hosts the tests serve (on loopback, in this process or as `python -m coreagent_sdk.host`),
and how they end."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
from collections.abc import AsyncIterator

from coreagent_sdk.host import AgentHost, PeerRegistry


@contextlib.asynccontextmanager
async def served_hub() -> AsyncIterator[str]:
    """A hub served on loopback in this process; yields its URL, then stops it."""
    hub = AgentHost("hub", registry=PeerRegistry(), session_rate_limit=None)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(hub.serve(on_ready=ready.set_result, handle_signals=False))
    url = await asyncio.wait_for(ready, 10)
    try:
        yield url
    finally:
        hub.stop()
        await asyncio.wait_for(task, 10)


async def stop_with_sigterm(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then the process must exit 0 within 10 s; killed and its pipes closed anyway."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(asyncio.to_thread(proc.wait), 10)
        assert code == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        reap(proc)


def reap(proc: subprocess.Popen[str]) -> None:
    """Kill the process if it still runs, wait for it, and close its pipes."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(5)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


async def stored_frames(host: AgentHost, session_id: str) -> list[int]:
    """The sizes of a session's event frames in the host's store, oldest first."""
    rows = await host.store.file.read(
        lambda db: db.conn.execute(
            "SELECT length(frame) FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
    )
    return [size for (size,) in rows]
