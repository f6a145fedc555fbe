"""How a host process runs: `python -m coreagent_sdk.host` on uvloop's event loop where installed.

uvloop (the `uvloop` extra; never required) runs the same asyncio code with its
loop, transports and timers in C: on the wire-speed bench the served host spent
about a third less CPU per delegation on it than on asyncio's own loop. Without it,
or where it does not build (Windows), the host runs on asyncio's loop as before.
`AgentHost.serve()` runs on whatever loop its caller runs (``uvloop.run(host.serve())``
puts a host of your own on uvloop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to its end in a new event loop: uvloop's where installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
