"""A stdio MCP server's process and pipes, bounded: what the SDK's ``stdio_client`` leaves open.

The messages are the SDK's (each line parsed by its ``jsonrpc_message_adapter``,
the session its ``ClientSession``); only the process and the framing are ours,
for three properties the SDK's transport does not hold (mcp 2.3):

- **A line is bounded.** The SDK reads a line whole however long it is, so a
  server that answers 100 MB holds 100 MB (and its parse) in this process.
  Here a line over ``max_line`` bytes closes the connection: the pending call
  fails naming the bound, the server restarts on the next call.
- **No grandchild survives.** The server runs in a session of its own; when
  it is closed, its whole process group is signalled, even when the server
  itself exited cleanly (the SDK signals the group only when the server
  outlives the stdin close, so a child it forked lives on).
- **The daemon's order.** stdin closed, SIGTERM to the group, up to
  ``grace`` seconds, SIGKILL to the group (the daemon's ``Server.Close``).

stderr goes to a file the caller owns, so the last lines of a server that
failed can be quoted.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import IO, Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.message import SessionMessage

__all__ = ["DEFAULT_GRACE", "StdioStreams", "stdio_streams"]

DEFAULT_GRACE = 3.0
"""Seconds between SIGTERM and SIGKILL when a server is closed (the daemon's)."""

_POLL = 0.01
_CHUNK = 65536


class StdioStreams:
    """What `stdio_streams` yields: the session's two streams, the process, why it ended."""

    def __init__(self, read: Any, write: Any, process: anyio.abc.Process) -> None:
        self.read = read
        self.write = write
        self.process = process
        self.overflow: int | None = None  # the bound a line went over, when one did
        self.stopping = False  # we are stopping it: its end is ours, not its own
        self.ended = anyio.Event()  # stdout closed: the server is gone (or cut off)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _exited(process: anyio.abc.Process, seconds: float) -> bool:
    # returncode, polled, not wait(): wait() also waits for the pipes' EOF, which a
    # grandchild holding them would delay for ever; and nothing else says "exited".
    with anyio.move_on_after(seconds):
        while process.returncode is None:  # noqa: ASYNC110 (no event to wait on)
            await anyio.sleep(_POLL)
    return process.returncode is not None


async def stop_process(process: anyio.abc.Process, grace: float) -> None:
    """SIGTERM the process's group, SIGKILL it after `grace` seconds; its pipes closed."""
    with anyio.CancelScope(shield=True):
        if process.stdin is not None:
            with contextlib.suppress(Exception):
                await process.stdin.aclose()
        _signal_group(process.pid, signal.SIGTERM)
        if not await _exited(process, grace):
            _signal_group(process.pid, signal.SIGKILL)
            await _exited(process, grace)
        # The server is gone; what it forked into its group goes with it.
        _signal_group(process.pid, signal.SIGKILL)
        with anyio.move_on_after(grace):
            await process.aclose()


@contextlib.asynccontextmanager
async def stdio_streams(
    command: str,
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    stderr: IO[Any] | int,
    max_line: int,
    grace: float = DEFAULT_GRACE,
    on_end: Callable[[], None] | None = None,
) -> AsyncIterator[StdioStreams]:
    """Start `command` and yield the streams a ``ClientSession`` speaks over; stop it on exit.

    Raises:
        OSError: The command could not be started (not found, not executable).
    """
    process = await anyio.open_process(
        [command, *args], env=dict(env), cwd=cwd, stderr=stderr, start_new_session=True
    )
    read_writer, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    streams = StdioStreams(read, write, process)

    async def reader() -> None:
        assert process.stdout is not None
        buffer = bytearray()
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    buffer += chunk
                    while (end := buffer.find(b"\n")) >= 0:
                        line = bytes(buffer[:end])
                        del buffer[: end + 1]
                        if line.strip():
                            await read_writer.send(_parse(line))
                    if len(buffer) > max_line:
                        streams.overflow = max_line
                        return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            streams.ended.set()
            if on_end is not None:
                on_end()

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield streams
            finally:
                streams.stopping = True
                for stream in (read, write, read_writer, write_reader):
                    stream.close()
                await stop_process(process, grace)
                tg.cancel_scope.cancel()
    finally:
        if process.returncode is None:  # start failed half-way: never leave it running
            await stop_process(process, grace)


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        # Not the whole text: a server's garbage may be long, or hold what it should not.
        return ValueError(f"not a JSON-RPC message ({len(line)} bytes): {str(exc)[:200]}")
