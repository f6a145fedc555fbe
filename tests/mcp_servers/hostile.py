"""A hostile MCP server's listing, written with the official SDK's low-level server.

    python hostile.py many N | names | schema

``many N``: N tools; ``names``: names that collide once namespaced, hold
characters no model accepts, or run past 64 characters; ``schema``: a tool
whose input schema is not an object, beside a good one.
"""

from __future__ import annotations

import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

mode = sys.argv[1]
OBJECT = {"type": "object", "properties": {}}


def tools() -> list[types.Tool]:
    if mode == "many":
        return [types.Tool(name=f"t{i}", input_schema=OBJECT) for i in range(int(sys.argv[2]))]
    if mode == "names":
        names = ["read-file", "read_file", "read.file", "héllo wörld", "n" * 80, "n" * 81, "ok"]
        return [types.Tool(name=n, input_schema=OBJECT) for n in names]
    return [
        types.Tool(name="good", input_schema=OBJECT),
        types.Tool(name="stringly", input_schema={"type": "string"}),
    ]


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=tools())


async def call_tool(ctx, params) -> types.CallToolResult:
    said = types.TextContent(type="text", text=f"called {params.name}")
    return types.CallToolResult(content=[said])


async def main() -> None:
    server = Server("hostile", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
