"""RuntimeCache: one test per rule of DESIGN.md's RuntimeCache section."""

from __future__ import annotations

import asyncio
import logging

import pytest

from coreagent_sdk import DEFAULT_MAX_INSTANCES, CacheEvent, RuntimeCache
from coreagent_sdk.errors import CacheClosedError

from .cache_doubles import Builder, Loader, settle


def make(*ids: str, max_instances: int = 64, kind: str = "aclose", **kw):
    loader, builder = Loader(*ids), Builder(kind=kind, **kw)
    return RuntimeCache(loader, builder, max_instances=max_instances), loader, builder


def assert_resident_or_closed_once(cache: RuntimeCache, builder: Builder) -> None:
    resident = {id(i) for i in [*builder.built] if not i.closed}
    for inst in builder.built:
        assert inst.close_calls <= 1, inst
    live_ids = cache.resident()
    open_instances = [i for i in builder.built if not i.closed]
    assert sorted(i.cfg.id for i in open_instances) == sorted(live_ids), (open_instances, live_ids)
    assert len(resident) == len(open_instances)


async def test_the_first_call_builds_and_later_calls_hit() -> None:
    cache, loader, _ = make("a")
    first = await cache.processor("a")
    assert await cache.processor("a") is first
    stats = cache.stats
    assert (stats.misses, stats.hits, stats.builds) == (1, 1, 1)
    assert loader.loads == 1 and len(cache) == 1


async def test_concurrent_callers_share_a_single_load_and_build() -> None:
    cache, loader, builder = make("a")
    builder.hold("a")
    waiters = [asyncio.create_task(cache.processor("a")) for _ in range(50)]
    await builder.started["a"].wait()
    builder.release("a")
    got = await asyncio.gather(*waiters)
    assert len({id(x) for x in got}) == 1
    assert builder.calls["a"] == 1 and loader.loads == 1


async def test_a_build_error_reaches_every_waiter_and_is_not_cached() -> None:
    cache, _, builder = make("a")
    builder.hold("a")
    builder.fail_next("a")
    waiters = [asyncio.create_task(cache.processor("a")) for _ in range(3)]
    await builder.started["a"].wait()
    builder.release("a")
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and "build of a failed" in str(r) for r in results)
    assert cache.stats.build_failures == 1 and len(cache) == 0
    assert (await cache.processor("a")).cfg.id == "a"  # retried, not the cached error
    assert builder.calls["a"] == 2


async def test_cancelling_one_waiter_does_not_cancel_the_shared_build() -> None:
    cache, _, builder = make("a")
    builder.hold("a")
    first = asyncio.create_task(cache.processor("a"))
    second = asyncio.create_task(cache.processor("a"))
    await builder.started["a"].wait()
    first.cancel()
    await settle()
    builder.release("a")
    assert (await second).cfg.id == "a"
    assert first.cancelled()
    assert builder.calls["a"] == 1 and cache.resident() == ["a"]


async def test_cancelling_every_waiter_still_lands_the_instance_in_the_cache() -> None:
    cache, _, builder = make("a")
    builder.hold("a")
    only = asyncio.create_task(cache.processor("a"))
    await builder.started["a"].wait()
    only.cancel()
    await settle()
    builder.release("a")
    await settle()
    assert cache.resident() == ["a"] and not builder.built[0].closed


async def test_the_least_recently_used_instance_is_evicted_and_closed() -> None:
    cache, _, builder = make("a", "b", "c", max_instances=2)
    a = await cache.processor("a")
    await cache.processor("b")
    await cache.processor("a")  # b is now least recently used
    await cache.processor("c")
    await settle()
    assert cache.resident() == ["c", "a"]
    b = builder.built[1]
    assert b.close_calls == 1 and not a.closed
    assert cache.stats.evictions == 1 and cache.stats.closes == 1


