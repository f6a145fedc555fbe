"""A Streamable HTTP MCP server for the tests (the official SDK's MCPServer), on loopback.

`served()` runs it with uvicorn on 127.0.0.1 and a port of the kernel's choosing, in the
test's own loop, and yields its URL; its tool `authorization` answers with the digest of
the Authorization header it was sent, so a test compares without showing the header.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.mcpserver import Context, MCPServer


def app() -> Any:
    server = MCPServer("httpbox")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def authorization(ctx: Context) -> str:  # type: ignore[type-arg]
        """The sha256 of the Authorization header this call came with ("" when none)."""
        request = ctx.request_context.request
        said = request.headers.get("authorization", "") if request is not None else ""
        return hashlib.sha256(said.encode()).hexdigest() if said else ""

    return server.streamable_http_app()


@contextlib.asynccontextmanager
async def served() -> AsyncIterator[str]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn serves, never refused
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    config = uvicorn.Config(app(), lifespan="on", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):  # at most 5 s
            if server.started:
                break
            await asyncio.sleep(0.01)
        yield url
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()
