"""RuntimeCache's bound counts instances alive (built and not yet closed), not only resident.

An instance may be a process (an agent's MCP servers): "at most N" must hold for what is
running, so an evicted instance is closed before the build that evicted it starts.
"""

from __future__ import annotations

import asyncio
import random

from coreagent_sdk import AgentConfig, RuntimeCache

from .cache_doubles import Loader, settle


class Counted:
    """An instance whose close takes time (a server's SIGTERM and grace)."""

    def __init__(self, census: Census, agent_id: str) -> None:
        self.census = census
        self.agent_id = agent_id
        self.closed = False

    async def aclose(self) -> None:
        await asyncio.sleep(self.census.close_delay)
        self.closed = True
        self.census.alive -= 1


class Census:
    """A builder that counts instances alive (built or being built, not yet closed).

    It records the count at the start and at the end of every build, so a bound broken
    for one moment shows.
    """

    def __init__(self, close_delay: float = 0.002, build_delay: float = 0.001) -> None:
        self.close_delay = close_delay
        self.build_delay = build_delay
        self.alive = 0
        self.seen: list[int] = []
        self.builds = 0

    async def build(self, cfg: AgentConfig) -> Counted:
        self.alive += 1  # a process starts the moment its build does
        self.seen.append(self.alive)
        await asyncio.sleep(self.build_delay * random.random())
        self.builds += 1
        self.seen.append(self.alive)
        return Counted(self, cfg.id)


AGENTS = [f"agent-{i}" for i in range(40)]


async def test_instances_alive_never_exceed_the_bound_with_a_slow_close() -> None:
    census = Census(close_delay=0.003)
    cache = RuntimeCache(Loader(*AGENTS), census, max_instances=4)
    for agent in AGENTS * 2:
        async with cache.lease(agent):
            pass
    await cache.aclose()
    assert census.builds == 80 and max(census.seen) == 4
    assert census.alive == 0 and cache.alive == 0


async def test_instances_alive_never_exceed_the_bound_under_concurrent_misses() -> None:
    random.seed(35)
    census = Census()
    cache = RuntimeCache(Loader(*AGENTS), census, max_instances=4)

    async def use(agent: str) -> None:
        async with cache.lease(agent) as got:
            assert not got.closed
            await asyncio.sleep(0.001 * random.random())

    # 3 users at a time at most, fewer than the bound: the bound is always reachable.
    for _ in range(5):
        batch = random.sample(AGENTS, 3)
        await asyncio.gather(*(use(a) for a in batch), *(cache.processor(a) for a in batch))
    tasks = [asyncio.create_task(cache.processor(a)) for a in AGENTS]  # 40 misses at once
    await asyncio.gather(*tasks)
    await cache.aclose()
    assert census.builds >= 40 and max(census.seen) <= 4, census.seen
    assert census.alive == 0 and cache.alive == 0


async def test_a_miss_with_every_instance_leased_builds_over_the_bound_instead_of_waiting() -> None:
    census = Census()
    cache = RuntimeCache(Loader(*AGENTS), census, max_instances=2, lease_wait=0.05)
    release = asyncio.Event()
    held: list[asyncio.Task[None]] = []

    async def hold(agent: str, ready: asyncio.Event) -> None:
        async with cache.lease(agent):
            ready.set()
            await release.wait()

    for agent in AGENTS[:2]:
        ready = asyncio.Event()
        held.append(asyncio.create_task(hold(agent, ready)))
        await ready.wait()
    # Waiting for a lease here could wait forever (a turn that holds its runtime while it
    # calls the agent being built): after lease_wait the cache goes over its bound.
    third = await asyncio.wait_for(cache.processor(AGENTS[2]), 5)
    assert not third.closed and cache.alive == 3
    release.set()
    await asyncio.gather(*held)
    await settle()
    await cache.processor(AGENTS[3])  # room again: back within the bound
    await settle()
    assert cache.alive == 2 and census.alive == 2
    await cache.aclose()
    assert census.alive == 0


async def test_a_miss_with_every_instance_leased_waits_for_a_lease_that_ends_soon() -> None:
    census = Census()
    cache = RuntimeCache(Loader(*AGENTS), census, max_instances=1, lease_wait=5)
    release, ready = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with cache.lease(AGENTS[0]):
            ready.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await ready.wait()
    miss = asyncio.create_task(cache.processor(AGENTS[1]))
    await settle()
    assert not miss.done() and len(census.seen) == 2  # waiting for room, not building
    release.set()  # a turn's lease ends a moment after its answer went out
    await asyncio.wait_for(miss, 5)
    await holder
    assert max(census.seen) == 1  # the bound held: the leased one closed before the build
    await cache.aclose()


async def test_aclose_gives_up_a_build_that_waits_for_room() -> None:
    census = Census(close_delay=0.05)
    cache = RuntimeCache(Loader(*AGENTS), census, max_instances=1)
    await cache.processor(AGENTS[0])
    waiting = asyncio.create_task(cache.processor(AGENTS[1]))  # evicts, awaits a slow close
    await settle()
    await cache.aclose()
    outcome = await asyncio.gather(waiting, return_exceptions=True)
    # Either it was built before the close began and then closed, or it never was.
    assert census.alive == 0 and cache.alive == 0, outcome


async def test_a_multi_agent_host_of_100_agents_keeps_16_runtimes_alive_at_most() -> None:
    from coreagent_sdk import ASGITransport, CallPeer, Peer, RoutingTransport, StaticDirectory
    from coreagent_sdk.host import MultiAgentHost, Turn

    names = [f"agent-{i}" for i in range(100)]
    census = Census(close_delay=0.002)
    cache = RuntimeCache(Loader(*names), census, max_instances=16)

    async def answer(turn: Turn) -> None:
        assert not turn.runtime.closed  # a turn's runtime is open while it runs
        await turn.say(f"ok from {turn.runtime.agent_id}")

    host = MultiAgentHost(runtimes=cache, behavior=answer, session_rate_limit=None)
    for name in names:
        host.add(name)
    routes = RoutingTransport({f"{n}.test": ASGITransport(host.app(n)) for n in names})
    directory = StaticDirectory([Peer(n, f"http://{n}.test") for n in names])
    async with CallPeer(directory, transport=routes, timeout=10) as tool:
        for start in range(0, 200, 8):  # 8 turns at a time, every one past the first 16 a miss
            batch = [names[i % 100] for i in range(start, start + 8)]
            answers = await asyncio.gather(*(tool.acall(peer=p, prompt="hi") for p in batch))
            assert [a.response for a in answers] == [f"ok from {p}" for p in batch]
    await host.aclose()
    assert census.builds == 200 and max(census.seen) <= 16, census.seen
    assert census.alive == 0
