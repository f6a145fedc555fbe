"""Hosts the tests serve (on loopback, in this process or as `python -m coreagent_sdk.host`),
and how they end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
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


def _cpu_wait(schedstat: str) -> float:
    # The second field: nanoseconds the thread spent runnable, waiting for a core (Linux).
    try:
        with open(schedstat) as read:
            return int(read.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0  # no /proc (another OS, or the process is gone): nothing is subtracted


class Stopwatch:
    """Seconds since it was made, less the time a process and this thread waited for a CPU.

    Read it on the thread that made it.

    A promise such as "stops within ten seconds" is about what a program waits for (its grace,
    its timeouts, its peers' answers) and the work it does; on a loaded machine it also waits
    its turn for a core, which no program can promise. Linux counts that wait per thread
    (/proc/PID/schedstat). The larger of the process's main thread's and this thread's (which
    serves the test's own hubs and peers) is taken off: their waits overlap in part, and the
    larger is the least a loaded machine added. So load cannot break the bound, and a stop
    that sleeps through a timeout still does.
    """

    def __init__(self, pid: int | None = None) -> None:
        # Without a pid: this thread alone (a test whose servers run on its own loop).
        self._paths = (*([f"/proc/{pid}/schedstat"] if pid else []), "/proc/thread-self/schedstat")
        self._started = time.monotonic()
        self._waited = self._cpu_waits()

    def _cpu_waits(self) -> list[float]:
        return [_cpu_wait(path) for path in self._paths]

    def seconds(self) -> float:
        """Read while the process exists (it may have exited, not yet been reaped)."""
        waits = [now - then for now, then in zip(self._cpu_waits(), self._waited, strict=True)]
        return time.monotonic() - self._started - max(waits)


async def timed_exit(proc: subprocess.Popen[str], limit: float) -> tuple[int, float]:
    """Wait at most `limit` s for the process to exit: its exit code and the seconds it took
    from now, less its and this thread's waits for a CPU (`Stopwatch`).

    The process is read once it has exited but before it is reaped (WNOWAIT), while /proc
    still holds its counts."""
    watch = Stopwatch(proc.pid)
    if hasattr(os, "waitid"):
        flags = os.WEXITED | os.WNOWAIT
        await asyncio.wait_for(asyncio.to_thread(os.waitid, os.P_PID, proc.pid, flags), limit)
    else:
        await asyncio.wait_for(asyncio.to_thread(proc.wait), limit)
    took = watch.seconds()
    return proc.wait(), took
