"""An MCP server written in five minutes with the official SDK: a team's notes, by topic.

    python examples/mcp/notes_server.py     # speaks MCP on stdin/stdout

It reads NOTES_DIR (one text file per topic; a folder of its own when unset) and, for
writing, wants NOTES_TOKEN: the secret its skill gives it, and nothing else of the fleet.
"""

from __future__ import annotations

import os
import pathlib
import tempfile

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")
FOLDER = pathlib.Path(os.environ.get("NOTES_DIR") or tempfile.mkdtemp(prefix="notes-"))


@server.tool(annotations={"readOnlyHint": True})
def topics() -> list[str]:
    """The topics there are notes on."""
    return sorted(p.stem for p in FOLDER.glob("*.txt"))


@server.tool(annotations={"readOnlyHint": True})
def read(topic: str) -> str:
    """The notes on one topic ("" when there are none)."""
    path = FOLDER / f"{pathlib.Path(topic).name}.txt"
    return path.read_text(encoding="utf-8") if path.exists() else ""


@server.tool()
def add(topic: str, line: str) -> str:
    """Add one line to a topic's notes (needs NOTES_TOKEN)."""
    if not os.environ.get("NOTES_TOKEN"):
        raise PermissionError("notes: NOTES_TOKEN is not set; writing needs it")
    path = FOLDER / f"{pathlib.Path(topic).name}.txt"
    with path.open("a", encoding="utf-8") as notes:
        notes.write(line.rstrip("\n") + "\n")
    return f"noted under {path.stem}"


if __name__ == "__main__":
    server.run("stdio")
