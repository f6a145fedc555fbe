"""A stop asked from any thread at any moment, and kept until what it stops begins.

A host's `stop()` and a `PromptServer`'s `should_exit` are each one. Two ways a host's stop
was lost, and how each holds now:

- asked from another thread: an asyncio.Event set from there raised in asyncio's debug mode
  (and the host served on), and otherwise waited for the loop's next timer, up to the
  server's 1 s tick. The event is set on its own loop's thread.
- asked before serve() made its event (its task not run yet, its store still opening): it
  was dropped and the host served on. It is kept, so ``task = create_task(host.serve());
  host.stop()`` stops as soon as the host has started, as uvicorn's `should_exit` set before
  `serve()` does.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["StopRequest"]


class StopRequest:
    """What `stop()` asks of a host's serve() (or `should_exit` of a server); see the module."""

    def __init__(self) -> None:
        self._asked = False
        self._event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def ask(self) -> None:
        self._asked = True  # before reading the event: begin() sees one or the other
        event, loop = self._event, self._loop
        if event is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nothing waits
                loop.call_soon_threadsafe(event.set)

    @property
    def asked(self) -> bool:
        return self._asked

    def withdraw(self) -> None:
        """Take the ask back (``should_exit = False``): a serve() that begins after runs."""
        self._asked = False

    def begin(self) -> asyncio.Event:
        """The event a serve() waits on; already set if a stop was asked before it began."""
        event = asyncio.Event()
        self._event, self._loop = event, asyncio.get_running_loop()
        if self._asked:
            event.set()
        return event

    def end(self) -> None:
        """The serve() is over: the next one starts unstopped."""
        self._event = self._loop = None
        self._asked = False