@pytest.mark.parametrize("kind", ["aclose", "close", "async-close"])
async def test_instances_are_closed_through_whichever_close_they_have(kind: str) -> None:
    cache, _, builder = make("a", "b", max_instances=1, kind=kind)
    await cache.processor("a")
    await cache.processor("b")
    await settle()
    assert builder.built[0].close_calls == 1


async def test_an_instance_without_a_close_method_is_simply_dropped() -> None:
    class Bare:
        async def build(self, cfg):
            return object()

    cache = RuntimeCache(Loader("a", "b"), Bare(), max_instances=1)
    await cache.processor("a")
    await cache.processor("b")
    await settle()
    assert cache.resident() == ["b"] and cache.stats.closes == 1


async def test_a_miss_into_a_full_cache_closes_the_evicted_instance_before_building() -> None:
    cache, _, builder = make("a", "b", max_instances=1)
    builder.hold("a")
    builder.hold("b")
    wait_a = asyncio.create_task(cache.processor("a"))
    wait_b = asyncio.create_task(cache.processor("b"))
    await builder.started["a"].wait()
    await settle()
    # a's build holds the only room: b's build waits for it instead of starting a second.
    assert not builder.started["b"].is_set()
    builder.release("a")
    a = await wait_a
    await builder.started["b"].wait()
    # a was evicted and closed before b's builder ran: never two alive at once.
    assert a.close_calls == 1 and cache.alive == 1
    builder.release("b")
    b = await wait_b
    await settle()
    assert a.cfg.id == "a" and b.cfg.id == "b"
    assert cache.resident() == ["b"] and not b.closed
    assert_resident_or_closed_once(cache, builder)


async def test_an_instance_is_handed_to_its_waiter_open_even_with_a_miss_queued_behind_it() -> None:
    cache, _, builder = make("a", "b", max_instances=1)
    builder.hold("a")

    async def first() -> tuple[object, bool]:
        got = await cache.processor("a")
        return got, got.closed

    wait_a = asyncio.create_task(first())
    await builder.started["a"].wait()
    builder.release("a")
    # Ask for b in the same loop turn a's build completes in: it must not evict a first.
    wait_b = asyncio.create_task(cache.processor("b"))
    handed, closed_when_handed = await wait_a
    assert handed.cfg.id == "a"
    assert not closed_when_handed
    await wait_b
    await settle()
    assert_resident_or_closed_once(cache, builder)


async def test_a_build_that_finishes_after_invalidate_is_closed_and_rebuilt() -> None:
    cache, loader, builder = make("a")
    builder.hold("a")
    waiter = asyncio.create_task(cache.processor("a"))
    await builder.started["a"].wait()
    loader.add("a", persona="new persona")
    await cache.invalidate("a")
    builder.release("a")
    got = await waiter
    await settle()
    stale = builder.built[0]
    assert stale.close_calls == 1
    assert got is builder.built[1] and got.cfg.persona == "new persona"
    assert cache.resident() == ["a"]
    assert_resident_or_closed_once(cache, builder)


async def test_a_build_that_finishes_after_aclose_is_closed_and_its_waiters_told() -> None:
    cache, _, builder = make("a")
    builder.hold("a")
    waiter = asyncio.create_task(cache.processor("a"))
    await builder.started["a"].wait()
    closing = asyncio.create_task(cache.aclose())
    await settle()
    builder.release("a")
    await closing
    with pytest.raises(CacheClosedError, match="closed while agent 'a' was being built"):
        await waiter
    assert builder.built[0].close_calls == 1 and len(cache) == 0
    assert (await cache.processor("a")).cfg.id == "a"  # reusable after aclose


async def test_invalidate_closes_now_and_the_next_call_uses_the_current_config() -> None:
    cache, loader, _ = make("a")
    first = await cache.processor("a")
    loader.add("a", persona="v2")
    await cache.invalidate("a")
    assert first.close_calls == 1 and len(cache) == 0
    assert (await cache.processor("a")).cfg.persona == "v2"


