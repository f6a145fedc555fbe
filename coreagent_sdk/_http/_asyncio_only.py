"""The SDK runs on asyncio only; under another async library, say so with the fix at the call.

Every async call here needs asyncio's running loop (its pooled clients, its
deadlines, the in-process transport's tasks). Under trio (anyio's pytest
plugin runs tests on trio too once trio is installed) asyncio has no loop,
and the call used to fail deep inside with `RuntimeError: no running event
loop`. The public entry points check first, before any coroutine is made,
and name the library that runs and the `anyio_backend` fix.
"""

from __future__ import annotations

import asyncio

import sniffio

from ..errors import AsyncLibraryError

__all__ = ["require_asyncio"]


def require_asyncio(component: str) -> None:
    """Raise `AsyncLibraryError` when the running async library is not asyncio.

    Sync code (no async library at all) passes: whatever it calls reports that
    itself. The check costs one lookup of the running loop on asyncio.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this check's source
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return
    if library == "asyncio":
        return
    raise AsyncLibraryError(
        f"{component}: coreagent-sdk needs asyncio, but this code runs under {library!r}; "
        "run it on asyncio. Under anyio's pytest plugin, pin the backend in conftest.py: "
        "`@pytest.fixture` `def anyio_backend(): return 'asyncio'` (or parametrize it with "
        "'asyncio' only); elsewhere, `asyncio.run(...)` or `anyio.run(..., backend='asyncio')`"
    )
