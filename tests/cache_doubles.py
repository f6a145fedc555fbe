"""Test doubles for the runtime cache: a loader, a builder whose builds can be held, instances."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from coreagent_sdk import AgentConfig


class Instance:
    """What a builder returns; counts its closes. `kind` picks the close method it offers."""

    def __init__(
        self, cfg: AgentConfig, serial: int, kind: str = "aclose", close_error: bool = False
    ) -> None:
        self.cfg = cfg
        self.serial = serial
        self.close_calls = 0
        self.close_error = close_error
        if kind == "aclose":
            self.aclose = self._aclose
        elif kind == "close":
            self.close = self._close_sync
        elif kind == "async-close":
            self.close = self._aclose

    @property
    def closed(self) -> bool:
        return self.close_calls > 0

    def _close_sync(self) -> None:
        self.close_calls += 1
        if self.close_error:
            raise RuntimeError("close failed")

    async def _aclose(self) -> None:
        await asyncio.sleep(0)
        self._close_sync()

    def __repr__(self) -> str:
        return f"Instance({self.cfg.id}#{self.serial}, closes={self.close_calls})"


class Loader:
    def __init__(self, *ids: str) -> None:
        self.configs = {i: AgentConfig(id=i, slug=f"slug-{i}", persona=f"I am {i}") for i in ids}
        self.loads = 0
        self.slug_calls = 0

    def add(self, agent_id: str, **changes: str) -> None:
        self.configs[agent_id] = AgentConfig(id=agent_id, slug=f"slug-{agent_id}", **changes)

    async def agent_slug(self, agent_id: str) -> str:
        self.slug_calls += 1
        return self.configs[agent_id].slug

    async def load_config(self, agent_id: str) -> AgentConfig:
        self.loads += 1
        await asyncio.sleep(0)
        return self.configs[agent_id]


class Builder:
    """Builds `Instance`s. `hold(id)` makes the next builds of id wait for `release(id)`."""

    def __init__(self, kind: str = "aclose", close_error: bool = False) -> None:
        self.kind = kind
        self.close_error = close_error
        self.built: list[Instance] = []
        self.calls: defaultdict[str, int] = defaultdict(int)
        self.failures: dict[str, int] = {}
        self._gates: dict[str, asyncio.Event] = {}
        self.started: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def hold(self, agent_id: str) -> None:
        self._gates[agent_id] = asyncio.Event()

    def release(self, agent_id: str) -> None:
        self._gates.pop(agent_id).set()

    def fail_next(self, agent_id: str, times: int = 1) -> None:
        self.failures[agent_id] = times

    async def build(self, cfg: AgentConfig) -> Instance:
        self.calls[cfg.id] += 1
        self.started[cfg.id].set()
        gate = self._gates.get(cfg.id)
        if gate is not None:
            await gate.wait()
        else:
            await asyncio.sleep(0)
        if self.failures.get(cfg.id):
            self.failures[cfg.id] -= 1
            raise RuntimeError(f"build of {cfg.id} failed")
        made = Instance(cfg, len(self.built) + 1, self.kind, self.close_error)
        self.built.append(made)
        return made


async def settle(rounds: int = 20) -> None:
    """Let scheduled tasks (closes, waiters) run; a bounded number of loop turns."""
    for _ in range(rounds):
        await asyncio.sleep(0)
