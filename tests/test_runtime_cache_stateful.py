"""Random interleavings of the runtime cache's operations, checked against its invariants.

Operations: processor, lease (held across steps), invalidate, aclose, builds
held open (slow) or made to fail, and cancellation of anything in flight.
After every step (once the loop has settled) and at the end:
- no instance is closed twice, and none is handed out closed;
- a leased instance stays open until its lease ends;
- every open instance is resident or leased: nothing leaks;
- at most `max_instances` instances are resident;
- after `aclose()`, every instance not under a lease was closed exactly once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coreagent_sdk import RuntimeCache

from .cache_doubles import Builder, Instance, Loader

AGENTS = ["a", "b", "c", "d"]
MAX_INSTANCES = 2
agents = st.sampled_from(AGENTS)


class CacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.loader = Loader(*AGENTS)
        self.builder = Builder()
        self.cache = RuntimeCache(self.loader, self.builder, max_instances=MAX_INSTANCES)
        self.tasks: list[asyncio.Task[Any]] = []
        self.leases: dict[int, tuple[asyncio.Event, list[Instance]]] = {}
        self.handed_out_closed: list[Instance] = []
        self.lease_saw_closed: list[Instance] = []
        self._ids = 0

    # --- helpers -------------------------------------------------------------

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def settle(self) -> None:
        async def turns() -> None:
            for _ in range(30):
                await asyncio.sleep(0)

        self.run(turns())
        for task in self.tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieve, so failed builds do not log
        self.tasks = [t for t in self.tasks if not t.done()]

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = self.loop.create_task(coro)
        self.tasks.append(task)
        return task

    def held_instances(self) -> list[Instance]:
        return [inst for _, got in self.leases.values() for inst in got]

    # --- operations ----------------------------------------------------------

    @rule(agent=agents)
    def processor(self, agent: str) -> None:
        async def call() -> None:
            inst = await self.cache.processor(agent)
            if inst.closed:
                self.handed_out_closed.append(inst)

        self.spawn(call())
        self.settle()

    @rule(agent=agents)
    def lease(self, agent: str) -> None:
        self._ids += 1
        key, release, got = self._ids, asyncio.Event(), []

        async def hold() -> None:
            try:
                async with self.cache.lease(agent) as inst:
                    if inst.closed:
                        self.handed_out_closed.append(inst)
                    got.append(inst)
                    await release.wait()
                    if inst.closed:
                        self.lease_saw_closed.append(inst)
            finally:
                self.leases.pop(key, None)

        self.leases[key] = (release, got)
        self.spawn(hold())
        self.settle()

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def release_lease(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.leases)))
        self.leases[key][0].set()
        self.settle()

    @rule(agent=agents)
    def invalidate(self, agent: str) -> None:
        self.spawn(self.cache.invalidate(agent))
        self.settle()

    @rule(agent=agents)
    def slow_builds(self, agent: str) -> None:
        if agent not in self.builder._gates:
            self.builder.hold(agent)

    @precondition(lambda self: self.builder._gates)
    @rule(data=st.data())
    def finish_build(self, data: st.DataObject) -> None:
        self.builder.release(data.draw(st.sampled_from(sorted(self.builder._gates))))
        self.settle()

    @rule(agent=agents)
    def failing_build(self, agent: str) -> None:
        self.builder.fail_next(agent)

    @precondition(lambda self: any(not t.done() for t in self.tasks))
    @rule(data=st.data())
    def cancel_something(self, data: st.DataObject) -> None:
        pending = [t for t in self.tasks if not t.done()]
        data.draw(st.sampled_from(pending)).cancel()
        self.settle()

    @rule()
    def aclose(self) -> None:
        # aclose waits for in-flight builds, so let the slow ones finish.
        for agent in list(self.builder._gates):
            self.builder.release(agent)
        self.run(self.cache.aclose())
        self.settle()
        held = {id(i) for i in self.held_instances()}
        for inst in self.builder.built:
            if id(inst) not in held:
                assert inst.close_calls == 1, inst

    # --- invariants ----------------------------------------------------------

    @invariant()
    def nothing_is_closed_twice_or_handed_out_closed(self) -> None:
        assert all(i.close_calls <= 1 for i in self.builder.built)
        assert self.handed_out_closed == []
        assert self.lease_saw_closed == []

    @invariant()
    def at_most_max_instances_are_resident(self) -> None:
        assert len(self.cache) <= MAX_INSTANCES

    @invariant()
    def every_open_instance_is_resident_or_leased(self) -> None:
        held = {id(i) for i in self.held_instances()}
        resident = self.cache.resident()
        unleased_open = [i for i in self.builder.built if not i.closed and id(i) not in held]
        agents_open = [i.cfg.id for i in unleased_open]
        assert len(agents_open) == len(set(agents_open)), unleased_open
        assert set(agents_open) <= set(resident), (unleased_open, resident)

    def teardown(self) -> None:
        try:
            for agent in list(self.builder._gates):
                self.builder.release(agent)
            for release, _ in list(self.leases.values()):
                release.set()
            self.settle()
            for task in self.tasks:
                task.cancel()
            self.settle()
            self.run(self.cache.aclose())
            self.settle()
            assert all(i.close_calls == 1 for i in self.builder.built), self.builder.built
        finally:
            self.loop.close()


CacheMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_random_interleavings_keep_every_instance_resident_leased_or_closed_once = CacheMachine.TestCase
