"""Behaviours for simulated agents: `from simulator import behaviors`.

A behaviour is an agent of the agent host (`coreagent_sdk.host.Agent`): an
async function of a `Turn`. These are the scripted ones a simulated daemon
runs; the host runs any of them, or your own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from coreagent_sdk.host import (
    DEFAULT_MAX_PEER_CALLS,
    DEFAULT_MAX_TOOL_ROUNDS,
    Agent,
    ModelAgent,
    Turn,
)
from coreagent_sdk.models import Model, Skill, Tool

from ._delegation import delegate, fan_out, join_answers
from ._replay import replay

__all__ = [
    "Behavior",
    "Turn",
    "custom",
    "delegate",
    "drop_stream",
    "echo",
    "fail",
    "fan_out",
    "join_answers",
    "model",
    "narrate",
    "never_finish",
    "replay",
    "reply",
    "slow",
    "stream",
]

Behavior = Agent
"""What a simulated agent does with a prompt: an async function of a `Turn`."""


def echo() -> Behavior:
    """Answer with the prompt itself."""

    async def run(turn: Turn) -> None:
        await turn.say(turn.prompt)

    return run


def reply(text: str) -> Behavior:
    """Answer with a fixed text."""

    async def run(turn: Turn) -> None:
        await turn.say(text)

    return run


def narrate(steps: Sequence[str], answer: str, tool: str = "kubectl") -> Behavior:
    """Narrate each step with a tool call and its result, then answer."""

    async def run(turn: Turn) -> None:
        for i, step in enumerate(steps):
            await turn.narrate(step, tool=tool, args={"step": i})
            await turn.tool_result(
                tool, {"output": f"step {i} ok", "secret_args": "not for callers"}
            )
        await turn.say(answer)

    return run


def stream(total_bytes: int, chunk_bytes: int = 1024, char: str = "x") -> Behavior:
    """A long answer of `total_bytes` UTF-8 bytes (repeating `char`), streamed in chunks."""
    if not char:
        raise ValueError("stream: char must be a non-empty string, such as 'x' or 'é'")
    unit = len(char.encode())
    text = char * (total_bytes // unit)
    per_chunk = max(1, chunk_bytes // unit)

    async def run(turn: Turn) -> None:
        for start in range(0, len(text), per_chunk):
            await turn.chunk(text[start : start + per_chunk])
        await turn.say(text)

    return run


def slow(delay: float, then: Behavior | None = None) -> Behavior:
    """Wait `delay` seconds, then behave as `then` (default: echo)."""
    inner = then if then is not None else echo()

    async def run(turn: Turn) -> None:
        await turn.sleep(delay)
        await inner(turn)

    return run


def never_finish(narration: str = "working on it") -> Behavior:
    """Narrate once (with a tool call, so the turn is not over), then never finish."""

    async def run(turn: Turn) -> None:
        await turn.narrate(narration, tool="wait")
        await asyncio.Event().wait()

    return run


def fail(
    kind: str = "unknown", message: str = "simulated failure", retryable: bool = False
) -> Behavior:
    """End the turn with a `turn-error` of this kind."""

    async def run(turn: Turn) -> None:
        await turn.error(kind, message, retryable)

    return run


def drop_stream(after_frames: int = 0) -> Behavior:
    """Send `after_frames` narration events, then close the event streams mid-turn."""

    async def run(turn: Turn) -> None:
        for i in range(after_frames):
            await turn.narrate(f"step {i}", tool="step")
        turn.drop_streams()

    return run


def custom(fn: Callable[[Turn], Awaitable[str | None]]) -> Behavior:
    """Your own behaviour: `fn(turn)` may speak through the turn; a returned str is the answer."""

    async def run(turn: Turn) -> None:
        answer = await fn(turn)
        if answer is not None:
            await turn.say(answer)

    return run


def model(
    model: Model,
    *,
    tools: Iterable[Callable[..., Any] | Tool] = (),
    persona: str = "",
    skills: Iterable[Skill] = (),
    secrets: Mapping[str, str] | None = None,
    max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
    max_peer_calls: int = DEFAULT_MAX_PEER_CALLS,
    turn_timeout: float | None = None,
) -> Behavior:
    """A peer driven by `model`: the daemon's loop (`coreagent_sdk.host.ModelAgent`).

        fleet.add_peer("router", behaviors.model(ScriptedModel(when("disk").ask("storage"))))

    The model delegates by name with `call_peer` (through the fleet, so
    `fleet.calls` records each delegation under the turn that made it) and
    calls `tools`; swap the `ScriptedModel` for a real model and nothing else
    changes.
    """
    return ModelAgent(
        model,
        persona=persona,
        tools=tools,
        skills=skills,
        secrets=secrets,
        max_tool_rounds=max_tool_rounds,
        max_peer_calls=max_peer_calls,
        turn_timeout=turn_timeout,
    )
