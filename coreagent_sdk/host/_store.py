"""The host's session store: its event log, as a daemon's `pkg/eventlog` is its own.

What is durable when (the contract every caller of this module relies on):

- **An event exists once its row is committed, and not before.** `append`
  gives an event its seq inside the transaction that writes its row (one
  past the agent's newest, read from the file when the host opens it and
  advanced only by a commit, as the daemon's `gormStream.Append` takes the
  autoincrement key of the row it inserted). The caller learns the seq, and
  may send the frame, only once the commit returned: no frame leaves before
  its commit, and a failed write consumes no seq. Seqs are never reused: a
  delete records the agent's newest seq first, and an insert that meets an
  existing seq fails instead of replacing it.
- **Group commit.** Writes made in one turn of the event loop (every busy
  session appending at once) share one transaction, committed on the loop
  at the end of that turn; each caller waits for the commit that holds its
  own write. Opening the file and checkpointing its write-ahead log run on a
  worker thread.
- **A session exists once its row is committed.** The host answers
  `POST /sessions` 201 after `put` returned, as `registerWithACL` persists
  the ACL row before answering. Usage totals and the last touch are written
  as turns end and at eviction without being waited for: after a kill they
  may lag by the last turn, never the events.
- **An A2A task exists once its row is committed** (`put_task`, awaited by the
  A2A task store of `_a2a` before the SDK sends what it saved): its latest state,
  per agent and caller, in the table `a2a_tasks`.
- **Which crash the commit survives** is the operator's choice
  (``synchronous``): ``"normal"`` (the default; SQLite WAL with
  `synchronous=NORMAL`) survives the process being killed at any moment,
  but a power cut or an OS crash may lose the last commits (never the
  file); ``"full"`` syncs the log to disk at every commit and survives
  both, for more time per commit. A private temporary store (no path) is
  removed on close, so it syncs nothing.
- **One host per file.** Opening a named file takes an exclusive lock on
  it (`flock`) held until close; a second host, in this process or
  another, is refused with the holder's process id, host and command line
  (as the daemon's `AcquireLock` names its holder). The kernel drops the
  lock of a killed process, so a restart is never blocked by it.
- **A failed write fails loudly and leaves no trace.** The transaction is
  rolled back, every caller of that commit gets `StoreWriteError` (in
  SQLite's words), the cause is logged once per outage (and the recovery
  once), and the next write tries again: when the disk has room again,
  writes go on. A store file deleted or replaced under the host is noticed
  at the next write, which fails instead of writing into the void.
- **Startup says what is wrong in one line.** A file that cannot be served
  (missing directory, unreadable, read-only or immutable, corrupted, not a
  SQLite database, a newer schema, another kind of host's file, in use) is
  `StoreOpenError`, a `ValueError` whose message names the file and the fix.

Reads (a resume's row, a replay's pages) run on the same thread in order, so
a read made after a write sees it. The test seam at the write layer is
`StoreFile.write_fault`: called inside every write transaction before it
commits, what it raises fails that commit as a full disk would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import json
import logging
import operator
import os
import re
import socket
import sqlite3
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, as before
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "MIN_SWEEP_PERIOD",
    "SYNCHRONOUS",
    "SessionStore",
    "StoreFile",
    "StoreOpenError",
    "StoreWriteError",
    "StoredSession",
    "sweep_period",
]

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
# Who holds the file (one row), read by a host the lock refuses so it can name the holder.
# Added to version 2 files as they are opened: a version 2 reader ignores it.
_HOLDER = "CREATE TABLE IF NOT EXISTS holder (one INTEGER PRIMARY KEY, process TEXT NOT NULL)"
# The A2A tasks a host answered for (`_a2a`), each one's latest state as the A2A SDK's
# serialized `Task`, per agent and per caller (the SDK's owner). Added to version 2 files as
# they are opened, as `holder`. A replaced row is inserted anew, so rowid order is the order
# of the tasks' last saves (what a restarted host keeps of them, oldest first).
_A2A_TASKS = (
    "CREATE TABLE IF NOT EXISTS a2a_tasks (agent TEXT NOT NULL, owner TEXT NOT NULL, "
    "task_id TEXT NOT NULL, task BLOB NOT NULL, PRIMARY KEY (agent, owner, task_id))"
)
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
SYNCHRONOUS = ("normal", "full")
"""What a named store may sync at each commit (`synchronous=`): see the module's contract."""
_REPLAY_PAGE_BYTES = 64 * 1024  # one replay read: at least one event, at most about this
_TRIM_EVERY = 500  # events a session may gain past the window before its oldest go
# Sessions whose events since their last trim are counted; past it the longest counted is
# trimmed now and let go (one counter per session ever written grew a host without end).
_COUNTED_SESSIONS = 1024

MIN_SWEEP_PERIOD = 60.0
"""The shortest interval between idle sweeps, as the daemon floors its ticker (1 min)."""


def sweep_period(idle_timeout: float) -> float:
    """Seconds between idle sweeps: a quarter of the timeout, at least a minute.

    Pins core-agent `pkg/attach/registry.go` `SessionRegistry.SweepIdle`:
    `tick := idleAfter / 4`, floored to `time.Minute`.
    """
    return max(idle_timeout / 4, MIN_SWEEP_PERIOD)


