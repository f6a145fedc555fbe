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


def _with_a_forking_server() -> object:
    """A model agent whose skill's stdio server (toolbox `fork`) leaves a grandchild running.

    The grandchild outlives its server unless the server's process group is signalled: so
    it is still there after the served process exits unless that process closed its
    agent's servers on the way out (its pid is in $TOOLBOX_GRANDCHILD_PID's file).
    """
    import sys
    from pathlib import Path

    from coreagent_sdk.host import ModelAgent
    from coreagent_sdk.mcp import StdioServer
    from coreagent_sdk.models import ScriptedModel, Skill, when

    toolbox = Path(__file__).resolve().parent / "mcp_servers" / "toolbox.py"
    server = StdioServer("box", sys.executable, args=[str(toolbox), "fork"], start_timeout=60)
    return ModelAgent(
        ScriptedModel(when().call("box_pid")), skills=[Skill("box", mcp_servers=[server])]
    )


forks = _with_a_forking_server()
