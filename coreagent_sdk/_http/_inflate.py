"""Bodies decoded in bounded steps: a compressed answer costs bounded memory and time.

Invariant: whatever `Content-Encoding` a server sends, no single step of
decoding produces more than `STEP` bytes, and the event loop gets a turn
between steps, so a decompression bomb neither grows memory past what the
reader keeps nor holds the loop past a deadline. httpx's own decoders inflate
each network read whole (64 KiB of gzip can become 64 MiB in one call);
bodies are therefore read raw and inflated here.

Only what this package asks for is accepted: `gzip` and `deflate` on JSON
answers, nothing on event streams (which ask for `identity`, and are still
inflated here, in steps, if a server compresses them anyway). Any other
encoding is a `ProtocolError` naming it.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator

import httpx

from ..errors import ProtocolError

__all__ = ["ACCEPT_ENCODING", "STEP", "body_chunks"]

ACCEPT_ENCODING = "gzip, deflate"
STEP = 64 * 1024

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _coding(response: httpx.Response) -> str | None:
    codings = [
        c.strip().lower()
        for c in response.headers.get("content-encoding", "").split(",")
        if c.strip() and c.strip().lower() != "identity"
    ]
    if not codings:
        return None
    if len(codings) == 1 and codings[0] in _WBITS:
        return str(codings[0])
    shown = ", ".join(repr(c[:40]) for c in codings[:4])
    raise ProtocolError(
        f"attach: the answer from {response.url.host!r} is encoded as {shown}, which this "
        f"client did not ask for (it accepts {ACCEPT_ENCODING!r}); fix the server or a proxy "
        "in between"
    )


def body_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The decoded body of `response`, in chunks of at most `STEP` bytes when inflated."""
    try:
        # Built from bytes in memory (a mock, a test double): httpx has decoded it already.
        content = response.content
    except httpx.ResponseNotRead:
        pass
    else:
        return _pieces(content)
    coding = _coding(response)
    raw = response.aiter_raw()
    if coding is None:
        return raw
    return _inflated(raw, coding, response.url.host)


async def _pieces(content: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(content), STEP):
        yield content[start : start + STEP]


async def _inflated(raw: AsyncIterator[bytes], coding: str, host: str) -> AsyncIterator[bytes]:
    inflater = zlib.decompressobj(_WBITS[coding])
    first = coding == "deflate"  # "deflate" is zlib-wrapped or raw, depending on the server
    async for chunk in raw:
        data = chunk
        while not inflater.eof:
            try:
                out = inflater.decompress(data, STEP)
            except zlib.error:
                if first:
                    inflater, first = zlib.decompressobj(-zlib.MAX_WBITS), False
                    continue
                raise ProtocolError(
                    f"attach: the {coding} body from {host!r} does not inflate; "
                    "it is corrupt or not what its Content-Encoding says"
                ) from None
            first = False
            data = inflater.unconsumed_tail
            if out:
                yield out
                # A turn for the loop between steps: a deadline can fire here.
                await asyncio.sleep(0)
            # A full step may leave output pending inside zlib even with no input left.
            if not data and len(out) < STEP:
                break
        if inflater.eof:
            return
