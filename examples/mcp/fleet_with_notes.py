"""A fleet whose router delegates to a specialist that uses the notes MCP server's tools.

    python examples/mcp/fleet_with_notes.py

A ScriptedModel plays both models, so it runs offline; swap in OpenAIChatModel or
AnthropicModel and nothing else changes.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
import tempfile

from coreagent_sdk.host import ModelAgent
from coreagent_sdk.mcp import StdioServer
from coreagent_sdk.models import ScriptedModel, Skill, when
from simulator import Fleet

HERE = pathlib.Path(__file__).parent


async def main() -> None:
    folder = tempfile.mkdtemp(prefix="notes-")
    notes = StdioServer(
        "notes",
        command=sys.executable,
        args=[str(HERE / "notes_server.py")],
        env={"NOTES_DIR": folder},
    )
    skill = Skill(
        "notes",
        mcp_servers=[notes],
        secrets=["NOTES_TOKEN"],
        instructions="Keep the team's notes with the notes_* tools.",
    )
    keeper = ModelAgent(
        ScriptedModel(
            when("remember")
            .call("notes_add", topic="deploys", line="{prompt}")
            .call("notes_read", topic="deploys")
        ),
        skills=[skill],
        secrets={"NOTES_TOKEN": "notes-token-0c9e2b7a41"},
    )
    router = ModelAgent(ScriptedModel(when().ask("keeper", "{prompt}")), persona="Route.")

    fleet = Fleet()
    fleet.add_peer("router", router)
    fleet.add_peer("keeper", keeper)
    try:
        await keeper.astart()  # an AgentBuilder does this as it builds the runtime
        print([t.name for t in keeper.mcp_tools])
        result = await fleet.call_peer(timeout=60).acall(
            peer="router", prompt="remember: the 14:00 deploy moved to 15:00"
        )
        print(result.response)
        print(fleet.calls.tree())
    finally:
        await fleet.aclose()  # stops the notes server: no process is left


if __name__ == "__main__":
    asyncio.run(main())
