"""Agents that tests serve with `python -m coreagent_sdk.host tests.host_agents:NAME`."""

from __future__ import annotations

import asyncio
from typing import Any

from coreagent_sdk.host import Turn


async def echo(turn: Turn) -> None:
    """Answer with the prompt."""
    await turn.say(turn.prompt)


async def slow_echo(turn: Turn) -> None:
    """Narrate, take a second, then answer with the prompt (a turn to stop a host in)."""
    await turn.narrate("thinking", tool="wait")
    await asyncio.sleep(1.0)
    await turn.say(turn.prompt)


async def named(turn: Turn) -> None:
    """Answer with the agent's own name and the prompt."""
    await turn.say(f"{turn.agent}: {turn.prompt}")


def _many() -> Any:
    from coreagent_sdk.host import MultiAgentHost

    return MultiAgentHost({"triage": named, "billing": named, "search": named})


many = _many()
"""Three agents in one host (`python -m coreagent_sdk.host tests.host_agents:many`)."""
