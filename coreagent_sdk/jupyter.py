"""Running coroutines from synchronous code, including inside Jupyter's running loop.

Invariant: a sync call leaves no trace on the process or on the caller's
loop. Nothing in asyncio is patched; every loop this module makes is its own,
runs one coroutine, and is shut down (tasks cancelled, async generators
finalised, loop closed) before the call returns.

The one exception is an explicit opt-in, `enable_nested_sync()`, for the
single notebook case a worker thread cannot serve: a sync call to a server
running on the notebook's own loop (a fleet the same notebook serves). It
patches asyncio with nest-asyncio2 for the rest of the process, so it is
never applied on import, by the pytest plugin or by default.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import importlib
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["enable_nested_sync", "is_waiting", "run_sync"]

T = TypeVar("T")

# Loops whose thread waits in `run_sync` for a worker: they cannot run until it returns.
_waiting: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
# Loops a sync call re-enters instead of waiting on (`enable_nested_sync`).
_nested: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def is_waiting(loop: asyncio.AbstractEventLoop) -> bool:
    """True while a sync call made on `loop` waits for its worker, so `loop` cannot run.

    A server on such a loop cannot answer the call; code that knows which
    loop serves a URL (the simulator's served fleets) checks this to fail at
    once with the fix instead of waiting out the call's deadline.
    """
    return loop in _waiting


def reenters() -> bool:
    """True when a sync call made here re-enters the running loop (`enable_nested_sync`)."""
    try:
        return asyncio.get_running_loop() in _nested
    except RuntimeError:
        return False


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
    loop = asyncio.get_running_loop()
    if loop in _nested:
        # Re-entered (nest-asyncio2): the loop's other tasks, servers included, keep running.
        return loop.run_until_complete(coro)
    return _run_in_worker(coro)


def enable_nested_sync() -> None:
    """Let sync calls made in this notebook re-enter its running loop (nest-asyncio2). Opt-in.

    Call it once, in a cell. Afterwards a sync call in that kernel (``tool(peer=...,
    prompt=...)``) runs on the kernel's own loop instead of a worker thread, so a
    server on that loop keeps answering while the call waits: a sync call over the
    sockets of a fleet the same notebook serves then works instead of raising
    `LoopBlockedError`.

    What it patches, for the rest of the process (there is no undo): nest-asyncio2
    replaces ``asyncio.run``, ``asyncio.get_event_loop``, the Task and Future
    classes (with their pure-Python versions, on Python < 3.14) and the event loop
    policy, and patches the running loop's class (``run_forever``,
    ``run_until_complete``, ``_run_once``) so that it can run inside itself. Code
    that depends on asyncio's stock behaviour (the C tasks' speed, a library that
    checks for a running loop, later tests in the same process) sees the patched
    one. That is why nothing applies it on import, in pytest or by default.

    Prefer ``await tool.acall(...)`` wherever a cell can await: it needs no patch,
    keeps the loop's other tasks running, and is what async code does anyway. Use
    this only when code you cannot change makes sync calls to servers the notebook
    itself runs. Needs the ``jupyter`` extra (nest-asyncio2; the older nest-asyncio
    is used if it is the one installed). Raises `RuntimeError` outside a running
    loop, where sync calls need no help.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "jupyter: enable_nested_sync() needs a running event loop (a notebook cell); "
            "outside one, sync calls already run on a loop of their own: do not call it"
        ) from None
    if loop in _nested:
        return
    nest: Any = None
    for name in ("nest_asyncio2", "nest_asyncio"):  # loaded here and only here
        try:
            nest = importlib.import_module(name)
            break
        except ImportError:
            continue
    if nest is None:
        raise ImportError(
            "jupyter: enable_nested_sync() needs nest-asyncio2; "
            "pip install 'coreagent-sdk[jupyter]'"
        )
    nest.apply(loop)
    _nested.add(loop)


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
