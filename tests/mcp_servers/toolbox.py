"""A small MCP server for the tests, written with the official SDK (MCPServer, once FastMCP).

    python toolbox.py [plain|garbage|fork]

Its tools add numbers, read its own environment, return a result of a given
size, echo what they are given, sleep, and exit mid-call. ``garbage`` writes
lines that are not JSON-RPC to stdout before serving; ``fork`` starts a
grandchild that outlives it unless its process group is killed (its pid in
the file named by $TOOLBOX_GRANDCHILD_PID).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("toolbox")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def getenv(name: str) -> str:
    """The value of one of this server's environment variables ("<unset>" when it has none)."""
    return os.environ.get(name, "<unset>")


@server.tool()
def digest(name: str) -> str:
    """The sha256 of one of its environment variables (to compare without showing it)."""
    return hashlib.sha256(os.environ.get(name, "").encode()).hexdigest()


@server.tool()
def env_names() -> list[str]:
    """The names of this server's environment variables."""
    return sorted(os.environ)


@server.tool()
def big(size: int) -> str:
    """A text of `size` bytes."""
    return "x" * size


@server.tool()
def echo(text: str) -> str:
    """`text`, back."""
    return text


@server.tool()
def nap(seconds: float) -> str:
    """Sleep `seconds`, then answer."""
    time.sleep(seconds)
    return "rested"


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool(annotations={"readOnlyHint": True})
def look() -> str:
    """Change nothing (a read-only tool)."""
    return "seen"


@server.tool()
def die() -> str:
    """Exit in the middle of the call."""
    os._exit(3)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "plain"
    if mode == "garbage":
        sys.stdout.write('this is not json\n{"jsonrpc": "1.0"}\n')
        sys.stdout.flush()
    if mode == "fork":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(os.environ["TOOLBOX_GRANDCHILD_PID"], "w") as f:
            f.write(str(child.pid))
    server.run("stdio")
