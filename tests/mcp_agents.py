"""Agents the MCP server's tests serve by `module:attribute`, in processes of their own."""

from __future__ import annotations

from coreagent_sdk.host import Turn


async def helper(turn: Turn) -> None:
    """Streams two chunks, then answers with what it was asked."""
    await turn.chunk("thinking ")
    await turn.chunk("harder")
    await turn.say(f"you asked: {turn.prompt}")


async def slow(turn: Turn) -> None:
    """Takes a minute to answer: a call to it is in flight until the test ends it."""
    await turn.sleep(60)
    await turn.say("too late")


async def prints(turn: Turn) -> None:
    """Prints to stdout mid-turn, as careless agent code does, then answers."""
    print("a stray line on stdout", flush=True)
    await turn.say("answered")
