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

__all__ = ["MIN_SWEEP_PERIOD", "SessionStore", "StoreFile", "StoredSession", "sweep_period"]

_log = logging.getLogger("coreagent_sdk.host")
_T = TypeVar("_T")
_SCHEMA_VERSION = 2
# Version 2 keys everything by agent: one file holds every agent of a MultiAgentHost (each
# numbers its own sessions and seqs, and each has a "default"). An AgentHost's key is "".
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    agent        TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    app          TEXT NOT NULL,
    user         TEXT NOT NULL,
    viewers      TEXT NOT NULL,
    contributors TEXT NOT NULL,
    created_at   REAL NOT NULL,
    last_touched REAL NOT NULL,
    tokens_in    INTEGER NOT NULL,
    tokens_out   INTEGER NOT NULL,
    turns        INTEGER NOT NULL,
    PRIMARY KEY (agent, session_id)
);
CREATE TABLE IF NOT EXISTS events (
    agent      TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    frame      BLOB NOT NULL,
    PRIMARY KEY (agent, seq)
);
CREATE INDEX IF NOT EXISTS events_by_session ON events (agent, session_id, seq);
CREATE TABLE IF NOT EXISTS counters (
    agent TEXT NOT NULL,
    name  TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (agent, name)
);
"""
_SESSION_COLUMNS = (
    "session_id, app, user, viewers, contributors, created_at, last_touched, tokens_in, "
    "tokens_out, turns"
)
# Version 1 (coreagent-sdk 0.x's first store) held one AgentHost's sessions, unkeyed: they
# become the AgentHost's (key ""), in their order, with their seqs and counters.
_FROM_V1 = f"""
ALTER TABLE sessions RENAME TO sessions_v1;
ALTER TABLE events RENAME TO events_v1;
ALTER TABLE counters RENAME TO counters_v1;
DROP INDEX IF EXISTS events_by_session;
{_SCHEMA}
INSERT INTO sessions (agent, {_SESSION_COLUMNS})
    SELECT '', {_SESSION_COLUMNS} FROM sessions_v1 ORDER BY rowid;
INSERT INTO events (agent, seq, session_id, frame)
    SELECT '', seq, session_id, frame FROM events_v1 ORDER BY seq;
INSERT INTO counters (agent, name, value) SELECT '', name, value FROM counters_v1;
DROP TABLE sessions_v1;
DROP TABLE events_v1;
DROP TABLE counters_v1;
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


_SELECT_ROW = f"SELECT {_SESSION_COLUMNS} FROM sessions"


