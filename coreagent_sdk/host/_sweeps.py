"""The idle sweeps of every host on one event loop and clock, ticked by one task.

A host sweeps its idle sessions every `sweep_period()` on a grid of its own
(from when it opened, as the daemon's ticker runs from `Bind`), while a session
it could evict is in memory. Each host ran a task of its own for that: a fleet
of 10,000 daemons called at random held a task, a coroutine and a timer in the
loop's heap for each daemon it had called, and made one on each first call.
Here one task per loop and clock keeps every host's next tick in a heap,
sleeps until the earliest, and sweeps each host whose tick has come, on that
host's own grid: what a host evicts and when is what its own task did.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import weakref
from collections.abc import Mapping
from typing import Protocol

from .._clock import Clock
from ._session import STARTUP_SESSION
from ._store import sweep_period


class AgentHost(Protocol):
    """What the sweeps need of a host (an `AgentHost`)."""

    _sweeps: Sweeps | None
    _sweep_tick: float

    @property
    def name(self) -> str: ...
    @property
    def session_idle_timeout(self) -> float: ...
    @property
    def sessions(self) -> Mapping[str, object]: ...
    @property
    def _sweep_anchor(self) -> float: ...
    def sweep(self) -> list[str]: ...


__all__ = ["Sweeps", "sweeps_of"]

_log = logging.getLogger("coreagent_sdk.host")
# One Sweeps per loop and clock; gone with its loop.
_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, Sweeps]] = (
    weakref.WeakKeyDictionary()
)


def sweeps_of(loop: asyncio.AbstractEventLoop, clock: Clock) -> Sweeps:
    """The `Sweeps` of `clock` on `loop` (made on first use)."""
    mine = _BY_LOOP.get(loop)
    if mine is None:
        mine = _BY_LOOP[loop] = {}
    sweeps = mine.get(id(clock))
    if sweeps is None or sweeps.clock is not clock:
        sweeps = mine[id(clock)] = Sweeps(loop, clock)
    return sweeps


def _next_tick(anchor: float, period: float, now: float) -> float:
    """The first tick of the grid `anchor` + k x `period` that is after `now`."""
    return anchor + period * ((now - anchor) // period + 1)


def _evictable(host: AgentHost) -> bool:
    return any(sid != STARTUP_SESSION for sid in host.sessions)


class Sweeps:
    """Every scheduled host's next tick on one loop and clock, and the one task ticking them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        self.loop = loop
        self.clock = clock  # kept: the registry's key is its id
        # (tick, order, host): a host's entry is current while host._sweep_tick is its tick.
        self._heap: list[tuple[float, int, weakref.ref[AgentHost]]] = []
        self._order = itertools.count()
        self._live = 0  # hosts scheduled here
        self._task: asyncio.Task[None] | None = None
        self._due = math.inf  # the tick the task sleeps until
        self._waking = False  # the task's sleep is being cancelled for an earlier tick

    def add(self, host: AgentHost) -> None:
        """Schedule `host`'s sweeps at the next tick of its grid (on this loop)."""
        period = sweep_period(host.session_idle_timeout)
        tick = _next_tick(host._sweep_anchor, period, self.clock.now())
        host._sweeps, host._sweep_tick = self, tick
        self._live += 1
        self._push(host, tick)
        if self._task is None or self._task.done():
            self._task = self.loop.create_task(self._run())
        elif tick < self._due < math.inf and not self._waking:  # sleeping, for later
            self._waking = True  # an earlier tick than the one slept for: wake it
            self._task.cancel()

    def drop(self, host: AgentHost) -> None:
        """Stop sweeping `host` (its entry is left to lapse); the task ends with the last host."""
        if host._sweeps is not self:
            return
        host._sweeps = None
        self._live -= 1
        task = self._task
        if self._live <= 0 and task is not None and not task.done():
            if self.loop is _running() and task is asyncio.current_task():
                return  # the task itself: it ends once it has popped what is left
            self._task = None
            if self.loop is _running():
                task.cancel()
            elif not self.loop.is_closed():
                self.loop.call_soon_threadsafe(task.cancel)

    def _push(self, host: AgentHost, tick: float) -> None:
        heapq.heappush(self._heap, (tick, next(self._order), weakref.ref(host)))

    def _current(self, tick: float, ref: weakref.ref[AgentHost]) -> AgentHost | None:
        host = ref()
        if host is None or host._sweeps is not self or host._sweep_tick != tick:
            return None
        return host

    async def _run(self) -> None:
        clock = self.clock
        while self._heap:
            tick, _, ref = self._heap[0]
            if self._current(tick, ref) is None:
                heapq.heappop(self._heap)  # a host dropped, collected or moved meanwhile
                continue
            await self._sleep_until(tick)
            now = clock.now()
            while self._heap and self._heap[0][0] <= now:
                tick, _, ref = heapq.heappop(self._heap)
                host = self._current(tick, ref)
                if host is None:
                    continue
                try:
                    host.sweep()
                except Exception:  # one host's failing sweep must not stop the others'
                    _log.exception("AgentHost %r: the idle sweep failed", host.name)
                if not _evictable(host):
                    self.drop(host)  # the next session created or resumed schedules it again
                    continue
                # A ticker drops the ticks a slow receiver missed: the next one is still ahead.
                tick = _next_tick(tick, sweep_period(host.session_idle_timeout), clock.now())
                host._sweep_tick = tick
                self._push(host, tick)
        if self._task is asyncio.current_task():
            self._task = None

    async def _sleep_until(self, tick: float) -> None:
        """Sleep on the clock until `tick`, or until a host is added with an earlier one.

        The sleep is the task's own (a woken tick sweeps in the same step, as a host's own
        task did); an earlier tick cancels it, and only that cancellation is absorbed.
        """
        self._due = tick
        try:
            await self.clock.sleep(tick - self.clock.now())
        except asyncio.CancelledError:
            task = asyncio.current_task()
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+
            cancelling = getattr(task, "cancelling", None)
            if not self._waking or (cancelling is not None and cancelling() > 1):
                raise  # a cancellation of the task itself
            if uncancel is not None:
                uncancel()
        finally:
            self._due, self._waking = math.inf, False


def _running() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
