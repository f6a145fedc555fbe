"""A served fleet or agent over stdio: one MCP client, the process that started us.

The connection ends when the client closes our stdin (or dies, which closes
it); the server then closes what it made and the process exits. SIGTERM (and
SIGINT) end it the same way, cleanly, rather than kill it mid-write: what an
agent started (its own MCP servers' processes, say) is closed on the way out.

The SDK's stdio transport reads stdin on a worker thread, which no cancel can
stop: a server told to stop while its client is silent waited for a line that
never came. When stdin is a pipe (as every MCP host starts a server), it is
read here on the event loop instead, so a signal ends the read at once; lines
are bounded as the SDK bounds an HTTP body, and a longer one is dropped as the
SDK drops a line it cannot parse. Any other stdin (a file, a terminal) is left
to the SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

from mcp.server.stdio import stdio_server
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

if TYPE_CHECKING:
    from ._serve_server import ServedTools

__all__ = ["MAX_LINE_BYTES", "run_stdio"]

MAX_LINE_BYTES = DEFAULT_MAX_REQUEST_BODY_SIZE
"""The longest message line read from stdin (the SDK's cap on an HTTP body, 4 MiB)."""


class _PipeLines:
    """stdin's lines, read on the event loop (see the module docstring)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        try:
            line = await self._reader.readline()
        except ValueError:  # over MAX_LINE_BYTES: asyncio dropped what it held
            return "\x00 line over the cap\n"  # parsed by the SDK, refused, dropped
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


@contextlib.asynccontextmanager
async def _stdin_lines() -> AsyncIterator[_PipeLines | None]:
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        yield None
        return
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        yield None
        return
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES, loop=loop)
    pipe = os.fdopen(os.dup(0), "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe
    )
    try:
        yield _PipeLines(reader)
    finally:
        transport.close()  # closes the duplicate, never fd 0 itself


async def run_stdio(served: ServedTools, *, handle_signals: bool = False) -> None:
    """Serve one client on this process's stdin and stdout until it goes (or a signal)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    handled: list[signal.Signals] = []
    signalled: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        signalled.append(sig)
        if task is not None:
            task.cancel()

    if handle_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not on Windows
                loop.add_signal_handler(sig, stop, sig)
                handled.append(sig)
    try:
        async with (
            served,
            _stdin_lines() as lines,
            stdio_server(stdin=cast(Any, lines)) as (read, write),
        ):
            await served.server.run(read, write, served.server.create_initialization_options())
    except asyncio.CancelledError:
        if not signalled:
            raise  # cancelled by our caller, not by a signal: theirs to handle
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
