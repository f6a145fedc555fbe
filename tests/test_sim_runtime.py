"""The simulator's runtime builder and config loader, driving a real RuntimeCache."""

from __future__ import annotations

import pytest

from coreagent_sdk import AgentConfig, RuntimeCache
from simulator import SimulatedBuilder, SimulatedBuildError, SimulatedConfigLoader

AGENTS = [AgentConfig(id=a, slug=f"agent-{a}") for a in "abc"]


async def test_the_simulated_builder_feeds_the_cache_and_its_runtimes_close() -> None:
    builder = SimulatedBuilder(latency=0.001)
    cache = RuntimeCache(SimulatedConfigLoader(AGENTS), builder, max_instances=2)
    runtime = await cache.processor("a")
    assert await runtime.answer("hi") == "[agent-a] hi"
    await cache.processor("b")
    await cache.processor("c")  # evicts a
    await cache.aclose()
    assert [r.close_calls for r in builder.built] == [1, 1, 1]
    with pytest.raises(RuntimeError, match="runtime of 'a' is closed"):
        await runtime.answer("again")


async def test_a_failure_rate_of_one_fails_every_build_and_the_cache_retries() -> None:
    builder = SimulatedBuilder(failure_rate=1.0)
    cache = RuntimeCache(SimulatedConfigLoader(AGENTS), builder)
    for _ in range(2):
        with pytest.raises(SimulatedBuildError, match="build of agent 'a' failed"):
            await cache.processor("a")
    assert builder.failures == 2 and cache.stats.build_failures == 2


async def test_a_seeded_failure_rate_is_repeatable() -> None:
    async def outcomes(seed: int) -> list[bool]:
        builder = SimulatedBuilder(failure_rate=0.5, seed=seed)
        results = []
        for cfg in AGENTS * 4:
            try:
                await builder.build(cfg)
                results.append(True)
            except SimulatedBuildError:
                results.append(False)
        return results

    first = await outcomes(7)
    assert first == await outcomes(7)
    assert True in first and False in first


async def test_the_loader_names_the_known_agents_for_an_unknown_one() -> None:
    loader = SimulatedConfigLoader(AGENTS)
    with pytest.raises(LookupError, match=r"unknown agent 'z' \(known: a, b, c\)"):
        await loader.load_config("z")
    loader.put(AgentConfig(id="z", slug="zed"))
    assert await loader.agent_slug("z") == "zed"


def test_a_failure_rate_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="failure_rate must be in"):
        SimulatedBuilder(failure_rate=1.5)
