"""Whole-request deadlines: every public call ends by its deadline, whatever the server does.

Invariant: a call made through this package ends, successfully or with a
typed error, within its deadline plus scheduling slack. httpx's timeouts are
per operation (a server sending one byte every 2 s never trips a 30 s read
timeout) and event streams read with none, so the bound is one wall-clock
deadline around the whole exchange, here.

When an outer deadline already governs (`CallPeer`'s, which covers the
directory lookup and every request of a delegation), inner calls add none of
their own: a stall then ends as the outer call's timeout, at its deadline,
not as an inner error before it. httpx's per-operation timeouts are switched
off under any deadline, so they cannot fire first either.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
from collections.abc import Awaitable, Iterator
from typing import TypeVar

import httpx

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "NO_HTTPX_TIMEOUT", "governed", "outer_deadline", "within"]

DEFAULT_REQUEST_TIMEOUT = 30.0
"""Seconds one request of an `AttachClient` or `HubDirectory` may take, unless told otherwise."""
# Under a deadline, httpx's own per-operation timeouts only get in the way.
NO_HTTPX_TIMEOUT = httpx.Timeout(None)

T = TypeVar("T")

_governed: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "coreagent_governed", default=False
)


def outer_deadline() -> bool:
    """Whether a caller's deadline already bounds whatever runs now."""
    return _governed.get()


@contextlib.contextmanager
def governed() -> Iterator[None]:
    """Mark the enclosed calls as bounded by the caller's own deadline."""
    token = _governed.set(True)
    try:
        yield
    finally:
        _governed.reset(token)


if sys.version_info >= (3, 11):

    async def within(seconds: float, coro: Awaitable[T]) -> T:
        """`await coro`, or asyncio.TimeoutError once `seconds` have passed."""
        async with asyncio.timeout(seconds):
            return await coro

else:  # pragma: no cover - exercised on Python 3.10 only

    async def within(seconds: float, coro: Awaitable[T]) -> T:
        """`await coro`, or asyncio.TimeoutError once `seconds` have passed."""
        return await asyncio.wait_for(coro, seconds)
