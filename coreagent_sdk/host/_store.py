"""The host's session store: SQLite on one worker thread, so the event loop never waits on disk.

A daemon keeps its sessions in its event log's database and only their live
half in memory (core-agent `pkg/attach/session_acl_store.go`, the eventlog):
idle eviction frees memory, the row and the log stay, and the next request
resumes the session from them. This store holds, per session, what a resume
needs: who owns it and who else may see it, its usage totals, its last touch,
and the newest `window` event frames (the rest is never replayed, so it is
not kept either).

Every call runs on the store's single worker thread, in the order it was
made: a read made after a write sees it, with nothing awaited in between.
A store made without a path is a private temporary file, created on first
use and removed on close.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import sqlite3
import tempfile
import weakref
from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs

__all__ = ["MIN_SWEEP_PERIOD", "SessionStore", "StoredSession", "sweep_period"]

_log = logging.getLogger("coreagent_sdk.host")
_T = TypeVar("_T")
_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id   TEXT PRIMARY KEY,
    app          TEXT NOT NULL,
    user         TEXT NOT NULL,
    viewers      TEXT NOT NULL,
    contributors TEXT NOT NULL,
    created_at   REAL NOT NULL,
    last_touched REAL NOT NULL,
    tokens_in    INTEGER NOT NULL,
    tokens_out   INTEGER NOT NULL,
    turns        INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq        INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    frame      BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, seq);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""
_SESSION_NUMBER = re.compile(r"s-(\d{1,18})[0-9a-f]{6}")  # s-<counter><6 hex>

MIN_SWEEP_PERIOD = 60.0
"""The shortest interval between idle sweeps, as the daemon floors its ticker (1 min)."""


def sweep_period(idle_timeout: float) -> float:
    """Seconds between idle sweeps: a quarter of the timeout, at least a minute.

    Pins core-agent `pkg/attach/registry.go` `SessionRegistry.SweepIdle`:
    `tick := idleAfter / 4`, floored to `time.Minute`.
    """
    return max(idle_timeout / 4, MIN_SWEEP_PERIOD)


@attrs.frozen
class StoredSession:
    """What the store keeps of a session besides its events: enough to list and resume it."""

    app: str
    session_id: str
    user: str
    viewers: tuple[str, ...]
    contributors: tuple[str, ...]
    created_at: float
    last_touched: float
    tokens_in: int = 0
    tokens_out: int = 0
    turns: int = 0


def _row(values: Sequence[object]) -> StoredSession:
    sid, app, user, viewers, contributors, created, touched, t_in, t_out, turns = values
    return StoredSession(
        app=str(app),
        session_id=str(sid),
        user=str(user),
        viewers=tuple(json.loads(str(viewers))),
        contributors=tuple(json.loads(str(contributors))),
        created_at=float(created),  # type: ignore[arg-type]
        last_touched=float(touched),  # type: ignore[arg-type]
        tokens_in=int(t_in),  # type: ignore[call-overload]
        tokens_out=int(t_out),  # type: ignore[call-overload]
        turns=int(turns),  # type: ignore[call-overload]
    )


class _Db:
    """The connection and every statement; used on the worker thread only."""

    def __init__(self, path: str | None, window: int) -> None:
        self.window = window
        self.temporary = path is None
        if path is None:
            fd, path = tempfile.mkstemp(prefix="coreagent-host-", suffix=".sqlite3")
            os.close(fd)
        else:
            # Owner-only, as mkstemp makes the temporary one: the file names who may see which
            # session and holds what they said (SQLite gives its -wal and -shm the same mode).
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        self.path = path
        # check_same_thread=False only so a finalizer may close it; statements stay on
        # the worker thread.
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise ValueError(
                f"AgentHost: store {path!r} is not a session store ({exc}); name a new file, "
                "or the file an AgentHost wrote before"
            ) from exc

    def _migrate(self) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, _SCHEMA_VERSION):
            raise sqlite3.DatabaseError(f"schema {version}; this host reads {_SCHEMA_VERSION}")
        if version == 0:
            tables = self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise sqlite3.DatabaseError("it holds tables of something else")
        self.conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a crash loses at most the last commits, never the file.
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(_SCHEMA)
        self.conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")

    def counters(self) -> tuple[int, int]:
        """The last event seq and session number used, so a restarted host counts on."""
        seq = self.conn.execute("SELECT max(seq) FROM events").fetchone()[0] or 0
        stored = dict(self.conn.execute("SELECT name, value FROM counters").fetchall())
        return max(seq, stored.get("seq", 0)), stored.get("session", 0)

    def put(self, row: StoredSession, events: list[tuple[int, bytes]]) -> None:
        """Upsert a session's row and add its new events, keeping the newest `window`."""
        conn = self.conn
        conn.execute("BEGIN")
        try:
            conn.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET viewers=excluded.viewers, "
                "contributors=excluded.contributors, last_touched=excluded.last_touched, "
                "tokens_in=excluded.tokens_in, tokens_out=excluded.tokens_out, "
                "turns=excluded.turns",
                (
                    row.session_id,
                    row.app,
                    row.user,
                    json.dumps(list(row.viewers)),
                    json.dumps(list(row.contributors)),
                    row.created_at,
                    row.last_touched,
                    row.tokens_in,
                    row.tokens_out,
                    row.turns,
                ),
            )
            number = _SESSION_NUMBER.fullmatch(row.session_id)
            if number:
                self._count("session", int(number.group(1)))
            if events:
                conn.executemany(
                    "INSERT OR REPLACE INTO events VALUES (?, ?, ?)",
                    [(seq, row.session_id, frame) for seq, frame in events],
                )
                self._count("seq", events[-1][0])
                # Older events are never replayed (the window), so they are not kept.
                conn.execute(
                    "DELETE FROM events WHERE session_id = ? AND seq < (SELECT seq FROM events "
                    "WHERE session_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                    (row.session_id, row.session_id, self.window - 1),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _count(self, name: str, value: int) -> None:
        self.conn.execute(
            "INSERT INTO counters VALUES (?, ?) ON CONFLICT (name) DO UPDATE "
            "SET value = max(value, excluded.value)",
            (name, value),
        )

    def get(self, session_id: str) -> StoredSession | None:
        found = self.conn.execute(
            "SELECT * FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        return _row(found) if found is not None else None

    def events(self, session_id: str) -> list[tuple[int, bytes]]:
        newest = self.conn.execute(
            "SELECT seq, frame FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT ?",
            (session_id, self.window),
        ).fetchall()
        return [(int(seq), bytes(frame)) for seq, frame in reversed(newest)]

    def rows(self, skip: frozenset[str]) -> list[StoredSession]:
        found = self.conn.execute("SELECT * FROM sessions ORDER BY rowid").fetchall()
        return [_row(r) for r in found if r[0] not in skip]

    def delete(self, session_id: str) -> None:
        self.conn.execute("BEGIN")
        self.conn.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
        self.conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()
        if self.temporary:
            _remove(self.path)


def _remove(path: str) -> None:
    for name in (path, path + "-wal", path + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)


def _written(write: concurrent.futures.Future[None]) -> None:
    # Nobody awaits a write: a failure is logged (the session it carried is lost).
    if not write.cancelled() and write.exception() is not None:
        _log.error("AgentHost: a session store write failed: %s", write.exception())


def _finalize(executor: concurrent.futures.ThreadPoolExecutor, db: list[_Db]) -> None:
    # A host dropped without aclose(): close the file (and remove a temporary one).
    executor.shutdown(wait=True)
    if db:
        db[0].close()


class SessionStore:
    """A session store on SQLite (WAL), every statement on one worker thread.

    ``path`` names the file (kept on close, so a host started on it again
    serves its sessions); None makes a private temporary file on first use,
    removed on close. Writes are submitted at once and run in order; reads
    are awaited and see every write made before them.
    """

    def __init__(self, path: str | os.PathLike[str] | None, *, window: int) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.window = window
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._db: list[_Db] = []  # the open connection, once the worker made it
        self._finalizer: weakref.finalize[..., SessionStore] | None = None
        self._failed: BaseException | None = None  # why the file could not be opened

    @property
    def temporary(self) -> bool:
        """True for a private temporary file (no path given)."""
        return self.path is None

    @property
    def opened(self) -> bool:
        """Whether the file exists for this host yet (a temporary one is made on first write)."""
        return self._executor is not None

    def __repr__(self) -> str:
        where = "temporary" if self.path is None else repr(self.path)
        return f"SessionStore({where}, {'open' if self.opened else 'closed'})"

    def _submit(self, fn: Callable[[_Db], _T]) -> concurrent.futures.Future[_T]:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="coreagent-host-store"
            )
            self._finalizer = weakref.finalize(self, _finalize, self._executor, self._db)
            self._executor.submit(self._connect)  # first in line: every call after it has a db
        return self._executor.submit(self._on_db, fn)

    def _connect(self) -> None:
        try:
            self._db.append(_Db(self.path, self.window))
        except (OSError, ValueError, sqlite3.Error) as exc:
            self._failed = exc  # raised again by every call, so the caller sees why

    def _on_db(self, fn: Callable[[_Db], _T]) -> _T:
        if not self._db:
            raise self._failed or RuntimeError("AgentHost: the session store is closed")
        return fn(self._db[0])

    async def _run(self, fn: Callable[[_Db], _T]) -> _T:
        return await asyncio.wrap_future(self._submit(fn))

    async def open(self) -> tuple[int, int]:
        """Open the file (off the loop): the last event seq and session number it used."""
        return await self._run(_Db.counters)

    def put(self, row: StoredSession, events: list[tuple[int, bytes]]) -> None:
        """Write a session's row and its new events (submitted now, run in order)."""
        self._submit(lambda db: db.put(row, events)).add_done_callback(_written)

    def delete(self, session_id: str) -> None:
        """Forget a session and its events (submitted now, run in order)."""
        if self.opened:
            self._submit(lambda db: db.delete(session_id)).add_done_callback(_written)

    async def get(self, session_id: str) -> StoredSession | None:
        """The stored row of a session, or None."""
        if not self.opened:
            return None
        return await self._run(lambda db: db.get(session_id))

    async def events(self, session_id: str) -> list[tuple[int, bytes]]:
        """The newest `window` event frames of a session, oldest first, with their seqs."""
        return await self._run(lambda db: db.events(session_id))

    async def rows(self, skip: frozenset[str] = frozenset()) -> list[StoredSession]:
        """Every stored session not in `skip`, in the order they were first stored."""
        if not self.opened:
            return []
        return await self._run(lambda db: db.rows(skip))

    async def aclose(self) -> None:
        """Finish every write, close the file (removing a temporary one); reopens on use."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        await asyncio.get_running_loop().run_in_executor(None, _finalize, executor, self._db)
        self._db.clear()
        self._failed = None