class _Db:
    """The connection and every statement; used on the worker thread only."""

    def __init__(self, path: str | None, window: int, shared: bool) -> None:
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
            self._check_owner(shared)
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise ValueError(
                f"AgentHost: store {path!r} is not a session store ({exc}); name a new file, "
                "or the file an AgentHost (or MultiAgentHost) wrote before"
            ) from exc
        except ValueError:
            self.conn.close()
            raise

    def _migrate(self) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, 1, _SCHEMA_VERSION):
            raise sqlite3.DatabaseError(
                f"schema {version}; this host reads 1 and {_SCHEMA_VERSION}: a newer "
                "coreagent-sdk wrote it, serve it with that version"
            )
        if version == 0:
            tables = self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise sqlite3.DatabaseError("it holds tables of something else")
        self.conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a crash loses at most the last commits, never the file.
        self.conn.execute("PRAGMA synchronous=NORMAL")
        if version == _SCHEMA_VERSION:
            return
        # One transaction, the version checked again inside it: two hosts starting on one
        # old file at once migrate it once, and a failure leaves it as it was.
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            now = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if now != _SCHEMA_VERSION:
                script = _FROM_V1 if now == 1 else _SCHEMA
                for statement in script.split(";"):
                    if statement.strip():
                        self.conn.execute(statement)
                self.conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def _check_owner(self, shared: bool) -> None:
        # An AgentHost's sessions are keyed "", a MultiAgentHost's by agent name: a file of
        # the other kind would open with nothing in it, so it is refused with the fix instead.
        other = "agent != ''" if not shared else "agent = ''"
        found = self.conn.execute(f"SELECT agent FROM sessions WHERE {other} LIMIT 1").fetchone()
        if found is None:
            return
        if shared:
            raise ValueError(
                f"MultiAgentHost: store {self.path!r} holds an AgentHost's sessions; serve it "
                "with an AgentHost, or give the MultiAgentHost a file of its own"
            )
        raise ValueError(
            f"AgentHost: store {self.path!r} holds the sessions of a MultiAgentHost's agents "
            f"(such as {found[0]!r}); serve it with that MultiAgentHost, or give the "
            "AgentHost a file of its own"
        )

    def counters(self, agent: str) -> tuple[int, int]:
        """The last event seq and session number `agent` used, so a restarted host counts on."""
        seq = (
            self.conn.execute("SELECT max(seq) FROM events WHERE agent = ?", (agent,)).fetchone()[0]
            or 0
        )
        stored = dict(
            self.conn.execute(
                "SELECT name, value FROM counters WHERE agent = ?", (agent,)
            ).fetchall()
        )
        reserved = stored.get("seq_reserved", 0)  # left by a host that did not close
        return max(seq, stored.get("seq", 0), reserved), stored.get("session", 0)

    def reserve(self, agent: str, seq: int) -> None:
        """Record that `agent` may have sent seqs up to `seq` before their events are written."""
        self._count(agent, "seq_reserved", seq)

    def release(self, agent: str, last_seq: int) -> None:
        """A clean close: the last seq `agent` used is known, the reservation goes."""
        self._count(agent, "seq", last_seq)
        self.conn.execute(
            "DELETE FROM counters WHERE agent = ? AND name = 'seq_reserved'", (agent,)
        )

    def put(self, agent: str, row: StoredSession, events: list[tuple[int, bytes]]) -> None:
        """Upsert a session's row and add its new events, keeping the newest `window`."""
        conn = self.conn
        conn.execute("BEGIN")
        try:
            conn.execute(
                f"INSERT INTO sessions (agent, {_SESSION_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (agent, session_id) DO UPDATE SET viewers=excluded.viewers, "
                "contributors=excluded.contributors, last_touched=excluded.last_touched, "
                "tokens_in=excluded.tokens_in, tokens_out=excluded.tokens_out, "
                "turns=excluded.turns",
                (
                    agent,
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
                self._count(agent, "session", int(number.group(1)))
            if events:
                conn.executemany(
                    "INSERT OR REPLACE INTO events (agent, seq, session_id, frame) "
                    "VALUES (?, ?, ?, ?)",
                    [(agent, seq, row.session_id, frame) for seq, frame in events],
                )
                self._count(agent, "seq", events[-1][0])
                # Older events are never replayed (the window), so they are not kept.
                conn.execute(
                    "DELETE FROM events WHERE agent = ? AND session_id = ? AND seq < (SELECT seq "
                    "FROM events WHERE agent = ? AND session_id = ? ORDER BY seq DESC LIMIT 1 "
                    "OFFSET ?)",
                    (agent, row.session_id, agent, row.session_id, self.window - 1),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _count(self, agent: str, name: str, value: int) -> None:
        self.conn.execute(
            "INSERT INTO counters (agent, name, value) VALUES (?, ?, ?) "
            "ON CONFLICT (agent, name) DO UPDATE SET value = max(value, excluded.value)",
            (agent, name, value),
        )

    def get(self, agent: str, session_id: str) -> StoredSession | None:
        found = self.conn.execute(
            f"{_SELECT_ROW} WHERE agent = ? AND session_id = ?", (agent, session_id)
        ).fetchone()
        return _row(found) if found is not None else None

    def events(self, agent: str, session_id: str) -> list[tuple[int, bytes]]:
        newest = self.conn.execute(
            "SELECT seq, frame FROM events WHERE agent = ? AND session_id = ? "
            "ORDER BY seq DESC LIMIT ?",
            (agent, session_id, self.window),
        ).fetchall()
        return [(int(seq), bytes(frame)) for seq, frame in reversed(newest)]

    def rows(self, agent: str, skip: frozenset[str]) -> list[StoredSession]:
        found = self.conn.execute(
            f"{_SELECT_ROW} WHERE agent = ? ORDER BY rowid", (agent,)
        ).fetchall()
        return [_row(r) for r in found if r[0] not in skip]

    def delete(self, agent: str, session_id: str) -> None:
        self.conn.execute("BEGIN")
        self.conn.execute(
            "DELETE FROM sessions WHERE agent = ? AND session_id = ?", (agent, session_id)
        )
        self.conn.execute(
            "DELETE FROM events WHERE agent = ? AND session_id = ?", (agent, session_id)
        )
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


class StoreFile:
    """A session store file on SQLite (WAL), every statement on one worker thread.

    ``path`` names the file (kept on close, so a host started on it again
    serves its sessions); None makes a private temporary file on first use,
    removed on close. ``shared`` is a `MultiAgentHost`'s file (its agents'
    sessions keyed by name), else an `AgentHost`'s. Writes are submitted at
    once and run in order; reads are awaited and see every write made before
    them. One thread serves every agent of the file, however many there are.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None, *, window: int, shared: bool = False
    ) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.window = window
        self.shared = shared
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._db: list[_Db] = []  # the open connection, once the worker made it
        self._finalizer: weakref.finalize[..., StoreFile] | None = None
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
        return f"StoreFile({where}, {'open' if self.opened else 'closed'})"

    def submit(self, fn: Callable[[_Db], _T]) -> concurrent.futures.Future[_T]:
        """Run `fn` on the worker thread with the connection (opening the file first)."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="coreagent-host-store"
            )
            self._finalizer = weakref.finalize(self, _finalize, self._executor, self._db)
            self._executor.submit(self._connect)  # first in line: every call after it has a db
        return self._executor.submit(self._on_db, fn)

    def _connect(self) -> None:
        try:
            self._db.append(_Db(self.path, self.window, self.shared))
        except (OSError, ValueError, sqlite3.Error) as exc:
            self._failed = exc  # raised again by every call, so the caller sees why

    def _on_db(self, fn: Callable[[_Db], _T]) -> _T:
        if not self._db:
            raise self._failed or RuntimeError("AgentHost: the session store is closed")
        return fn(self._db[0])

    async def run(self, fn: Callable[[_Db], _T]) -> _T:
        """Await `fn` run on the worker thread (after every call submitted before it)."""
        return await asyncio.wrap_future(self.submit(fn))

    async def check(self) -> None:
        """Open a named file now (off the loop), raising why it cannot be served."""
        if not self.temporary:
            await self.run(lambda db: None)

    async def flush(self) -> None:
        """Wait for every write submitted so far (nothing to wait for if never opened)."""
        if self.opened:
            with contextlib.suppress(Exception):  # a failed write was logged already
                await self.run(lambda db: None)

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


class SessionStore:
    """One agent's sessions in a `StoreFile`: what an `AgentHost` keeps and resumes.

    Given a path (or None: a private temporary file), the store has a file of
    its own, closed with it; given a `StoreFile`, it is agent ``agent``'s part
    of that shared file (a `MultiAgentHost`'s), which its owner closes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | StoreFile | None,
        *,
        window: int,
        agent: str = "",
    ) -> None:
        self._owns = not isinstance(path, StoreFile)
        self.file = path if isinstance(path, StoreFile) else StoreFile(path, window=window)
        self.agent = agent

    @property
    def path(self) -> str | None:
        """The file's path (None: a private temporary file)."""
        return self.file.path

    @property
    def temporary(self) -> bool:
        """True for a private temporary file (no path given)."""
        return self.file.temporary

    @property
    def opened(self) -> bool:
        """Whether the file exists for this host yet (a temporary one is made on first write)."""
        return self.file.opened

    def __repr__(self) -> str:
        where = "temporary" if self.path is None else repr(self.path)
        agent = f", agent {self.agent!r}" if self.agent else ""
        return f"SessionStore({where}{agent}, {'open' if self.opened else 'closed'})"

    async def open(self) -> tuple[int, int]:
        """Open the file (off the loop): the last event seq and session number it used."""
        agent = self.agent
        return await self.file.run(lambda db: db.counters(agent))

    def put(self, row: StoredSession, events: list[tuple[int, bytes]]) -> None:
        """Write a session's row and its new events (submitted now, run in order)."""
        agent = self.agent
        self.file.submit(lambda db: db.put(agent, row, events)).add_done_callback(_written)

    def reserve(self, seq: int) -> concurrent.futures.Future[None]:
        """Record seqs up to `seq` as possibly sent (submitted now, run in order)."""
        agent = self.agent
        done = self.file.submit(lambda db: db.reserve(agent, seq))
        done.add_done_callback(_written)
        return done

    def release(self, last_seq: int) -> None:
        """Record the last seq used and drop the reservation (a clean close; in order)."""
        if self.opened:
            agent = self.agent
            self.file.submit(lambda db: db.release(agent, last_seq)).add_done_callback(_written)

    def delete(self, session_id: str) -> None:
        """Forget a session and its events (submitted now, run in order)."""
        if self.opened:
            agent = self.agent
            self.file.submit(lambda db: db.delete(agent, session_id)).add_done_callback(_written)

    async def get(self, session_id: str) -> StoredSession | None:
        """The stored row of a session, or None."""
        if not self.opened:
            return None
        agent = self.agent
        return await self.file.run(lambda db: db.get(agent, session_id))

    async def events(self, session_id: str) -> list[tuple[int, bytes]]:
        """The newest `window` event frames of a session, oldest first, with their seqs."""
        agent = self.agent
        return await self.file.run(lambda db: db.events(agent, session_id))

    async def rows(self, skip: frozenset[str] = frozenset()) -> list[StoredSession]:
        """Every stored session not in `skip`, in the order they were first stored."""
        if not self.opened:
            return []
        agent = self.agent
        return await self.file.run(lambda db: db.rows(agent, skip))

    async def aclose(self) -> None:
        """Finish every write; close a file of its own (a shared one stays open for others)."""
        if self._owns:
            await self.file.aclose()
        else:
            await self.file.flush()
