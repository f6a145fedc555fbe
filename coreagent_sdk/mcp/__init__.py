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
"""

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

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
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
