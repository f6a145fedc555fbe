"""A turn's runtime: leased from the host's `RuntimeCache` for exactly the turn.

The invariant: while an agent's turn runs, the runtime it was handed is open.
The lease pins it in the cache, so an eviction (another agent built past
`max_instances`) or an invalidation during the turn retires it and closes it
only when the turn lets go. A runtime that cannot be built is the turn's
error; what the builder raised goes to the host's `on_agent_error`, never to
the caller (it may name a secret store, or worse).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._agents import Agent, Turn

__all__ = ["RuntimeBuildError", "Runtimes", "run_turn"]


class Runtimes(Protocol):
    """What a host leases runtimes from: a `RuntimeCache`, or anything with its `lease`."""

    def lease(self, agent_id: str) -> AbstractAsyncContextManager[Any]:
        """The agent's runtime, open until the block exits."""
        ...


class RuntimeBuildError(Exception):
    """An agent's runtime could not be built, so its turn could not start."""


class TurnHost(Protocol):
    """What running a turn uses of its host: the agent, or its runtime from a cache."""

    agent_id: str
    behavior: Agent
    runtimes: Runtimes | None


async def run_turn(host: TurnHost, turn: Turn) -> None:
    """Run the host's agent for `turn`, with its runtime leased for the turn when it has any."""
    if host.runtimes is None:
        await host.behavior(turn)
        return
    lease = host.runtimes.lease(host.agent_id)
    try:
        runtime = await lease.__aenter__()
    except Exception as exc:
        # Only the exception's type reaches the caller's turn-error; the rest (the
        # builder's words) goes to on_agent_error through the exception's cause.
        raise RuntimeBuildError(
            f"host: the runtime of agent {host.agent_id!r} could not be built "
            f"({type(exc).__name__}); see the host's on_agent_error or logs"
        ) from exc
    try:
        turn.runtime = runtime
        await host.behavior(turn)
    finally:
        turn.runtime = None
        await lease.__aexit__(None, None, None)
