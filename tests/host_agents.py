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


def _router() -> Any:
    # Imported here so the other agents of this module need no models.
    from coreagent_sdk.host import ModelAgent
    from coreagent_sdk.models import ScriptedModel, when

    return ModelAgent(
        ScriptedModel(
            when("disk").ask("storage", "How full are the disks? {prompt}"),
            when().answer("I route disk questions only."),
        ),
        persona="You route questions to the fleet's specialists.",
    )


model_router = _router()
"""A model-driven router: a scripted model asks `storage` about disks."""


async def asks_stalled(turn: Turn) -> None:
    """Ask the peer "stalled" (which never finishes its turn), then answer what came back."""
    answer = await turn.call_peer("stalled", turn.prompt)
    await turn.say(f"stalled said: {answer}")


async def narrates_then_waits(turn: Turn) -> None:
    """Narrate at once, then take 30 s to answer (a turn a process is killed in)."""
    await turn.narrate(f"working on {turn.prompt}")
    await asyncio.sleep(30)
    await turn.say("done")


async def collector(turn: Turn) -> None:
    """Says how the garbage collector of the process serving it is set (tests of tune_gc)."""
    import gc
    import json

    await turn.say(json.dumps([gc.get_threshold(), gc.get_freeze_count()]))
