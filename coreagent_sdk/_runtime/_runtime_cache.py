"""`RuntimeCache`: per-agent runtime instances in a bounded LRU, built once, never leaked.

The invariant everything here serves: every instance the builder returns is,
at every moment, either resident, pinned by a lease, or closed, and it is
closed exactly once. The Go original breaks this when a build finishes after
its entry was evicted, invalidated or the cache closed, and when one caller's
cancellation kills the build everyone else waits on.

How it holds:
- A build runs in its own task; waiters `shield` it, so cancelling one waiter
  never cancels the build. A build error is handed to every waiter of that
  build and not remembered.
- A build that finishes after `invalidate()` closes what it built and builds
  again from the current config; one that finishes after `aclose()` closes
  what it built and fails its waiters with `CacheClosedError`.
- When a build is installed, each waiter still waiting gets a pin on the
  slot, so the instance cannot be closed between the build finishing and the
  waiter running again (another build may evict it in between).
- Evicted or invalidated instances with pins are retired: closed when the
  last pin is released. Closes run in tracked tasks, so a close never runs
  inside the call that caused it and never raises into it.

The bound counts instances alive (built, or being built, and not yet closed),
not only resident ones: an instance may be a process (an MCP server), and
"16 at most" must hold for the processes, not just for the LRU. So a build
first reserves room: at capacity it evicts the least recently used unpinned
instance and awaits that instance's close *before* the builder runs; with no
unpinned instance it waits for what will free room by itself (a close under
way, another build finishing, a waiter picking up its hand-off). When every
instance alive is leased it waits up to `lease_wait` seconds for a lease to
end (a turn's lease outlives the answer its caller already has by a moment),
then builds anyway, over the bound until a lease ends: waiting on a lease
without a limit could wait forever (a turn holding its runtime while it calls
the agent being built), and a cache that deadlocks serves nobody.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol, runtime_checkable

import attrs

from ..errors import CacheClosedError

__all__ = [
    "DEFAULT_LEASE_WAIT",
    "DEFAULT_MAX_INSTANCES",
    "AgentConfig",
    "Builder",
    "CacheEvent",
    "CacheStats",
    "ConfigLoader",
    "RuntimeCache",
]

DEFAULT_MAX_INSTANCES = 64
"""How many instances a `RuntimeCache` keeps alive unless `max_instances=` says otherwise."""

DEFAULT_LEASE_WAIT = 1.0
# How long a miss with every instance leased waits for one lease to end before it builds
# over the bound: long enough for a turn's lease to end after its answer was sent, short
# enough that a turn which calls, while leased, the agent being built is not held long.

_log = logging.getLogger("coreagent_sdk.runtime_cache")


@attrs.frozen
class AgentConfig:
    """What an agent's runtime is built from.

    Attributes:
        id: The agent's id (the cache's key).
        slug: The agent's short name, as in URLs.
        name: Its display name.
        persona: Its persona, which becomes the system prompt.
        model: Its model ("" for the builder's default).
        provider: Its model provider ("" for the builder's default).
        skills: The names of its own skills.
    """

    id: str
    slug: str
    name: str = ""
    persona: str = ""
    model: str = ""
    provider: str = ""
    skills: tuple[str, ...] = attrs.field(default=(), converter=tuple)


@runtime_checkable
class ConfigLoader(Protocol):
    """Where the cache reads agents from: a cheap slug lookup and the full config."""

    async def agent_slug(self, agent_id: str) -> str:
        """The agent's slug, cheaply (asked on every request)."""
        ...

    async def load_config(self, agent_id: str) -> AgentConfig:
        """The agent's whole config (asked only to build)."""
        ...


@runtime_checkable
class Builder(Protocol):
    """Makes an agent's runtime instance (the processor) from its config.

    The instance may have `aclose()` or `close()` (sync or async): the cache
    calls it exactly once, when the instance is evicted, invalidated or the
    cache closes.
    """

    async def build(self, cfg: AgentConfig) -> Any:
        """A new runtime instance for the agent `cfg` describes."""
        ...


@attrs.frozen
class CacheStats:
    """Counters since the cache was made. `misses` counts callers, `builds` builder returns.

    Attributes:
        hits: Requests answered by a resident instance.
        misses: Requests that found none (callers waiting on one build each count).
        builds: Instances the builder returned.
        build_failures: Builds that raised.
        evictions: Instances evicted to stay within `max_instances`.
        closes: Instances closed (evicted, invalidated or at the cache's close).
    """

    hits: int = 0
    misses: int = 0
    builds: int = 0
    build_failures: int = 0
    evictions: int = 0
    closes: int = 0


@attrs.frozen
class CacheEvent:
    """What `on_event` receives.

    Attributes:
        kind: built, hit, evicted, closed, invalidated or build_failed.
        agent_id: The agent the event is about.
        error: What went wrong, on build_failed and on a close that raised.
    """

    kind: str
    agent_id: str
    error: str | None = None


class _Slot:
    __slots__ = ("agent_id", "closing", "handoffs", "instance", "pins", "retired", "slug")

    def __init__(self, agent_id: str, instance: Any, slug: str) -> None:
        self.agent_id = agent_id
        self.instance = instance
        self.slug = slug
        self.pins = 0  # leases held, plus hand-offs to waiters not yet resumed
        self.handoffs = 0  # of the pins, those handed to waiters not yet resumed
        self.retired = False  # out of the LRU: close when unpinned
        self.closing = False


class _Build:
    __slots__ = ("building", "closed", "future", "stale", "task", "waiters")

    def __init__(self, future: asyncio.Future[_Slot]) -> None:
        self.future = future
        self.task: asyncio.Task[None] | None = None
        self.waiters = 0
        self.stale = False  # invalidated while building: build again
        self.closed = False  # aclose() while building: close and fail
        self.building = False  # room reserved, the builder running


class RuntimeCache:
    """A bounded LRU of per-agent runtime instances with single-flight builds.

    ``max_instances <= 0`` means `DEFAULT_MAX_INSTANCES`. The bound counts
    instances alive (resident, leased after eviction, or closing): a miss at
    capacity evicts and awaits the evicted instance's close before it builds.
    With every instance leased, a miss waits ``lease_wait`` seconds for a
    lease to end, then builds over the bound (never a deadlock). ``on_event`` (optional)
    receives a `CacheEvent` for every build, hit, eviction, close,
    invalidation and failed build; ``logger`` receives close errors.

    Attributes:
        max_instances: How many instances the cache holds at most (alive, not only resident).
        lease_wait: Seconds a miss with every instance leased waits for a lease to end.
    """

    def __init__(
        self,
        loader: ConfigLoader,
        builder: Builder,
        *,
        max_instances: int = DEFAULT_MAX_INSTANCES,
        lease_wait: float = DEFAULT_LEASE_WAIT,
        logger: logging.Logger | None = None,
        on_event: Callable[[CacheEvent], None] | None = None,
    ) -> None:
        self._loader = loader
        self._builder = builder
        self.max_instances = max_instances if max_instances > 0 else DEFAULT_MAX_INSTANCES
        self.lease_wait = max(0.0, lease_wait)
        self._log = logger if logger is not None else _log
        self._on_event = on_event
        # Most recently used last: a hit is one `move_to_end`.
        self._resident: OrderedDict[str, _Slot] = OrderedDict()
        self._builds: dict[str, _Build] = {}
        self._closing: set[asyncio.Task[None]] = set()
        # Instances built and not yet closed, plus builds that reserved room for one.
        self._alive = 0
        # Builds waiting for room, woken whenever room may have been made.
        self._room: list[asyncio.Future[None]] = []
        self._hits = 0
        self._misses = 0
        self._built = 0
        self._build_failures = 0
        self._evictions = 0
        self._closes = 0

    def __repr__(self) -> str:
        from .._display import _render as _display  # at display time only

        return _display.cache_text(self)

    def _repr_html_(self) -> str:
        from .._display import _render as _display  # at display time only

        return _display.cache_html(self)

    def __len__(self) -> int:
        return len(self._resident)

    @property
    def alive(self) -> int:
        """Instances built (or being built) and not yet closed: resident, leased or closing."""
        return self._alive

    def resident(self) -> list[str]:
        """Resident agent ids, most recently used first."""
        return list(reversed(self._resident))

    @property
    def stats(self) -> CacheStats:
        """The counters now, as a frozen `CacheStats`."""
        return CacheStats(
            hits=self._hits,
            misses=self._misses,
            builds=self._built,
            build_failures=self._build_failures,
            evictions=self._evictions,
            closes=self._closes,
        )

    # ------------------------------------------------------------------- public

    async def slug(self, agent_id: str) -> str:
        """The agent's slug; never loads its config or builds."""
        slot = self._resident.get(agent_id)
        if slot is not None:
            return slot.slug
        return await self._loader.agent_slug(agent_id)

    async def processor(self, agent_id: str) -> Any:
        """The agent's instance, built on first use. Not pinned: use `lease` to hold it."""
        slot = self._resident.get(agent_id)
        if slot is not None:
            self._resident.move_to_end(agent_id)
            self._hits += 1
            if self._on_event is not None:
                self._emit("hit", agent_id)
            return slot.instance
        slot = await self._join(agent_id)
        self._unpin(slot)
        return slot.instance

    @asynccontextmanager
    async def lease(self, agent_id: str) -> AsyncIterator[Any]:
        """The agent's instance, guaranteed open until the block exits."""
        slot = self._resident.get(agent_id)
        if slot is not None:
            self._resident.move_to_end(agent_id)
            self._hits += 1
            slot.pins += 1
            if self._on_event is not None:
                self._emit("hit", agent_id)
        else:
            slot = await self._join(agent_id)
        try:
            yield slot.instance
        finally:
            self._unpin(slot)

    async def invalidate(self, agent_id: str) -> None:
        """Drop the agent's instance (closed now, or at lease release); next use rebuilds."""
        build = self._builds.get(agent_id)
        if build is not None:
            build.stale = True
        slot = self._resident.pop(agent_id, None)
        if slot is None and build is None:
            return
        self._emit("invalidated", agent_id)
        if slot is not None:
            task = self._retire(slot)
            if task is not None:
                await asyncio.shield(task)

    async def aclose(self) -> None:
        """Close every resident instance and every in-flight build's result.

        Builds in flight are waited for (not cancelled: a builder cancelled
        half-way could leak what it had made), their instances closed and
        their waiters given `CacheClosedError`; a builder that never returns
        therefore holds `aclose()` too. Leased instances close when their
        lease ends. The cache stays usable.
        """
        builds = list(self._builds.values())
        for build in builds:
            build.closed = True
        slots = list(self._resident.values())
        self._resident.clear()
        for slot in slots:
            self._retire(slot)
        self._wake()  # builds waiting for room see `closed` and give up
        tasks = [b.task for b in builds if b.task is not None]
        if tasks:
            await asyncio.wait(tasks)
        while self._closing:
            await asyncio.wait(list(self._closing))

    # ----------------------------------------------------------------- internals

    async def _join(self, agent_id: str) -> _Slot:
        """Wait for the agent's build (starting one if needed); returns a pinned slot."""
        self._misses += 1
        build = self._builds.get(agent_id)
        if build is None:
            loop = asyncio.get_running_loop()
            build = _Build(loop.create_future())
            self._builds[agent_id] = build
            build.task = loop.create_task(self._run_build(agent_id, build))
        build.waiters += 1
        try:
            slot = await asyncio.shield(build.future)
        except asyncio.CancelledError:
            fut = build.future
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                fut.result().handoffs -= 1
                self._unpin(fut.result())  # the pin handed to us at install time
            else:
                build.waiters -= 1
            raise
        slot.handoffs -= 1
        self._wake()
        return slot

    async def _run_build(self, agent_id: str, build: _Build) -> None:
        try:
            while True:
                build.stale = False
                cfg = await self._loader.load_config(agent_id)
                await self._reserve(agent_id, build)
                if build.stale:  # invalidated while it waited for room
                    self._release()
                    continue
                try:
                    instance = await self._builder.build(cfg)
                except BaseException:
                    self._release()
                    raise
                finally:
                    build.building = False
                self._built += 1
                slot = _Slot(agent_id, instance, cfg.slug)
                # From here to the end of the iteration nothing awaits: the
                # decision and the bookkeeping are one atomic step.
                if build.closed:
                    self._retire(slot)
                    raise CacheClosedError(
                        f"runtime_cache: the cache was closed while agent {agent_id!r} was "
                        "being built; the instance was closed. Call processor() again."
                    )
                if build.stale:
                    self._retire(slot)
                    continue
                self._install(slot, build)
                return
        except BaseException as exc:
            if not isinstance(exc, CacheClosedError):
                self._build_failures += 1
                self._emit("build_failed", agent_id, error=repr(exc))
            if not build.future.done():
                build.future.set_exception(
                    exc
                    if not isinstance(exc, asyncio.CancelledError)
                    else CacheClosedError(
                        f"runtime_cache: the build of agent {agent_id!r} was cancelled "
                        "(event loop shutting down?); call processor() again."
                    )
                )
                build.future.exception()  # retrieved by waiters, or by nobody: no log noise
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if self._builds.get(agent_id) is build:
                del self._builds[agent_id]

    async def _reserve(self, agent_id: str, build: _Build) -> None:
        """Make room for one more instance alive (see the module's docstring), then take it."""
        loop = asyncio.get_running_loop()
        leased_until: float | None = None  # when waiting for a lease to end gives up
        while self._alive >= self.max_instances:
            if build.closed:
                raise CacheClosedError(
                    f"runtime_cache: the cache was closed while agent {agent_id!r} was "
                    "waiting to be built; nothing was built. Call processor() again."
                )
            victim = next((s for s in self._resident.values() if s.pins == 0), None)
            if victim is not None:
                del self._resident[victim.agent_id]
                self._evictions += 1
                self._emit("evicted", victim.agent_id)
                task = self._retire(victim)
                if task is not None:
                    await asyncio.shield(task)
                continue
            timeout: float | None = None
            if not (
                self._closing
                or any(b.building for b in self._builds.values())
                or any(s.handoffs for s in self._resident.values())
            ):
                # Every instance alive is leased: wait a while for a lease to end, then go
                # over the bound until one does.
                if leased_until is None:
                    leased_until = loop.time() + self.lease_wait
                timeout = leased_until - loop.time()
                if timeout <= 0:
                    break
            room = loop.create_future()
            self._room.append(room)
            try:
                await asyncio.wait((room,), timeout=timeout)
            finally:
                if room in self._room:
                    self._room.remove(room)
        if build.closed:
            raise CacheClosedError(
                f"runtime_cache: the cache was closed while agent {agent_id!r} was "
                "waiting to be built; nothing was built. Call processor() again."
            )
        self._alive += 1
        build.building = True

    def _release(self) -> None:
        self._alive -= 1
        self._wake()

    def _wake(self) -> None:
        room, self._room = self._room, []
        for fut in room:
            if not fut.done():
                fut.set_result(None)

    def _install(self, slot: _Slot, build: _Build) -> None:
        agent_id = slot.agent_id
        del self._builds[agent_id]
        slot.pins = build.waiters
        slot.handoffs = build.waiters
        self._resident[agent_id] = slot
        self._emit("built", agent_id)
        while len(self._resident) > self.max_instances:
            _, victim = self._resident.popitem(last=False)
            self._evictions += 1
            self._emit("evicted", victim.agent_id)
            self._retire(victim)
        build.future.set_result(slot)
        self._wake()  # a build no waiter is left for leaves an unpinned instance

    def _retire(self, slot: _Slot) -> asyncio.Task[None] | None:
        slot.retired = True
        if slot.pins == 0:
            return self._schedule_close(slot)
        return None

    def _unpin(self, slot: _Slot) -> None:
        slot.pins -= 1
        if slot.pins == 0:
            if slot.retired:
                self._schedule_close(slot)
            self._wake()  # an unpinned instance is one a waiting build may evict

    def _schedule_close(self, slot: _Slot) -> asyncio.Task[None] | None:
        if slot.closing:
            return None
        slot.closing = True
        task = asyncio.get_running_loop().create_task(self._close(slot))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        return task

    async def _close(self, slot: _Slot) -> None:
        instance = slot.instance
        closer = getattr(instance, "aclose", None) or getattr(instance, "close", None)
        try:
            if closer is not None:
                result = closer()
                if inspect.isawaitable(result):
                    await result
        except Exception:
            self._log.warning(
                "runtime_cache: closing the instance of agent %r raised; it is dropped anyway",
                slot.agent_id,
                exc_info=True,
            )
        finally:
            self._closes += 1
            self._release()
            self._emit("closed", slot.agent_id)

    def _emit(self, kind: str, agent_id: str, error: str | None = None) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(CacheEvent(kind, agent_id, error))
        except Exception:
            self._log.warning("runtime_cache: on_event hook raised on %s", kind, exc_info=True)
