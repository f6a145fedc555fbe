"""A loopback server answering every request on a connection `204 No Content`."""

from __future__ import annotations

import asyncio
import contextlib


async def answer_no_content(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """`asyncio.start_server`'s handler: one 204 per request head, until the client leaves."""
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await writer.drain()
    writer.close()
