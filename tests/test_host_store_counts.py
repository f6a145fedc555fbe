"""What the store keeps in memory per session it has written: bounded however many it writes.

The store counts each session's events since its last trim (it trims every
`_TRIM_EVERY` events, keeping the replay window). One counter per session ever
written grew a host that keeps or evicts its sessions by ~200 bytes a delegation
(bench/host_memory.py: 55 -> 63 MiB over 50,000 kept delegations).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coreagent_sdk.host import _store
from coreagent_sdk.host._store import _Db, _Event

WINDOW = 2
BOUND = 8  # the counted sessions, lowered from 1,024 for the test


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Db]:
    monkeypatch.setattr(_store, "_COUNTED_SESSIONS", BOUND)
    opened = _Db(str(tmp_path / "store.sqlite3"), WINDOW, False, "normal", "test")
    yield opened
    opened.close()


def events(db: _Db, session: str, n: int) -> None:
    db.write([_Event("agent", session, b'{"n":%d}' % i) for i in range(n)], None)


def rows(db: _Db, session: str) -> int:
    query = "SELECT count(*) FROM events WHERE session_id = ?"
    return int(db.conn.execute(query, (session,)).fetchone()[0])


def test_the_sessions_counted_stay_at_the_bound_however_many_sessions_are_written(
    db: _Db,
) -> None:
    for i in range(BOUND * 5):
        events(db, f"s{i}", 1)
        assert len(db.unpruned) <= BOUND
    assert len(db.unpruned) == BOUND  # the newest ones: none was let go early


def test_a_session_let_go_of_is_trimmed_to_the_window_first(db: _Db) -> None:
    events(db, "first", WINDOW + 3)  # past the window, short of a trim
    assert rows(db, "first") == WINDOW + 3
    for i in range(BOUND):  # one more counted session than the bound lets go of "first"
        events(db, f"s{i}", 1)
    assert ("agent", "first") not in db.unpruned
    assert rows(db, "first") == WINDOW
    kept = db.conn.execute("SELECT frame FROM events WHERE session_id = 'first' ORDER BY seq")
    assert [bytes(f).rsplit(b'"event":', 1)[1] for (f,) in kept] == [
        b'{"n":3}}\n\n',
        b'{"n":4}}\n\n',
    ]


def test_a_temporary_file_numbers_a_new_agents_events_without_reading_the_file() -> None:
    # A fleet's daemons share one temporary file: each one's first event asked the file for
    # a last seq it cannot hold (two reads of cold pages per call to a peer not called yet).
    db = _Db(None, WINDOW, True, "normal", "test")
    statements: list[str] = []
    try:
        db.conn.set_trace_callback(statements.append)
        first = db.write([_Event("fresh", "s-1", b"{}"), _Event("fresh", "s-1", b"{}")], None)
        again = db.write([_Event("fresh", "s-2", b"{}")], None)
        db.conn.set_trace_callback(None)
    finally:
        db.close()
    assert [seq for seq, _ in first + again] == [1, 2, 3]
    assert [s for s in statements if s.lstrip().upper().startswith("SELECT")] == []
