"""A served fleet or agent over stdio: one MCP client, the process that started us.

The connection ends when the client closes our stdin (or dies, which closes
it); the server then closes what it made and the process exits. SIGTERM (and
SIGINT) end it the same way, cleanly, rather than kill it mid-write: what an
agent started (its own MCP servers' processes, say) is closed on the way out.

The SDK's stdio transport reads stdin and writes stdout on worker threads. No
cancel can stop a thread's read: a server told to stop while its client was
silent waited for a line that never came. And each message written cost two
hand-offs to a thread (write, flush), a third of the server's CPU at 50 calls
in flight. When stdin and stdout are pipes (as every MCP host starts a
server), both are read and written here on the event loop instead: a signal
ends the read at once, and a write is a write. Lines read are bounded as the
SDK bounds an HTTP body, and a longer one is dropped as the SDK drops a line it
cannot parse. While serving, fd 1 points at stderr and fd 0 at the null device,
as the SDK points them, so a stray `print` (an agent's, a library's) never
corrupts the protocol and no child reads the client's bytes. Any other
stdin or stdout (a file, a terminal) is left to the SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import sys
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


class _PipeWriter:
    """stdout's protocol lines, written on the event loop (see the module docstring)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()  # waits only while the client is not reading


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.asynccontextmanager
async def _stdout_lines() -> AsyncIterator[_PipeWriter | None]:
    if not _is_pipe(1):
        yield None
        return
    loop = asyncio.get_running_loop()
    wire = os.dup(1)
    pipe = os.fdopen(wire, "wb", buffering=0)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pipe)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    sys.stdout.flush()
    os.dup2(2, 1)  # stray output goes to stderr while the protocol has the pipe
    try:
        yield _PipeWriter(writer)
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            await asyncio.wait_for(writer.drain(), 1.0)
        os.dup2(wire, 1)  # fd 1 is the pipe again
        transport.close()


@contextlib.asynccontextmanager
async def _stdin_lines() -> AsyncIterator[_PipeLines | None]:
    if not _is_pipe(0):
        yield None
        return
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES, loop=loop)
    wire = os.dup(0)
    pipe = os.fdopen(wire, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe
    )
    # A child that inherits fd 0 (one an agent starts) reads EOF, never the client's bytes.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        yield _PipeLines(reader)
    finally:
        os.dup2(wire, 0)  # fd 0 is the pipe again
        transport.close()  # closes the duplicate


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
            _stdout_lines() as out,
            stdio_server(stdin=cast(Any, lines), stdout=cast(Any, out)) as (read, write),
        ):
            await served.server.run(read, write, served.server.create_initialization_options())
    except asyncio.CancelledError:
        if not signalled:
            raise  # cancelled by our caller, not by a signal: theirs to handle
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
