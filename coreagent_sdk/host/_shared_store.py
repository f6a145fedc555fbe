"""One session store file for several `AgentHost`s in one process (a simulated fleet's).

Each host keeps its sessions, events and seqs in it under a key of its own (its
name unless given `store_key=`), as a `MultiAgentHost` keeps each agent's under
the agent's name: the same file format, the same contract (an event exists once
its row is committed; see `coreagent_sdk.host._store`). What sharing buys: one
file, one connection and one worker thread for them all, and the writes of every
host made in one turn of the event loop committed together, where a host of its
own makes its own file and thread on its first request.
"""

from __future__ import annotations

import os

from ._session import REPLAY_WINDOW
from ._store import SessionStore, StoreFile

__all__ = ["SharedStore"]


class SharedStore:
    """A session store several `AgentHost`s of this process share, each under its own key.

        from coreagent_sdk.host import AgentHost, SharedStore

        store = SharedStore()  # a private temporary file; or SharedStore("fleet.sqlite3")
        hosts = [AgentHost(name, store=store) for name in ("triage", "billing")]
        ...
        for host in hosts:
            await host.aclose()
        await store.aclose()  # closes the file (removes a temporary one)

    A host's key is its name unless it is given ``store_key=``; while a host
    uses a key (from its making until its `aclose()`), another host given the same
    key is refused with a `ValueError`, so two hosts' sessions never mix. A host
    given a key that a closed host used before finds that host's sessions (a
    named file keeps them across restarts, as a host's own file does). The file
    is the same kind as a `MultiAgentHost`'s (sessions keyed by agent name); a
    single `AgentHost`'s file is refused, and so is the empty key.

    Closing a host flushes its writes but leaves the file open for the others;
    the store's owner closes it last with `aclose()`.

    Args:
        path: The SQLite file (created if missing, held with a lock until
            `aclose()`, kept after it); None is a private temporary file, made on
            first use and removed by `aclose()`.
        synchronous: What each commit survives: "normal" (the default) a killed
            process, "full" a power cut too (docs/guides/host.md).

    Attributes:
        path: The file's path, or None for a private temporary file.
        synchronous: What each commit survives ("normal" or "full").
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, synchronous: str = "normal"
    ) -> None:
        self._file = StoreFile(
            path, window=REPLAY_WINDOW, shared=True, synchronous=synchronous, kind="SharedStore"
        )
        self.path = self._file.path
        self.synchronous = synchronous

    @property
    def temporary(self) -> bool:
        """True for a private temporary file (no path given)."""
        return self._file.temporary

    @property
    def opened(self) -> bool:
        """Whether the file is open (made on the first request of any host using it)."""
        return self._file.opened

    def __repr__(self) -> str:
        where = "temporary" if self.path is None else repr(self.path)
        return f"SharedStore({where}, {'open' if self.opened else 'closed'})"

    def forget(self, key: str) -> None:
        """Delete every session, event and counter stored under `key`, now.

        For a host that is gone for good (a simulated fleet's removed peer): its
        rows would otherwise stay in the file for as long as the file lives.
        Writes this thread's event loop queued are committed first. A host still
        using the key writes under it again afterwards.
        """
        self._file.forget(key)

    def close(self) -> None:
        """`aclose()` for sync code: commit what this thread's loop queued, close the file.

        A write still queued on another event loop is failed (it was never
        acknowledged). Use `aclose()` from async code.
        """
        self._file.close()

    async def aclose(self) -> None:
        """Commit every write and close the file (a temporary one is removed).

        Close the hosts first: a host used again afterwards opens the file again
        (a temporary one anew, empty).
        """
        await self._file.aclose()


def session_store(
    name: str,
    store: str | os.PathLike[str] | SharedStore | None,
    synchronous: str,
    key: str | None,
) -> SessionStore:
    """The `SessionStore` of AgentHost `name`: a file of its own, or its key's part of `store`."""
    if not isinstance(store, SharedStore):
        if key is not None:
            raise ValueError(
                f"AgentHost: store_key={key!r} names a host's part of a SharedStore, but "
                f"store={store!r} is not one; pass store=SharedStore(...), or leave store_key out"
            )
        return SessionStore(store, window=REPLAY_WINDOW, synchronous=synchronous)
    if synchronous == "full" and store.synchronous != "full":
        # The file has one setting: a host asking more of it than it gives is refused (the
        # default, "normal", is met by either).
        raise ValueError(
            f"AgentHost: store_sync='full' asks a disk sync per commit of a SharedStore made "
            f"with synchronous={store.synchronous!r}; set it on the store: "
            "SharedStore(..., synchronous='full')"
        )
    key = name if key is None else key
    if not isinstance(key, str) or not key:
        raise ValueError(
            f"AgentHost: store_key must be a non-empty string (the host's part of the "
            f"SharedStore), got {key!r}; leave it out to use the host's name"
        )
    return SessionStore(store._file, window=REPLAY_WINDOW, agent=key, exclusive=True)
