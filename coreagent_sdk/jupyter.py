"""Running coroutines from synchronous code, including inside Jupyter's running loop.

Invariant: a sync call leaves no trace on the process or on the caller's
loop. Nothing in asyncio is patched; every loop this module makes is its own,
runs one coroutine, and is shut down (tasks cancelled, async generators
finalised, loop closed) before the call returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["is_waiting", "run_sync"]

T = TypeVar("T")

# Loops whose thread waits in `run_sync` for a worker: they cannot run until it returns.
_waiting: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def is_waiting(loop: asyncio.AbstractEventLoop) -> bool:
    """True while a sync call made on `loop` waits for its worker, so `loop` cannot run.

    A server on such a loop cannot answer the call; code that knows which
    loop serves a URL (the simulator's served fleets) checks this to fail at
    once with the fix instead of waiting out the call's deadline.
    """
    return loop in _waiting


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion from synchronous code and return its result.

    Outside an event loop this is `asyncio.run`. Inside a running loop (a
    Jupyter cell, an async test calling sync code) asyncio forbids running a
    second coroutine on that loop, so `coro` runs under `asyncio.run` on a
    worker thread, with a copy of the caller's context variables, while the
    caller's thread waits. That blocks the caller's loop for the duration: its
    other tasks (servers such as `fleet.serve()` in the same kernel included)
    pause until the call returns, so a sync call cannot reach a server running
    on the caller's own loop; there, ``await`` the async form instead. Ctrl-C
    (KeyboardInterrupt) while waiting cancels the coroutine and re-raises.

    Objects the coroutine uses must not be tied to the caller's loop (an
    `httpx.AsyncClient` opened there, say); `CallPeer` keeps one client per
    loop for this reason. No process-wide patch is applied (unlike
    nest-asyncio, which this module used before and which replaced
    `asyncio.run`, the Task class and the loop class's methods for the whole
    process, for good).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if not running:
        return asyncio.run(coro)
    return _run_in_worker(coro)


def _run_in_worker(coro: Coroutine[Any, Any, T]) -> T:
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()
    started = threading.Event()
    where: dict[str, Any] = {}

    async def main() -> T:
        where["loop"] = asyncio.get_running_loop()
        where["task"] = asyncio.current_task()
        started.set()
        return await coro

    def work() -> None:
        try:
            outcome.set_result(asyncio.run(main()))
        except BaseException as exc:  # handed to the caller's thread, raised there
            outcome.set_exception(exc)
        finally:
            started.set()

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(work,), name="coreagent-run-sync")
    caller = asyncio.get_running_loop()
    _waiting.add(caller)
    try:
        thread.start()
        _join(thread, started, where)
    finally:
        _waiting.discard(caller)
    return outcome.result()


def _join(thread: threading.Thread, started: threading.Event, where: dict[str, Any]) -> None:
    try:
        thread.join()
    except KeyboardInterrupt:
        started.wait()
        loop, task = where.get("loop"), where.get("task")
        if loop is not None and task is not None:
            # The loop may have finished in the meantime; then there is nothing to cancel.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        thread.join()
        raise