class StoreOpenError(ValueError):
    """The store file cannot be served; the message names the file and the fix."""


class StoreWriteError(Exception):
    """A write to the store failed (rolled back: nothing of it is stored, no seq is used).

    Its message is SQLite's (or the file check's) own words, such as
    ``database or disk is full``; the host answers 500 or fails the turn with it.
    """


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
_UPSERT_ROW = (
    f"INSERT INTO sessions (agent, {_SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (agent, session_id) DO UPDATE SET viewers=excluded.viewers, "
    "contributors=excluded.contributors, last_touched=excluded.last_touched, "
    "tokens_in=excluded.tokens_in, tokens_out=excluded.tokens_out, turns=excluded.turns"
)


def agent_frame(seq: int, event_json: bytes) -> bytes:
    """The `agent` SSE frame of an event, byte for byte what encoding {seq, event} gives."""
    return b'event: agent\ndata: {"seq":%d,"event":%b}\n\n' % (seq, event_json)


@attrs.frozen
class _Event:
    agent: str
    session_id: str
    event_json: bytes


@attrs.frozen
class _Put:
    agent: str
    row: StoredSession


@attrs.frozen
class _Delete:
    agent: str
    session_id: str


@attrs.frozen
class _TaskPut:
    agent: str
    owner: str
    task_id: str
    task: bytes


@attrs.frozen
class _TaskDelete:
    agent: str
    owner: str
    task_id: str


_Write = _Event | _Put | _Delete | _TaskPut | _TaskDelete


def _holder() -> str:
    """This process as a refused host's message names it: pid, host, command line (bounded)."""
    command = " ".join([os.path.basename(sys.executable), *sys.argv])
    if len(command) > 120:
        command = command[:117] + "..."
    since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"process {os.getpid()} on {socket.gethostname()} ({command}), since {since}"


