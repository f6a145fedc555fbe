"""Where trial rows go as they arrive: a SQLite file keyed by the trial's key.

The invariants:

- A row is in the file once its trial ended, before the run moves on (each
  row is committed as it comes), so a crash, a kill or an interrupt loses at
  most the trials that were still running; and each key (scenario,
  parameters, case, seed, repetition) is there at most once, so a rerun
  skips exactly the keys the file holds.
- A file is checked whole before anything runs: another application's
  SQLite file, a damaged one, a row that is not ours, or the results of
  another experiment are refused with the file's name and the fix, never
  discovered after trials have spent tokens (and never given a `trials`
  table of ours).
- One run writes a file at a time: a second process (or a second run in
  this one) is refused in one line while the first holds the file's lock,
  so no trial is paid for twice. The lock is the kernel's (``flock``), so
  a run killed with ``kill -9`` leaves none behind.

SQLite is the standard library's: runs and resumes need no extra install
(Parquet is an export). Rows are JSON text beside their key columns, so a
scenario's own scorers and parameters become columns without a schema to
migrate; the experiment that made them is one JSON record beside them
(`_meta`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from ._meta import ExperimentFileError, merged

__all__ = ["MemoryStore", "SqliteStore", "open_store", "read_file"]

Key = tuple[str, str, str, int, int]

_TRIALS = """
CREATE TABLE IF NOT EXISTS trials (
    scenario TEXT NOT NULL,
    params TEXT NOT NULL,
    case_name TEXT NOT NULL,
    seed INTEGER NOT NULL,
    repetition INTEGER NOT NULL,
    row TEXT NOT NULL,
    PRIMARY KEY (scenario, params, case_name, seed, repetition)
)
"""
_EXPERIMENT = "CREATE TABLE IF NOT EXISTS experiment (id INTEGER PRIMARY KEY, record TEXT NOT NULL)"
_OURS = frozenset({"trials", "experiment"})
_KEYS = ("scenario", "params", "case", "seed", "repetition")

try:
    import fcntl
except ImportError:  # Windows: no flock; one writer is then the user's to keep
    fcntl = None  # type: ignore[assignment]


def row_key(row: dict[str, Any]) -> Key:
    """The key of a row of the table."""
    return (row["scenario"], row["params"], row["case"], int(row["seed"]), int(row["repetition"]))


class MemoryStore:
    """Rows kept in a list: a run without a file (nothing to resume from)."""

    path: Path | None = None
    record: dict[str, Any] | None = None

    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] = []

    def keys(self) -> set[Key]:
        return {row_key(r) for r in self._rows}

    def add(self, row: dict[str, Any]) -> None:
        self._rows.append(row)

    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows)

    def close(self) -> None:
        pass


def _refuse(path: Path, what: str, fix: str) -> ExperimentFileError:
    return ExperimentFileError(f"experiments: {str(path)!r} {what}; {fix}")


def read_file(
    path: Path, db: sqlite3.Connection
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The rows and the experiment record of an open results file, checked whole.

    Raises `ExperimentFileError` naming the file and the fix when it is not
    a results file, is damaged, or holds a row that is not one of ours.
    """
    fix = "give a new path for the results (or delete the file to start over)"
    try:
        tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        checked = db.execute("PRAGMA quick_check").fetchone()
    except sqlite3.DatabaseError as exc:
        raise _refuse(path, f"is not a results file ({exc})", fix) from None
    if checked is None or checked[0] != "ok":
        raise _refuse(path, f"is damaged (SQLite's check: {checked[0] if checked else '?'})", fix)
    others = sorted(tables - _OURS)
    if others:
        raise _refuse(
            path,
            f"is another application's SQLite file (its tables: {', '.join(others)})",
            "give a new path for the results: a run never writes into a file it did not make",
        )
    if tables and "trials" not in tables:
        raise _refuse(path, "has an experiment record but no trials table", fix)
    rows: list[dict[str, Any]] = []
    if "trials" in tables:
        for rowid, text in db.execute("SELECT rowid, row FROM trials ORDER BY rowid"):
            try:
                row = json.loads(text)
                if not isinstance(row, dict) or any(k not in row for k in _KEYS):
                    raise ValueError("not a trial's row")
                row_key(row)
            except (ValueError, TypeError) as exc:
                raise _refuse(
                    path,
                    f"holds a row that is not a trial's (rowid {rowid}: {exc})",
                    f"delete that row (DELETE FROM trials WHERE rowid = {rowid}) to run it "
                    "again, or give a new path",
                ) from None
            rows.append(row)
    record = None
    if "experiment" in tables:
        found = db.execute("SELECT record FROM experiment WHERE id = 1").fetchone()
        try:
            record = json.loads(found[0]) if found else None
        except ValueError:
            raise _refuse(path, "has an experiment record that is not JSON", fix) from None
    return rows, record


