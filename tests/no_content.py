"""Loopback servers for the transport's tests: one that answers `204 No Content`, and a
`asyncio.start_server` whose connections are all closed when the test leaves it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def answer_no_content(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """`asyncio.start_server`'s handler: one 204 per request head, until the client leaves."""
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def loopback_server(handler: Handler) -> AsyncIterator[str]:
    """Serve `handler` on 127.0.0.1 (a free port); yields ``http://127.0.0.1:PORT``.

    Every connection is closed on the way out. Before Python 3.12 a server's close() leaves
    the connections it accepted open, and a handler that has not yet seen its client leave
    when the test ends is cancelled with its loop: its socket was then reported unclosed
    (a ResourceWarning, an error in this suite) by whichever test collected it.
    """
    handlers: dict[asyncio.Task[object], asyncio.StreamWriter] = {}

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers[task] = writer
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await asyncio.sleep(0)  # a handler accepted just now starts: it is then in `handlers`
        # The clients have left (their `async with` ended inside this one): each handler sees
        # its client's end and finishes what it reads; one that does not is closed.
        if handlers:
            await asyncio.wait(handlers, timeout=10)
        for writer in handlers.values():
            writer.close()
        await server.wait_closed()