async def test_a_lease_keeps_its_instance_open_across_eviction() -> None:
    cache, _, _ = make("a", "b", max_instances=1)
    async with cache.lease("a") as held:
        await cache.processor("b")
        await settle()
        assert cache.resident() == ["b"]
        assert not held.closed
    await settle()
    assert held.close_calls == 1


async def test_a_lease_keeps_its_instance_open_across_invalidate() -> None:
    cache, _, _ = make("a")
    async with cache.lease("a") as held:
        await cache.invalidate("a")
        assert not held.closed and len(cache) == 0
    await settle()
    assert held.close_calls == 1


async def test_a_lease_on_a_miss_is_pinned_from_the_moment_it_is_built() -> None:
    cache, _, _ = make("a", "b", max_instances=1)
    async with cache.lease("a") as held, cache.lease("b"):
        await settle()
        assert not held.closed
    await settle()
    assert held.close_calls == 1 and cache.resident() == ["b"]


async def test_aclose_closes_every_resident_instance_and_leased_ones_at_release() -> None:
    cache, _, builder = make("a", "b", "c")
    await cache.processor("a")
    await cache.processor("b")
    async with cache.lease("c") as leased:
        await cache.aclose()
        assert len(cache) == 0
        assert [i.close_calls for i in builder.built[:2]] == [1, 1]
        assert not leased.closed
    await settle()
    assert leased.close_calls == 1


async def test_a_close_that_raises_is_logged_and_not_raised(caplog) -> None:
    cache, _, builder = make("a", "b", max_instances=1, close_error=True)
    await cache.processor("a")
    with caplog.at_level(logging.WARNING, logger="coreagent_sdk.runtime_cache"):
        assert (await cache.processor("b")).cfg.id == "b"
        await settle()
    assert builder.built[0].close_calls == 1
    assert any("closing the instance of agent 'a' raised" in r.getMessage() for r in caplog.records)


async def test_slug_never_loads_the_config_or_builds() -> None:
    cache, loader, builder = make("a")
    assert await cache.slug("a") == "slug-a"
    assert loader.loads == 0 and builder.built == []


async def test_resident_lists_most_recently_used_first() -> None:
    cache, _, _ = make("a", "b", "c")
    for agent in ("a", "b", "c", "a"):
        await cache.processor(agent)
    assert cache.resident() == ["a", "c", "b"]


@pytest.mark.parametrize("bad", [0, -1])
def test_a_non_positive_capacity_means_the_default(bad: int) -> None:
    assert (
        RuntimeCache(Loader(), Builder(), max_instances=bad).max_instances == DEFAULT_MAX_INSTANCES
    )


async def test_the_event_hook_sees_builds_hits_evictions_closes_and_failures() -> None:
    events: list[CacheEvent] = []
    loader, builder = Loader("a", "b"), Builder()
    cache = RuntimeCache(loader, builder, max_instances=1, on_event=events.append)
    await cache.processor("a")
    await cache.processor("a")
    await cache.processor("b")
    await settle()
    await cache.invalidate("b")
    builder.fail_next("a")
    with pytest.raises(RuntimeError):
        await cache.processor("a")
    kinds = [(e.kind, e.agent_id) for e in events]
    assert kinds == [
        ("built", "a"),
        ("hit", "a"),
        ("evicted", "a"),  # room made, and the evicted instance closed, before b is built
        ("closed", "a"),
        ("built", "b"),
        ("invalidated", "b"),
        ("closed", "b"),
        ("build_failed", "a"),
    ]
    assert events[-1].error is not None and "build of a failed" in events[-1].error


async def test_a_hook_that_raises_does_not_break_the_cache() -> None:
    def broken(event: CacheEvent) -> None:
        raise ValueError("hook bug")

    cache = RuntimeCache(Loader("a"), Builder(), on_event=broken)
    assert (await cache.processor("a")).cfg.id == "a"