class _Db:
    """The connection and every statement; used on the worker thread only."""

    def __init__(
        self, path: str | None, window: int, shared: bool, synchronous: str, kind: str
    ) -> None:
        self.window = window
        self.temporary = path is None
        self.kind = kind
        self.lock_fd: int | None = None
        if path is None:
            fd, path = tempfile.mkstemp(prefix="coreagent-host-", suffix=".sqlite3")
            os.close(fd)
        self.path = path
        self.seqs: dict[str, int] = {}  # each agent's last committed seq, read on first use
        # The agents this connection wrote for. A temporary file was made here, so it holds
        # rows of no other agent: a read of one of those is answered without a query (a
        # fleet's 10,000 daemons each read their empty part on their first request).
        self.written: set[str] = set()
        self.unpruned: dict[tuple[str, str], int] = {}  # events added since a session's trim
        self.identity: tuple[int, int] | None = None  # the file's (device, inode) when opened
        self.checkpointer: sqlite3.Connection | None = None  # the worker's own connections
        self.reader: sqlite3.Connection | None = None
        if not self.temporary:
            self._lock()
        try:
            # check_same_thread=False only so a finalizer may close it; statements stay on
            # the worker thread.
            self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            self._unlock()
            raise self._refused(exc) from None
        try:
            self._migrate(synchronous)
            self._check_owner(shared)
            if not self.temporary:
                self.conn.execute("INSERT OR REPLACE INTO holder VALUES (1, ?)", (_holder(),))
                stat = os.stat(path)
                self.identity = (stat.st_dev, stat.st_ino)
        except (sqlite3.Error, OSError) as exc:
            self.close()
            raise self._refused(exc) from None
        except ValueError:
            self.close()
            raise

    # --- opening ----------------------------------------------------------

    def _refused(self, exc: BaseException) -> StoreOpenError:
        """One line naming the file, what is wrong with it, and the fix."""
        path, text = self.path, str(exc)
        if isinstance(exc, PermissionError) or "readonly" in text or "read-only" in text:
            why = f"cannot be written ({text})"
            fix = "make it (and its directory) writable by this user, or name another file"
        elif "not a database" in text:
            why = "is not a SQLite database"
            fix = "name a new file, or the file an AgentHost (or MultiAgentHost) wrote before"
        elif "malformed" in text or "corrupt" in text:
            why = f"is corrupted ({text})"
            fix = "restore it from a backup, or move it aside and start on a new file"
        elif "disk is full" in text or (isinstance(exc, OSError) and exc.errno == 28):
            why = f"cannot be written ({text})"
            fix = "free space on its disk, or name a file on another one"
        elif "unable to open" in text:
            why = f"cannot be opened ({text})"
            fix = "check that it is a file this user may read and write, or name another"
        else:
            why = f"is not a session store ({text})"
            fix = "name a new file, or the file an AgentHost (or MultiAgentHost) wrote before"
        return StoreOpenError(f"{self.kind}: store {path!r} {why}; {fix}")

    def _lock(self) -> None:
        """Create the file (owner-only) if need be and take its lock, or say who holds it."""
        path = self.path
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise StoreOpenError(
                f"{self.kind}: store {path!r} cannot be made: its directory {folder!r} does "
                "not exist; create it, or name a file in an existing directory"
            )
        if os.path.isdir(path):
            raise StoreOpenError(
                f"{self.kind}: store {path!r} is a directory; name a file (such as "
                f"{os.path.join(path, 'sessions.sqlite3')!r})"
            )
        try:
            # Owner-only, as mkstemp makes the temporary one: the file names who may see which
            # session and holds what they said (SQLite gives its -wal and -shm the same mode).
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise self._refused(exc) from None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StoreOpenError(
                    f"{self.kind}: store {path!r} is in use by another host "
                    f"({_held_by(path)}); stop that host first, or give this one a file of "
                    "its own"
                ) from None
        self.lock_fd = fd

    def _unlock(self) -> None:
        fd, self.lock_fd = self.lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock

    def _migrate(self, synchronous: str) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, 1, _SCHEMA_VERSION):
            raise StoreOpenError(
                f"{self.kind}: store {self.path!r} has schema {version}; this host reads 1 "
                f"and {_SCHEMA_VERSION}: a newer coreagent-sdk wrote it, serve it with that "
                "version"
            )
        if version == 0:
            tables = self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise StoreOpenError(
                    f"{self.kind}: store {self.path!r} is not a session store (it holds tables "
                    "of something else); name a new file, or the file an AgentHost (or "
                    "MultiAgentHost) wrote before"
                )
        self.conn.execute("PRAGMA journal_mode=WAL")
        # See the module's contract: NORMAL survives a killed process, FULL a power cut too.
        sync = "OFF" if self.temporary else synchronous.upper()
        self.conn.execute(f"PRAGMA synchronous={sync}")
        # Checkpoints run on the worker thread (`checkpoint`), never inside a commit on the loop.
        self.conn.execute("PRAGMA wal_autocheckpoint=0")
        if version == _SCHEMA_VERSION:
            self.conn.execute(_HOLDER)
            self.conn.execute(_A2A_TASKS)
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
            self.conn.execute(_HOLDER)
            self.conn.execute(_A2A_TASKS)
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _check_owner(self, shared: bool) -> None:
        # An AgentHost's sessions are keyed "", a MultiAgentHost's by agent name: a file of
        # the other kind would open with nothing in it, so it is refused with the fix instead.
        other = "agent != ''" if not shared else "agent = ''"
        found = self.conn.execute(f"SELECT agent FROM sessions WHERE {other} LIMIT 1").fetchone()
        if found is None:
            return
        if shared:
            raise StoreOpenError(
                f"{self.kind}: store {self.path!r} holds an AgentHost's sessions; serve it "
                f"with an AgentHost, or give the {self.kind} a file of its own"
            )
        raise StoreOpenError(
            f"AgentHost: store {self.path!r} holds the sessions of a MultiAgentHost's agents "
            f"(such as {found[0]!r}); serve it with that MultiAgentHost, or give the "
            "AgentHost a file of its own"
        )

    # --- writes -----------------------------------------------------------

    def _rollback(self) -> None:
        # SQLite rolls a transaction back by itself on some errors (a full disk at COMMIT):
        # a second ROLLBACK would raise "no transaction is active" over the real cause.
        if self.conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")

    def _check_file(self) -> None:
        """Fail the write if the file was deleted or replaced under the host."""
        if self.identity is None:
            return
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            raise StoreWriteError(
                f"the store file {self.path!r} is gone ({exc.strerror}); restart the host "
                "on a file it can keep"
            ) from None
        if (stat.st_dev, stat.st_ino) != self.identity:
            raise StoreWriteError(
                f"the store file {self.path!r} was replaced by another file; restart the host on it"
            )

    def write(self, batch: Sequence[_Write], fault: Callable[[], None] | None) -> list[Any]:
        """Apply `batch` in one transaction: each write's result, or the error of them all."""
        self._check_file()
        conn = self.conn
        # The seqs this transaction uses, over the committed ones: only a commit makes them
        # the agents' (a copy of every agent's seq per commit cost a fleet of 10,000 agents
        # sharing one file a 10,000-entry copy per moment).
        seqs: dict[str, int] = {}
        conn.execute("BEGIN IMMEDIATE")
        try:
            results = [self._apply(w, seqs) for w in batch]
            if fault is not None:
                fault()
            conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        self.seqs.update(seqs)
        return results

    def _seq(self, agent: str, seqs: dict[str, int]) -> int:
        """`agent`'s last seq as this transaction sees it (`seqs`, then the committed one)."""
        if agent in seqs:
            return seqs[agent]
        committed = self.seqs.get(agent)
        return committed if committed is not None else self._last_seq(agent)

    def holds_nothing_of(self, agent: str) -> bool:
        """Whether the file has no row of `agent` (known without a query), as `written` says."""
        return self.temporary and agent not in self.written

    def _apply(self, write: _Write, seqs: dict[str, int]) -> Any:
        if self.holds_nothing_of(write.agent):
            # Its last seq is 0, known without a query (as `_last_seq` would find once the
            # agent is marked written below): a 10,000-daemon fleet asked it twice on each
            # daemon's first event, two reads of cold pages a call to a cold peer.
            seqs.setdefault(write.agent, 0)
        self.written.add(write.agent)  # before the write: a failed one may have left rows
        if isinstance(write, _Event):
            agent = write.agent
            seq = self._seq(agent, seqs) + 1
            seqs[agent] = seq
            frame = agent_frame(seq, write.event_json)
            # A plain INSERT: meeting an existing seq is an error, never a replacement.
            self.conn.execute(
                "INSERT INTO events (agent, seq, session_id, frame) VALUES (?, ?, ?, ?)",
                (agent, seq, write.session_id, frame),
            )
            self._trim_later(agent, write.session_id)
            return seq, frame
        if isinstance(write, _Put):
            self._put(write.agent, write.row)
            return None
        if isinstance(write, _TaskPut):
            self.conn.execute(
                "INSERT OR REPLACE INTO a2a_tasks (agent, owner, task_id, task) "
                "VALUES (?, ?, ?, ?)",
                (write.agent, write.owner, write.task_id, write.task),
            )
            return None
        if isinstance(write, _TaskDelete):
            self.conn.execute(
                "DELETE FROM a2a_tasks WHERE agent = ? AND owner = ? AND task_id = ?",
                (write.agent, write.owner, write.task_id),
            )
            return None
        # The agent's newest seq may be this session's: kept, so a delete frees no seq.
        agent = write.agent
        self._count(agent, "seq", self._seq(agent, seqs))
        self._delete(agent, write.session_id)
        return None

    def _last_seq(self, agent: str) -> int:
        """The last seq `agent` used: its newest event's, or the counter a delete left."""
        if self.holds_nothing_of(agent):
            return 0
        seq = (
            self.conn.execute("SELECT max(seq) FROM events WHERE agent = ?", (agent,)).fetchone()[0]
            or 0
        )
        stored = dict(
            self.conn.execute(
                "SELECT name, value FROM counters WHERE agent = ?", (agent,)
            ).fetchall()
        )
        # seq_reserved: left by an older host that numbered events ahead of writing them.
        return int(max(seq, stored.get("seq", 0), stored.get("seq_reserved", 0)))

    def _trim_later(self, agent: str, session_id: str) -> None:
        # Older events are never replayed (the window), so they are not kept; trimmed every
        # _TRIM_EVERY events, so a session holds at most window + _TRIM_EVERY rows.
        key = (agent, session_id)
        added = self.unpruned.get(key, 0) + 1
        if added < _TRIM_EVERY:
            self.unpruned[key] = added
            if len(self.unpruned) > _COUNTED_SESSIONS:
                self._trim(*next(iter(self.unpruned)))  # the first counted of them
            return
        self._trim(agent, session_id)

    def _trim(self, agent: str, session_id: str) -> None:
        """Delete a session's events older than the window; its count starts again."""
        self.unpruned.pop((agent, session_id), None)
        self.conn.execute(
            "DELETE FROM events WHERE agent = ? AND session_id = ? AND seq < (SELECT seq "
            "FROM events WHERE agent = ? AND session_id = ? ORDER BY seq DESC LIMIT 1 "
            "OFFSET ?)",
            (agent, session_id, agent, session_id, self.window - 1),
        )

    def _put(self, agent: str, row: StoredSession) -> None:
        self.conn.execute(
            _UPSERT_ROW,
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

    def _delete(self, agent: str, session_id: str) -> None:
        self.conn.execute(
            "DELETE FROM sessions WHERE agent = ? AND session_id = ?", (agent, session_id)
        )
        self.conn.execute(
            "DELETE FROM events WHERE agent = ? AND session_id = ?", (agent, session_id)
        )
        self.unpruned.pop((agent, session_id), None)

    def forget(self, agent: str) -> None:
        """Delete every row of `agent` in one transaction: sessions, events and counters."""
        self._check_file()
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table in ("events", "sessions", "counters", "a2a_tasks"):
                conn.execute(f"DELETE FROM {table} WHERE agent = ?", (agent,))
            conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        self.seqs.pop(agent, None)
        for key in [key for key in self.unpruned if key[0] == agent]:
            del self.unpruned[key]

    def _count(self, agent: str, name: str, value: int) -> None:
        self.conn.execute(
            "INSERT INTO counters (agent, name, value) VALUES (?, ?, ?) "
            "ON CONFLICT (agent, name) DO UPDATE SET value = max(value, excluded.value)",
            (agent, name, value),
        )

    # --- reads ------------------------------------------------------------

    def last_session(self, agent: str) -> int:
        """The last session number `agent` used, so a restarted host counts on."""
        if self.holds_nothing_of(agent):
            return 0
        found = self.conn.execute(
            "SELECT value FROM counters WHERE agent = ? AND name = 'session'", (agent,)
        ).fetchone()
        return int(found[0]) if found else 0

    def get(self, agent: str, session_id: str) -> tuple[StoredSession, int] | None:
        """A session's row and the seq of its newest event (0: none)."""
        if self.holds_nothing_of(agent):
            return None
        found = self.conn.execute(
            f"{_SELECT_ROW} WHERE agent = ? AND session_id = ?", (agent, session_id)
        ).fetchone()
        if found is None:
            return None
        newest = self.conn.execute(
            "SELECT max(seq) FROM events WHERE agent = ? AND session_id = ?", (agent, session_id)
        ).fetchone()[0]
        return _row(found), int(newest or 0)

    def page(
        self, agent: str, session_id: str, after: int, upto: int, first: bool
    ) -> tuple[int, list[tuple[int, bytes]]]:
        """Events of a session with after < seq <= upto, oldest first, about a page of bytes.

        On the `first` page `after` is first clamped to the session's newest `window`
        events, as the daemon's `clampReplaySince` clamps a cursor; the cursor used is
        returned with the page.
        """
        conn = self._reader()
        if first:
            floor = conn.execute(
                "SELECT seq FROM events WHERE agent = ? AND session_id = ? "
                "ORDER BY seq DESC LIMIT 1 OFFSET ?",
                (agent, session_id, self.window),
            ).fetchone()
            if floor is not None and floor[0] > after:
                after = int(floor[0])
        rows = conn.execute(
            "SELECT seq, frame FROM events WHERE agent = ? AND session_id = ? AND seq > ? "
            "AND seq <= ? ORDER BY seq",
            (agent, session_id, after, upto),
        )
        out: list[tuple[int, bytes]] = []
        size = 0
        try:
            for seq, frame in rows:  # stepped one row at a time: a page holds what it holds
                out.append((int(seq), bytes(frame)))
                size += len(frame)
                if size >= _REPLAY_PAGE_BYTES:
                    break
        finally:
            rows.close()
        return after, out

    def tasks(self, agent: str) -> list[tuple[str, bytes]]:
        """`agent`'s stored A2A tasks, (owner, serialized task), oldest last save first."""
        found = (
            self._reader()
            .execute("SELECT owner, task FROM a2a_tasks WHERE agent = ? ORDER BY rowid", (agent,))
            .fetchall()
        )
        return [(str(owner), bytes(task)) for owner, task in found]

    def rows(self, agent: str, skip: frozenset[str]) -> list[StoredSession]:
        found = (
            self._reader()
            .execute(f"{_SELECT_ROW} WHERE agent = ? ORDER BY rowid", (agent,))
            .fetchall()
        )
        return [_row(r) for r in found if r[0] not in skip]

    def _reader(self) -> sqlite3.Connection:
        """The worker thread's connection for long reads (replays, listings), off the loop."""
        if self.reader is None:
            self.reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.reader.execute("PRAGMA query_only=1")
        return self.reader

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the file (worker thread; never blocks a writer)."""
        try:
            if self.checkpointer is None:
                self.checkpointer = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False
                )
            self.checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:  # the next one tries again; a write says what is wrong
            _log.warning("AgentHost: checkpointing the session store %s failed: %s", self.path, exc)

    def close(self) -> None:
        for other in (self.checkpointer, self.reader):
            if other is not None:
                other.close()
        with contextlib.suppress(AttributeError):
            self.conn.close()
        self._unlock()
        if self.temporary:
            _remove(self.path)


def _held_by(path: str) -> str:
    """Who holds `path`, as its holder wrote it (best effort: it may be writing right now)."""
    try:
        conn = sqlite3.connect(path, timeout=0.5)
        try:
            conn.execute("PRAGMA query_only=1")
            found = conn.execute("SELECT process FROM holder WHERE one = 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        found = None
    return str(found[0]) if found else "a process that has not said who it is yet"


def _remove(path: str) -> None:
    for name in (path, path + "-wal", path + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)


def _finalize(executor: concurrent.futures.ThreadPoolExecutor, db: list[_Db]) -> None:
    # A host dropped without aclose(): close the file (and remove a temporary one). The
    # collection that calls this may run on a store's worker thread, which cannot wait for
    # its own end ("cannot join current thread"): another thread then does it.
    if threading.current_thread().name.startswith(_WORKER_PREFIX):
        threading.Thread(target=_finalize, args=(executor, db), daemon=True).start()
        return
    executor.shutdown(wait=True)
    if db:
        db[0].close()


def _retrieve(future: asyncio.Future[Any]) -> None:
    # A write nobody awaits (usage at a turn's end, an event whose failure reaches its turn
    # another way): its failure was logged with its commit.
    if not future.cancelled():
        future.exception()


_WORKER_PREFIX = "coreagent-host-store"  # the name of a store's worker thread

_Waiting = tuple[_Write, "asyncio.Future[Any]", "Callable[[Any], None] | None"]
_WRITE_OF = operator.itemgetter(0)  # a _Waiting's write
_AGENT_OF = operator.attrgetter("agent")  # a write's agent
_CHECKPOINT_EVERY = 256  # commits between two checkpoints of the write-ahead log


class StoreFile:
    """A session store file on SQLite (WAL): written on the event loop, one commit a moment.

    ``path`` names the file (kept on close, so a host started on it again
    serves its sessions); None makes a private temporary file on first use,
    removed on close. ``shared`` is a `MultiAgentHost`'s file (its agents'
    sessions keyed by name), else an `AgentHost`'s. ``synchronous`` is what a
    commit survives ("normal": a killed process; "full": a power cut too; see
    the module's contract).

    Opening the file (its lock, its schema), checkpointing its log and long reads (a
    replay's pages, a listing) run on a worker thread; the writes of one turn of the
    event loop are committed together at the end of it, on the loop, and each is
    awaited until its commit. With "normal" a commit writes to the OS and syncs nothing, so
    that costs the loop microseconds, where a hop to a thread and back cost it
    a scheduler's wake-up per event; with "full" each commit waits for the disk,
    one sync for every write of that moment. Reads see every write made before
    them. One file serves every agent of a `MultiAgentHost`.

    Attributes:
        write_fault: The test seam at the write layer: None, or a callable run
            inside every write transaction before it commits; what it raises
            fails that commit, rolled back, as a full disk would.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        window: int,
        shared: bool = False,
        synchronous: str = "normal",
        kind: str | None = None,
    ) -> None:
        # Who errors name: the class the user made (a shared file is a MultiAgentHost's
        # unless its owner says otherwise, such as a SharedStore).
        kind = kind if kind is not None else "MultiAgentHost" if shared else "AgentHost"
        if synchronous not in SYNCHRONOUS:
            raise ValueError(
                f"{kind}: store_sync must be 'normal' (survives a killed process) or 'full' "
                f"(survives a power cut too), got {synchronous!r}"
            )
        self.path = os.fspath(path) if path is not None else None
        self.window = window
        self.shared = shared
        self.synchronous = synchronous
        self.kind = kind
        # The key each part of a shared file is claimed by (its SessionStore, while it lives
        # and is not closed): two hosts under one key would mix their sessions and seqs.
        self._claims: weakref.WeakValueDictionary[str, SessionStore] = weakref.WeakValueDictionary()
        self.write_fault: Callable[[], None] | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._db: list[_Db] = []  # the open connection, once the worker made it
        self._finalizer: weakref.finalize[..., StoreFile] | None = None
        self._failed: BaseException | None = None  # why the file could not be opened
        # The connection runs one statement sequence at a time: a host used from two loops
        # (a notebook's sync calls) still commits whole transactions.
        self._lock = threading.Lock()
        self._pending: dict[asyncio.AbstractEventLoop, list[_Waiting]] = {}
        self._failing = False  # a write failed and none has succeeded since (log once)
        self._commits = 0
        self._checkpointing = False

    @property
    def temporary(self) -> bool:
        """True for a private temporary file (no path given)."""
        return self.path is None

    @property
    def opened(self) -> bool:
        """Whether the file exists for this host yet (a temporary one is made on first use)."""
        return self._executor is not None

    def __repr__(self) -> str:
        where = "temporary" if self.path is None else repr(self.path)
        return f"StoreFile({where}, {'open' if self.opened else 'closed'})"

    # --- opening (on the worker thread) ------------------------------------

    def _start(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=_WORKER_PREFIX
            )
            self._finalizer = weakref.finalize(self, _finalize, self._executor, self._db)
        return self._executor

    def _connect(self) -> None:
        if self._db:
            return
        try:  # again after a failure: the holder may have stopped, the disk been mounted
            self._db.append(_Db(self.path, self.window, self.shared, self.synchronous, self.kind))
        except (OSError, ValueError, sqlite3.Error) as exc:
            self._failed = exc
            raise

    async def _ready(self) -> _Db:
        """The open connection (opened off the loop the first time; no wait after that)."""
        if not self._db:
            await asyncio.wrap_future(self._start().submit(self._connect))
        return self._db[0]

    # --- writes (on the loop) -----------------------------------------------

    def write(
        self, write: _Write, then: Callable[[Any], None] | None = None
    ) -> asyncio.Future[Any]:
        """Queue `write` for this moment's commit; the future is its result once committed.

        `then`, if given, is called on the loop with the result, or with the error
        of a write that failed, in commit order, in the callback that settles the
        future (so whoever awaits the future finds it called; the session sends its
        frames from there, so frames leave in seq order, each after its commit). A
        write that fails fails its future with `StoreWriteError`.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        queue = self._pending.setdefault(loop, [])
        queue.append((write, future, then))
        if len(queue) == 1:  # one commit a moment: every write queued until the loop turns
            loop.call_soon(self._commit_soon, loop)
        return future

    def _commit_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._pending.get(loop):
            return  # committed already, or dropped by close(): nothing to open the file for
        if self._db:
            self._commit(loop)
        else:
            loop.create_task(self._open_then_commit(loop))

    async def _open_then_commit(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            await self._ready()
        except Exception as exc:  # nothing can be stored: every waiting write fails with it
            for _, future, then in self._pending.pop(loop, []):
                if then is not None:
                    then(exc)
                if not future.done():
                    future.set_exception(exc)
            return
        self._commit(loop)

    def _commit(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._pending.pop(loop, [])
        if not batch:
            return
        results: list[Any] = []
        error: BaseException | None = None
        try:
            with self._lock:
                results = self._db[0].write([w for w, _, _ in batch], self.write_fault)
        except StoreWriteError as exc:
            error = exc
        except (sqlite3.Error, OSError) as exc:
            error = StoreWriteError(str(exc) or type(exc).__name__)
        except Exception as exc:  # a closed store, a fault's own error
            error = exc
        self._report(error, len(batch))
        for i, (_, future, then) in enumerate(batch):
            outcome = error if error is not None else results[i]
            # The future first: the task awaiting it is then woken ahead of the stream
            # writers `then` wakes, so what it publishes next (a turn's turn-complete) joins
            # the same write instead of costing each reader one more. It runs after this
            # callback either way, so it finds `then` called.
            if not future.done():
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(outcome)
            if then is not None:
                try:
                    then(outcome)
                except Exception:  # one session's fan-out must not cost another its answer
                    _log.exception("AgentHost: sending a committed event failed")
        if error is None:
            self._commits += 1
            if self._commits % _CHECKPOINT_EVERY == 0:
                self._checkpoint_later()

    def _report(self, error: BaseException | None, writes: int) -> None:
        """Log a failure once per outage, with its real cause, and the recovery once."""
        if error is not None and not self._failing:
            self._failing = True
            _log.error(
                "AgentHost: the session store %s could not be written: %s (%d writes failed, "
                "nothing of them stored; the next write tries again)",
                self.path or "(temporary)",
                error,
                writes,
            )
        elif error is None and self._failing:
            self._failing = False
            _log.warning("AgentHost: the session store %s is written again", self.path)

    def _checkpoint_later(self) -> None:
        # The log is copied into the file by the worker (its own connection), so the loop
        # never waits for that copy or for the sync that ends it.
        if self._checkpointing or not self._db:
            return
        self._checkpointing = True
        db = self._db[0]

        def done(_: concurrent.futures.Future[None]) -> None:
            self._checkpointing = False

        self._start().submit(db.checkpoint).add_done_callback(done)

    def _commit_pending(self) -> None:
        """Commit what this loop queued so far, now (a read then sees it)."""
        loop = asyncio.get_running_loop()
        if self._pending.get(loop) and self._db:
            self._commit(loop)

    def claim(self, key: str, part: SessionStore) -> None:
        """Make `part` the one user of key `key` of this shared file, or say who has it."""
        holder = self._claims.get(key)
        if holder is not None and holder is not part:
            raise ValueError(
                f"{self.kind}: key {key!r} is in use by another host on this store; give each "
                "host its own key (AgentHost(store_key=...)), or aclose() the other host first"
            )
        self._claims[key] = part

    def release(self, key: str, part: SessionStore) -> None:
        """`part` no longer uses key `key` (another host may take it)."""
        if self._claims.get(key) is part:
            del self._claims[key]

    # --- reads and the rest ---------------------------------------------------

    def _commit_for(self, agent: str | None) -> None:
        """Commit this loop's queued writes now if a read of `agent`'s rows must see them.

        A read of one agent's rows sees nothing of another's: only a write of its own
        makes the commit come early. In a shared file of 10,000 agents, each one's
        first read (its host opening) committed every host's writes of that moment,
        one commit per agent woken instead of one per moment.
        """
        if agent is not None:
            queued = self._pending.get(asyncio.get_running_loop())
            # `in` over two maps: the queue is walked in C, with no generator to resume per
            # write (the one Python loop a cold daemon's first read made, 23 steps a call).
            if not queued or agent not in map(_AGENT_OF, map(_WRITE_OF, queued)):
                return
        self._commit_pending()

    async def read(self, fn: Callable[[_Db], _T], agent: str | None = None) -> _T:
        """`fn` of the connection, after every write made before it was committed (every
        write of `agent`, when `fn` reads only that agent's rows)."""
        db = await self._ready()
        self._commit_for(agent)
        with self._lock:
            return fn(db)

    @property
    def ready(self) -> bool:
        """Whether the connection is open (a read needs no wait)."""
        return bool(self._db)

    def read_now(self, fn: Callable[[_Db], _T], agent: str | None = None) -> tuple[_T] | None:
        """`read` without waiting: ``(fn(db),)`` if the file is open already, else None."""
        if not self._db:
            return None
        self._commit_for(agent)
        with self._lock:
            return (fn(self._db[0]),)

    async def read_off_loop(self, fn: Callable[[_Db], _T], agent: str | None = None) -> _T:
        """`fn` on the worker thread (its own connection), after every write made before it
        was committed (of `agent`, as `read`): for reads the loop should not wait for."""
        db = await self._ready()
        self._commit_for(agent)
        return await asyncio.wrap_future(self._start().submit(fn, db))

    async def check(self) -> None:
        """Open a named file now (off the loop), raising why it cannot be served."""
        if not self.temporary:
            await self._ready()

    async def flush(self) -> None:
        """Commit every write queued so far on this loop (nothing to do if never opened)."""
        if self.opened:
            with contextlib.suppress(Exception):  # a failed write was logged already
                await self._ready()
                self._commit_pending()

    def forget(self, key: str) -> None:
        """Delete every row of `key` from the file now (a shared file's part no host uses).

        What this thread's loop queued is committed first, so no write of it lands after.
        """
        with contextlib.suppress(RuntimeError):  # no running loop: nothing of it is queued
            self._commit_pending()
        if not self._db:
            return  # never opened (or closed): no row of it to delete
        with self._lock:
            self._db[0].forget(key)

    def close(self) -> None:
        """`aclose` for sync code: this thread's loop's writes committed, the file closed.

        A write queued on another loop that has not committed is failed (it was never
        acknowledged); its loop, if closed already, has nobody waiting for it.
        """
        with contextlib.suppress(RuntimeError):  # no running loop here
            self._commit_pending()
        pending, self._pending = self._pending, {}
        for batch in pending.values():
            for _, future, _ in batch:
                with contextlib.suppress(RuntimeError):  # its loop is closed
                    if not future.done():
                        future.set_exception(StoreWriteError("the store was closed first"))
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        _finalize(executor, self._db)
        self._db.clear()
        self._failed = None

    async def aclose(self) -> None:
        """Commit every write, close the file (removing a temporary one); reopens on use."""
        await self.flush()
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        await asyncio.get_running_loop().run_in_executor(None, _finalize, executor, self._db)
        self._db.clear()
        self._failed = None


class SessionStore:
    """One agent's sessions in a `StoreFile`: what an `AgentHost` keeps, replays and resumes.

    Given a path (or None: a private temporary file), the store has a file of
    its own, closed with it; given a `StoreFile`, it is agent ``agent``'s part
    of that shared file (a `MultiAgentHost`'s or a `SharedStore`'s), which its
    owner closes. ``exclusive`` claims the key from its making until `aclose()`
    (again on `open()`): another part claiming it meanwhile is refused.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | StoreFile | None,
        *,
        window: int,
        agent: str = "",
        synchronous: str = "normal",
        exclusive: bool = False,
    ) -> None:
        self._owns = not isinstance(path, StoreFile)
        self.file = (
            path
            if isinstance(path, StoreFile)
            else StoreFile(path, window=window, synchronous=synchronous)
        )
        self.agent = agent
        self._exclusive = exclusive
        if exclusive:
            self.file.claim(agent, self)

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
        """Whether the file exists for this host yet (a temporary one is made on first use)."""
        return self.file.opened

    def __repr__(self) -> str:
        where = "temporary" if self.path is None else repr(self.path)
        agent = f", agent {self.agent!r}" if self.agent else ""
        return f"SessionStore({where}{agent}, {'open' if self.opened else 'closed'})"

    async def open(self) -> int:
        """Open the file (off the loop): the last session number this agent used."""
        agent = self.agent
        if self._exclusive:
            self.file.claim(agent, self)  # again after an aclose() gave the key up
        return await self.file.read(lambda db: db.last_session(agent), agent)

    def open_now(self, startup: str) -> tuple[int, tuple[StoredSession, int] | None] | None:
        """`open()` and `get(startup)` at once, where the file is open already (else None, and
        nothing done): the last session number and the startup session's row and seq."""
        if not self.file.ready:
            return None
        agent = self.agent
        if self._exclusive:
            self.file.claim(agent, self)  # again after an aclose() gave the key up
        read = self.file.read_now(
            lambda db: (db.last_session(agent), db.get(agent, startup)), agent
        )
        return read[0] if read is not None else None

    def append(
        self,
        session_id: str,
        event_json: bytes,
        then: Callable[[tuple[int, bytes] | BaseException], None],
    ) -> asyncio.Future[tuple[int, bytes]]:
        """Log an event of a session: its (seq, frame) once committed (`then` first)."""
        return self.file.write(_Event(self.agent, session_id, event_json), then)

    def put(self, row: StoredSession) -> asyncio.Future[None]:
        """Write a session's row; awaited, it is committed (else `StoreWriteError`)."""
        done = self.file.write(_Put(self.agent, row))
        done.add_done_callback(_retrieve)
        return done

    def delete(self, session_id: str) -> asyncio.Future[None]:
        """Forget a session and its events; awaited, it is committed."""
        done = self.file.write(_Delete(self.agent, session_id))
        done.add_done_callback(_retrieve)
        return done

    async def get(self, session_id: str) -> tuple[StoredSession, int] | None:
        """The stored row of a session and its newest event's seq, or None."""
        if not self.opened:
            return None
        agent = self.agent
        return await self.file.read(lambda db: db.get(agent, session_id), agent)

    async def page(
        self, session_id: str, after: int, upto: int, first: bool
    ) -> tuple[int, list[tuple[int, bytes]]]:
        """A page of a session's events after `after` up to `upto` (see `_Db.page`)."""
        agent = self.agent
        return await self.file.read_off_loop(
            lambda db: db.page(agent, session_id, after, upto, first), agent
        )

    async def rows(self, skip: frozenset[str] = frozenset()) -> list[StoredSession]:
        """Every stored session not in `skip`, in the order they were first stored."""
        if not self.opened:
            return []
        agent = self.agent
        return await self.file.read_off_loop(lambda db: db.rows(agent, skip), agent)

    def put_task(self, owner: str, task_id: str, task: bytes) -> asyncio.Future[None]:
        """Write an A2A task's state (`_a2a`); awaited, it is committed (else `StoreWriteError`)."""
        done = self.file.write(_TaskPut(self.agent, owner, task_id, task))
        done.add_done_callback(_retrieve)
        return done

    def delete_task(self, owner: str, task_id: str) -> asyncio.Future[None]:
        """Forget an A2A task; awaited, it is committed."""
        done = self.file.write(_TaskDelete(self.agent, owner, task_id))
        done.add_done_callback(_retrieve)
        return done

    async def tasks(self) -> list[tuple[str, bytes]]:
        """This agent's stored A2A tasks, (owner, serialized task), oldest last save first."""
        if not self.opened:
            await self.file.check()  # a named file: opened to read what a last run stored
            if not self.opened:
                return []  # a temporary file not made yet holds none
        agent = self.agent
        return await self.file.read_off_loop(lambda db: db.tasks(agent), agent)

    async def aclose(self) -> None:
        """Finish every write; close a file of its own (a shared one stays open for others)."""
        if self._owns:
            await self.file.aclose()
        else:
            await self.file.flush()
            if self._exclusive:
                self.file.release(self.agent, self)
