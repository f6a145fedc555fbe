"""MCP (the Model Context Protocol) for fleets: agents that use MCP servers' tools.

A `Skill` carries MCP servers as it carries Python tools::

    from coreagent_sdk.mcp import StdioServer, read_mcp_json

    files = Skill(
        "files",
        mcp_servers=[StdioServer("files", command="python", args=["files_server.py"])],
        secrets=["FILES_TOKEN"],
    )
    Skill("project", mcp_servers=read_mcp_json())  # .agents/mcp.json, then ~/.agents/mcp.json

The servers start with the agent (`ModelAgent.astart`, which an `AgentBuilder`
awaits), each with its own skill's secrets and none of the fleet's
credentials; their tools reach the model as ``<server>_<tool>``, the daemon's
names; each call asks the agent's gate, is bounded in time and bytes, and is
recorded as a tool step. The official MCP SDK (``pip install
'coreagent-sdk[mcp]'``) is imported only when a server starts.

And the other way, a fleet's agents served as MCP servers, so any MCP host can call them::

    from coreagent_sdk.mcp import AgentMCPServer, FleetMCPServer

    await AgentMCPServer(my_agent, name="invoices").run_stdio()   # one agent, one tool
    async with FleetMCPServer(CallPeer(HubDirectory(hub))).serve_http(port=8765) as url:
        ...                                                        # a fleet: a tool a peer

or from a shell, as an MCP host's config starts it: ``python -m coreagent_sdk.mcp
my_agents:invoices``. The serving names load the MCP SDK when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._config import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_MAX_TOOLS,
    DEFAULT_START_TIMEOUT,
    MCP_FILE_NAME,
    HttpServer,
    McpServer,
    StdioServer,
    parse_mcp_json,
    read_mcp_json,
)
from ._namespace import MAX_TOOL_NAME, namespaced, sanitize_prefix
from ._toolset import McpServerStatus, McpTool

if TYPE_CHECKING:
    from ._serve_agent import AgentMCPServer
    from ._serve_fleet import DEFAULT_POLL_INTERVAL, FleetMCPServer
    from ._serve_roster import DEFAULT_CARD_TIMEOUT, DEFAULT_MAX_SERVED_TOOLS
    from ._serve_server import MAX_CHUNK_CHARS
    from ._serve_tools import REQUEST_SCHEMA, RESULT_SCHEMA, ServedTool

# The serving half, loaded on first use: its modules import the MCP SDK, which declaring a
# skill's servers must not.
_SERVING = {
    "AgentMCPServer": "._serve_agent",
    "DEFAULT_CARD_TIMEOUT": "._serve_roster",
    "DEFAULT_MAX_SERVED_TOOLS": "._serve_roster",
    "DEFAULT_POLL_INTERVAL": "._serve_fleet",
    "FleetMCPServer": "._serve_fleet",
    "MAX_CHUNK_CHARS": "._serve_server",
    "REQUEST_SCHEMA": "._serve_tools",
    "RESULT_SCHEMA": "._serve_tools",
    "ServedTool": "._serve_tools",
}


def __getattr__(name: str) -> Any:
    where = _SERVING.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(where, __name__), name)
    except ImportError as exc:
        if exc.name is None or exc.name.split(".")[0] not in ("mcp", "mcp_types"):
            raise
        raise ImportError(
            f"coreagent_sdk.mcp: {name} needs the 'mcp' extra: pip install 'coreagent-sdk[mcp]'"
        ) from exc
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CARD_TIMEOUT",
    "DEFAULT_MAX_SERVED_TOOLS",
    "DEFAULT_POLL_INTERVAL",
    "MAX_CHUNK_CHARS",
    "REQUEST_SCHEMA",
    "RESULT_SCHEMA",
    "AgentMCPServer",
    "FleetMCPServer",
    "ServedTool",
    "DEFAULT_MAX_RESTARTS",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_MAX_TOOLS",
    "DEFAULT_START_TIMEOUT",
    "MAX_TOOL_NAME",
    "MCP_FILE_NAME",
    "HttpServer",
    "McpServer",
    "McpServerStatus",
    "McpTool",
    "StdioServer",
    "namespaced",
    "parse_mcp_json",
    "read_mcp_json",
    "sanitize_prefix",
]