class SqliteStore:
    """Rows in a SQLite file, committed one by one as trials end; the experiment beside them."""

    def __init__(self, path: Path, record: dict[str, Any] | None) -> None:
        self.path = path
        self._lock: int | None = None
        self._recorded = False
        existed = path.exists() and path.stat().st_size > 0
        self._made = not path.exists()
        if not existed:
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(path), check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise _refuse(path, f"cannot be opened ({exc})", "give another path") from None
        try:
            self._hold(path)
            self._rows, held = read_file(path, self._db)
            self._keys = {row_key(r) for r in self._rows}
            # The file's record wins where it says more (a grid grown over runs); another
            # experiment's record is refused before anything is written.
            self.record = merged(path, held if self._rows else None, record)
            self._record_text = json.dumps(self.record) if record else None
            # WAL: a committed row survives a crash without rewriting the file per row.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            self.close()
            raise

    def _hold(self, path: Path) -> None:
        if fcntl is None:
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _refuse(
                path,
                "is being written by another run right now",
                "let that run finish (its rows are kept), or give this one another path",
            ) from None
        self._lock = fd

    def keys(self) -> set[Key]:
        return set(self._keys)

    def add(self, row: dict[str, Any]) -> None:
        key = row_key(row)
        if not self._recorded and self._record_text is not None:
            # Written with the first row, not at open: a run refused before its first trial
            # (a typo in the entry peer) leaves no record for its fixed rerun to disagree with.
            self._db.execute(_TRIALS)
            self._db.execute(_EXPERIMENT)
            self._db.execute(
                "INSERT OR REPLACE INTO experiment VALUES (1, ?)", (self._record_text,)
            )
            self._recorded = True
        elif not self._recorded:
            self._db.execute(_TRIALS)
            self._recorded = True
        self._db.execute(
            "INSERT OR REPLACE INTO trials VALUES (?, ?, ?, ?, ?, ?)",
            (*key, json.dumps(row, ensure_ascii=False, allow_nan=True)),
        )
        self._db.commit()
        if key not in self._keys:
            self._keys.add(key)
            self._rows.append(row)

    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        if self._made and not self._recorded:
            # A run refused (or stopped) before its first row leaves no empty file behind.
            for leftover in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
                with contextlib.suppress(OSError):
                    leftover.unlink()
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor releases the flock
            self._lock = None


def open_store(
    path: str | os.PathLike[str] | None, record: dict[str, Any] | None = None
) -> MemoryStore | SqliteStore:
    """A store for `path` (None: in memory); a `.parquet` path is refused with the fix."""
    if path is None:
        store = MemoryStore()
        store.record = record
        return store
    where = Path(path)
    if where.suffix.lower() == ".parquet":
        raise ExperimentFileError(
            f"experiments: a run writes its rows to SQLite as they arrive, so it can resume; "
            f"got {str(where)!r}; give a .sqlite path, then results.to_parquet(...) to export"
        )
    if where.is_dir():
        raise _refuse(where, "is a folder", "give the path of a file, say run.sqlite")
    return SqliteStore(where, record)
