"""Simulated agent runtimes for the runtime cache: a config loader and a builder."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable

from coreagent_sdk import AgentConfig

__all__ = ["SimulatedBuildError", "SimulatedBuilder", "SimulatedConfigLoader", "SimulatedRuntime"]


class SimulatedBuildError(RuntimeError):
    """A build the simulated builder was told to fail."""


class SimulatedConfigLoader:
    """Agent configs held in memory; `put()` changes one (then `invalidate` to pick it up).

    Attributes:
        loads: How many times a whole config was loaded (`load_config` calls).
    """

    def __init__(self, configs: Iterable[AgentConfig] = ()) -> None:
        self._configs = {c.id: c for c in configs}
        self.loads = 0

    def put(self, cfg: AgentConfig) -> None:
        """Add or replace the config of agent `cfg.id`."""
        self._configs[cfg.id] = cfg

    def _get(self, agent_id: str) -> AgentConfig:
        try:
            return self._configs[agent_id]
        except KeyError:
            raise LookupError(
                f"simulator: unknown agent {agent_id!r} (known: "
                f"{', '.join(sorted(self._configs)) or 'none'}); put() its AgentConfig first"
            ) from None

    async def agent_slug(self, agent_id: str) -> str:
        """The agent's slug (a LookupError naming the known agents, if unknown)."""
        return self._get(agent_id).slug

    async def load_config(self, agent_id: str) -> AgentConfig:
        """The agent's config, counted in `loads`."""
        self.loads += 1
        return self._get(agent_id)


class SimulatedRuntime:
    """A stand-in for an agent runtime: remembers its config and whether it was closed.

    Attributes:
        cfg: The `AgentConfig` it was built from.
        serial: Its build number on its builder (1 for the first).
        closed: Whether it was closed.
        close_calls: How many times `aclose()` was called (the cache calls it once).
    """

    def __init__(self, cfg: AgentConfig, serial: int) -> None:
        self.cfg = cfg
        self.serial = serial
        self.closed = False
        self.close_calls = 0

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"SimulatedRuntime({self.cfg.id!r} #{self.serial}, {state})"

    async def answer(self, prompt: str) -> str:
        """``[slug] prompt``; a RuntimeError once closed."""
        if self.closed:
            raise RuntimeError(f"simulator: runtime of {self.cfg.id!r} is closed")
        return f"[{self.cfg.slug}] {prompt}"

    async def aclose(self) -> None:
        """Close it (counted in `close_calls`)."""
        self.close_calls += 1
        self.closed = True


class SimulatedBuilder:
    """Builds `SimulatedRuntime`s after `latency` seconds; fails at `failure_rate` (seeded).

    Attributes:
        latency: Seconds each build takes.
        failure_rate: The share of builds that fail with `SimulatedBuildError`.
        built: Every runtime built, in order.
        failures: How many builds failed.
    """

    def __init__(
        self, latency: float = 0.0, failure_rate: float = 0.0, seed: int | None = 0
    ) -> None:
        if not 0.0 <= failure_rate <= 1.0:
            raise ValueError(f"simulator: failure_rate must be in [0, 1], got {failure_rate!r}")
        self.latency = latency
        self.failure_rate = failure_rate
        self._rng = random.Random(seed)
        self.built: list[SimulatedRuntime] = []
        self.failures = 0

    async def build(self, cfg: AgentConfig) -> SimulatedRuntime:
        """A new `SimulatedRuntime` for `cfg`, after `latency` (or a simulated failure)."""
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        else:
            await asyncio.sleep(0)
        if self.failure_rate and self._rng.random() < self.failure_rate:
            self.failures += 1
            raise SimulatedBuildError(f"simulator: build of agent {cfg.id!r} failed (simulated)")
        runtime = SimulatedRuntime(cfg, len(self.built) + 1)
        self.built.append(runtime)
        return runtime
