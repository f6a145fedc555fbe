"""Running coroutines from synchronous code, including inside Jupyter's running loop."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion from synchronous code and return its result.

    Outside an event loop this is `asyncio.run`. Inside a running loop (a
    Jupyter cell, an async test calling sync code) asyncio forbids nesting, so
    nest-asyncio is applied to that loop only, then, and the coroutine runs on
    it: the caller's loop keeps its clients, pools and tasks.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import nest_asyncio

    nest_asyncio.apply(loop)
    return loop.run_until_complete(coro)
