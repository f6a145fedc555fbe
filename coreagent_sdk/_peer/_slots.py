"""How many calls a tool runs at once on one event loop: its connection limit, in calls.

A delegation holds two connections at once (its event stream, open while it
injects), so a pool of N connections shared by calls that each take one and
then wait for a second deadlocks past N/2 calls. Admitting at most N // 2
calls per loop, each then free to take its two, keeps the pool at N with no
deadlock. A call waits for its turn inside its own deadline: waiting for a
connection is part of the call's time, never extra.
"""

from __future__ import annotations

import asyncio
import threading
import weakref

__all__ = ["CallSlots"]


class CallSlots:
    """At most `calls` calls at once per event loop (one semaphore per loop, made on first use)."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self._lock = threading.Lock()
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def here(self) -> asyncio.Semaphore:
        """The running loop's semaphore."""
        loop = asyncio.get_running_loop()
        with self._lock:
            slots = self._by_loop.get(loop)
            if slots is None:
                slots = self._by_loop[loop] = asyncio.Semaphore(self.calls)
            return slots
