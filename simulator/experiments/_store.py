"""Where trial rows go as they arrive: a SQLite file keyed by the trial's key.

The invariant: a row is in the file once its trial ended, before the run
moves on (each row is committed as it comes), so a crash, a kill or an
interrupt loses at most the trials that were still running; and each key
(scenario, parameters, case, seed, repetition) is there at most once, so a
rerun skips exactly the keys the file holds. SQLite is the standard
library's: runs and resumes need no extra install (Parquet is an export).

Rows are JSON text beside their key columns, so a scenario's own scorers
and parameters become columns without a schema to migrate.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["MemoryStore", "SqliteStore", "open_store"]

Key = tuple[str, str, str, int, int]

_SCHEMA = """
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


def row_key(row: dict[str, Any]) -> Key:
    """The key of a row of the table."""
    return (row["scenario"], row["params"], row["case"], int(row["seed"]), int(row["repetition"]))


class MemoryStore:
    """Rows kept in a list: a run without a file (nothing to resume from)."""

    path: Path | None = None

    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] = []

    def keys(self) -> set[Key]:
        return {row_key(r) for r in self._rows}

    def add(self, row: dict[str, Any]) -> None:
        self._rows.append(row)

    def rows(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._rows))

    def close(self) -> None:
        pass


class SqliteStore:
    """Rows in a SQLite file, committed one by one as trials end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(path), check_same_thread=False)
            # WAL: a committed row survives a crash without rewriting the file per row.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
            self._db.commit()
        except sqlite3.DatabaseError as exc:
            raise ValueError(
                f"experiments: {str(path)!r} is not a results file this version can use "
                f"({exc}); give another path, or delete it to start over"
            ) from None

    def keys(self) -> set[Key]:
        cursor = self._db.execute(
            "SELECT scenario, params, case_name, seed, repetition FROM trials"
        )
        return {(s, p, c, int(seed), int(r)) for s, p, c, seed, r in cursor}

    def add(self, row: dict[str, Any]) -> None:
        key = row_key(row)
        self._db.execute(
            "INSERT OR REPLACE INTO trials VALUES (?, ?, ?, ?, ?, ?)",
            (*key, json.dumps(row, ensure_ascii=False, allow_nan=True)),
        )
        self._db.commit()

    def rows(self) -> Iterator[dict[str, Any]]:
        cursor = self._db.execute("SELECT row FROM trials ORDER BY rowid")
        for (text,) in cursor:
            yield json.loads(text)

    def close(self) -> None:
        self._db.close()


def open_store(path: str | os.PathLike[str] | None) -> MemoryStore | SqliteStore:
    """A store for `path` (None: in memory); a `.parquet` path is refused with the fix."""
    if path is None:
        return MemoryStore()
    where = Path(path)
    if where.suffix.lower() == ".parquet":
        raise ValueError(
            f"experiments: a run writes its rows to SQLite as they arrive, so it can resume; "
            f"got {str(where)!r}; give a .sqlite path, then results.to_parquet(...) to export"
        )
    return SqliteStore(where)
