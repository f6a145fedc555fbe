"""Injectable time: a `Clock` gives `now()` and `sleep()`; `FakeClock` moves only when told."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Where leases, heartbeats and timestamps read the time (seconds since the epoch)."""

    def now(self) -> float:
        """The current time, in seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` have passed on this clock."""
        ...


class SystemClock:
    """Wall time and real sleeping."""

    def now(self) -> float:
        """`time.time()`."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """`asyncio.sleep(seconds)` (a negative value does not wait)."""
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A clock for tests: time stands still until `advance()`; sleepers wake in order.

    `sleep()` returns as soon as `advance()` has moved the clock to or past its
    deadline, so a test drives hours of leases and heartbeats in microseconds.
    """

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = float(start)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        """The fake time: the start plus every `advance()`."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Wait until `advance()` moves the clock `seconds` on (0 or less: one loop turn)."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), fut))
        await fut

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has come."""
        if seconds < 0:
            raise ValueError(f"FakeClock.advance: seconds must be >= 0, got {seconds!r}")
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    async def until_sleeping(self, count: int = 1, *, turns: int = 10_000) -> None:
        """Yield to the loop until `count` tasks sleep on this clock (bounded by `turns`).

        Advance after this, not before: a task that has not reached its sleep
        yet would sleep from the advanced time and miss the tick.
        """
        for _ in range(turns):
            if self.sleepers >= count:
                return
            await asyncio.sleep(0)
        raise TimeoutError(
            f"FakeClock.until_sleeping: {self.sleepers} sleeper(s) after {turns} loop turns, "
            f"wanted {count}; is the task you expect to sleep running?"
        )

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting (cancelled ones excluded)."""
        return sum(1 for _, _, fut in self._sleepers if not fut.done())

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r})"
