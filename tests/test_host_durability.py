"""What a host acknowledges, it keeps: the store is the event log (issue 25).

The daemon's rules these pin: a seq is the key of a row already written
(`pkg/eventlog/sql.go` `gormStream.Append`); a session is answered 201 after
its row is written, 500 when it cannot be (`pkg/attach/registry.go`
`registerWithACL`); one process holds a session's log (`pkg/eventlog/lock.go`
`AcquireLock`, which names the holder); a replay reads the log, clamped to the
session's newest 5,000 (`pkg/attach/broadcaster.go` `clampReplaySince`,
`Since`); `eventlog.Open` fails in one wrapped error.

Disk faults come two ways: a fault injected at the store's write layer
(`StoreFile.write_fault`, everywhere) and a real small filesystem (a tmpfs
mounted with `size=`, where this process may mount one).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coreagent_sdk import ASGITransport
from coreagent_sdk.host import AgentHost, MultiAgentHost, Turn
from coreagent_sdk.host.__main__ import main as host_main
from tests.processes import reap
from tests.test_host_fidelity import FRAME, JSON, frames, new_session, one_turn, seqs

FULL = "database or disk is full"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def command_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command puts the working directory on sys.path (as `python -m` does): undone."""
    monkeypatch.setattr(sys, "path", list(sys.path))


def client(host: AgentHost) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=ASGITransport(host.app), base_url="http://agent.test")


def host_on(store: Path | None, **options: Any) -> AgentHost:
    return AgentHost("agent", store=store, session_rate_limit=None, **options)


def disk_full() -> None:
    raise sqlite3.OperationalError(FULL)


def turn_of(got: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The frames of the live turn: from its first `inbox` frame on."""
    start = next(i for i, (e, _) in enumerate(got) if e == "inbox")
    return got[start:]


def failed_turn(event: str, payload: dict[str, Any]) -> bool:
    return event == "status-update" and payload.get("turn_state") == "idle"


async def turn_until_idle(http: httpx.AsyncClient, path: str) -> list[tuple[str, dict[str, Any]]]:
    async def inject() -> None:
        answer = await http.post(f"{path}/inject", headers=JSON, json={"message": "hi"})
        assert answer.status_code == 200, answer.text

    seen_streaming: list[bool] = []

    def stop(event: str, payload: dict[str, Any]) -> bool:
        if event == "status-update" and payload.get("turn_state") == "streaming":
            seen_streaming.append(True)
        return bool(seen_streaming) and failed_turn(event, payload)

    return turn_of(await frames(http, f"{path}/events", stop, after=inject))


# --- acknowledged means stored: the fault at the write layer ------------------------------


async def test_a_session_is_answered_201_only_once_its_row_is_stored(tmp_path: Path) -> None:
    """Pins `registerWithACL`: the row is written before the answer; a write that fails is
    500 in the daemon's words ("create session: register: attach: persist session ACL: ..."),
    and the session is not listed, not resumable, and not in the file."""
    store = tmp_path / "sessions.sqlite3"
    host = host_on(store)
    async with client(host) as http:
        await host.open()
        host.store.file.write_fault = disk_full
        refused = await http.post("/sessions", headers=JSON)
        assert refused.status_code == 500, refused.text
        assert refused.text == f"create session: register: attach: persist session ACL: {FULL}\n"
        listed = (await http.get("/sessions", headers=JSON)).json()["sessions"]
        assert [row["sessionID"] for row in listed] == ["default"]
        host.store.file.write_fault = None
        kept = await new_session(http)
    await host.aclose()
    again = host_on(store)
    async with client(again) as http:
        listed = (await http.get("/sessions", headers=JSON)).json()["sessions"]
        assert sorted(row["sessionID"] for row in listed) == sorted(
            ["default", kept.rsplit("/", 1)[1]]
        )
    await again.aclose()


async def test_a_turn_whose_events_cannot_be_stored_fails_and_uses_no_seq(
    tmp_path: Path,
) -> None:
    """Pins `gormStream.Append` (a seq is the key of a row written): the user event that
    starts a turn is written before the turn runs; when it cannot be, the turn fails with
    a `turn-error` (kind "unknown", the eventlog's words), no `agent` frame is sent, and
    the next event takes the next seq: the failed write used none."""
    ran: list[str] = []

    async def agent(turn: Turn) -> None:
        ran.append(turn.prompt)
        await turn.say("answer")

    host = host_on(tmp_path / "sessions.sqlite3", behavior=agent)
    async with client(host) as http:
        path = await new_session(http)
        before = seqs(await one_turn(http, path))
        host.store.file.write_fault = disk_full
        failed = await turn_until_idle(http, path)
        assert [e for e, _ in failed if e == "agent"] == []
        errors = [p for e, p in failed if e == "turn-error"]
        assert errors == [
            {
                "kind": "unknown",
                "message": f"eventlog: insert overlay row: {FULL}",
                "retryable": False,
            }
        ]
        assert ran == ["hello"]  # the agent did not run on an unwritten user event
        host.store.file.write_fault = None
        after = seqs(turn_of(await one_turn(http, path, since=str(before[-1]))))
        assert after == [before[-1] + 1, before[-1] + 2]
    await host.aclose()


async def test_an_event_that_cannot_be_stored_mid_turn_ends_the_turn_unsent(
    tmp_path: Path,
) -> None:
    """A write failing after the turn started fails it: that event and nothing after it is
    sent, the agent's next event raises (its turn ends there), and the turn ends in a
    turn-error. (A turn's events are committed as it yields, so the agent learns of the
    failure at its first event after the failed commit.)"""
    host_box: list[AgentHost] = []
    reached: list[str] = []

    async def agent(turn: Turn) -> None:
        await turn.narrate("step one", tool="look")
        await asyncio.sleep(0)  # its commit runs here
        host_box[0].store.file.write_fault = disk_full
        await turn.say("never sent")
        await asyncio.sleep(0)  # the commit that fails
        reached.append("yielded")
        await turn.chunk("nor this")
        reached.append("after the failed write")

    host = host_on(tmp_path / "sessions.sqlite3", behavior=agent)
    host_box.append(host)
    async with client(host) as http:
        path = await new_session(http)
        got = await turn_until_idle(http, path)
        texts = [p["event"]["Content"]["parts"][0]["text"] for e, p in got if e == "agent"]
        assert texts[-1] == "step one"
        assert "never sent" not in texts and "nor this" not in texts
        assert [p["kind"] for e, p in got if e == "turn-error"] == ["unknown"]
        assert [e for e, _ in got][-2:] == ["turn-error", "status-update"]
        assert reached == ["yielded"]
        host.store.file.write_fault = None
    await host.aclose()


async def test_a_turns_frames_reach_a_reader_in_as_few_writes_as_before_they_were_stored(
    tmp_path: Path,
) -> None:
    """Storing events must not cost a reader more writes: the turn's opening frames leave
    with its user event once that is committed, and its answer with the turn-complete,
    idle and usage frames that follow it (each write costs a reader a wake-up and a parse:
    a frame apiece made a call half again as slow). The order on the wire is unchanged."""

    async def agent(turn: Turn) -> None:
        await turn.say("answer")

    host = host_on(tmp_path / "sessions.sqlite3", behavior=agent)
    async with client(host) as http:
        path = await new_session(http)
        writes: list[list[str]] = []

        async def inject() -> None:
            answer = await http.post(f"{path}/inject", headers=JSON, json={"message": "hi"})
            assert answer.status_code == 200, answer.text

        async def read() -> None:
            async with http.stream("GET", f"{path}/events") as response:
                async for chunk in response.aiter_raw():
                    writes.append([m.decode() for m in re.findall(rb"event: (\S+)", chunk)])
                    if len(writes) == 1:
                        await inject()
                    if "usage-update" in writes[-1] and "turn-complete" in writes[-1]:
                        return

        await asyncio.wait_for(read(), 10)
    await host.aclose()
    turn = [w for w in writes if "capabilities" not in w]
    assert turn == [
        ["inbox"],  # queued, as the inject is answered
        ["inbox", "status-update", "agent"],  # dequeued, streaming, the user event
        ["agent", "turn-complete", "status-update", "usage-update"],
    ]


async def test_a_frame_published_between_two_unsent_events_leaves_between_them(
    tmp_path: Path,
) -> None:
    """Frames leave in the order they were published, an event's once it is committed: a
    turn-error published after one event and before the next (an agent that reports an
    error and goes on), all three waiting for one commit, is sent between the two events,
    not after both."""

    async def agent(turn: Turn) -> None:
        await turn.narrate("one", tool="look")
        with contextlib.suppress(Exception):  # what `error` raises to end the turn
            await turn.error("tool", "the tool failed; trying another")
        await turn.say("two")

    host = host_on(tmp_path / "sessions.sqlite3", behavior=agent)
    async with client(host) as http:
        path = await new_session(http)
        got = turn_of(await one_turn(http, path))
    await host.aclose()
    said = [
        p["event"]["Content"]["parts"][0]["text"] if e == "agent" else e
        for e, p in got
        if e in ("agent", "turn-error")
    ]
    assert said[1:] == ["one", "turn-error", "two"]  # after the user event


async def test_a_failed_write_is_logged_once_with_its_cause_and_again_when_it_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = host_on(tmp_path / "sessions.sqlite3")
    async with client(host) as http:
        await host.open()
        host.store.file.write_fault = disk_full
        with caplog.at_level(logging.WARNING, logger="coreagent_sdk.host"):
            for _ in range(3):
                assert (await http.post("/sessions", headers=JSON)).status_code == 500
            host.store.file.write_fault = None
            await new_session(http)
            await new_session(http)
    await host.aclose()
    said = [r.getMessage() for r in caplog.records if r.name == "coreagent_sdk.host"]
    assert len([m for m in said if FULL in m]) == 1, said
    assert "cannot rollback" not in " ".join(said)
    assert len([m for m in said if "is written again" in m]) == 1, said


async def test_a_store_file_deleted_under_the_host_is_noticed_by_the_next_write(
    tmp_path: Path,
) -> None:
    store = tmp_path / "sessions.sqlite3"
    host = host_on(store)
    async with client(host) as http:
        await new_session(http)
        for name in (store, Path(f"{store}-wal"), Path(f"{store}-shm")):
            name.unlink(missing_ok=True)
        refused = await http.post("/sessions", headers=JSON)
        assert refused.status_code == 500
        assert "is gone" in refused.text and "restart the host" in refused.text
    await host.aclose()


async def test_a_deleted_session_is_answered_204_only_once_it_is_gone_from_the_store(
    tmp_path: Path,
) -> None:
    """Pins `handlers_delete_session.go`: a delete the store cannot record is a 500
    ("delete session: ..."), and the session is still there to delete again."""
    host = host_on(tmp_path / "sessions.sqlite3")
    async with client(host) as http:
        path = await new_session(http)
        host.store.file.write_fault = disk_full
        refused = await http.delete(path, headers=JSON)
        assert refused.status_code == 500
        assert refused.text == f"delete session: {FULL}\n"
        host.store.file.write_fault = None
        assert (await http.delete(path, headers=JSON)).status_code == 204
    await host.aclose()


# --- one host per store ------------------------------------------------------------------


@pytest.mark.parametrize("first_kind", ["AgentHost", "MultiAgentHost"])
async def test_a_second_host_on_a_store_in_use_is_refused_naming_the_holder(
    tmp_path: Path, first_kind: str
) -> None:
    """Pins `AcquireLock` (ErrSessionLocked names the holder): a second host, of either
    kind, is refused before it serves anything; once the first closes, it opens."""
    store = tmp_path / "sessions.sqlite3"
    first: AgentHost | MultiAgentHost
    if first_kind == "AgentHost":
        first = host_on(store)
        await first.open()
    else:
        first = MultiAgentHost({"a": None}, store=store)
        await first.store.check()
    second = host_on(store)
    with pytest.raises(ValueError, match="is in use by another host") as refused:
        await second.open()
    message = str(refused.value)
    assert message.startswith(f"AgentHost: store {str(store)!r} is in use by another host")
    assert f"process {os.getpid()} on " in message
    assert "stop that host first, or give this one a file of its own" in message
    assert "\n" not in message
    await first.aclose()
    await second.open()
    await second.aclose()


# --- memory: events are in the store, not in the session ---------------------------------


async def test_a_session_holds_its_events_only_until_its_subscribers_read_them(
    tmp_path: Path,
) -> None:
    """100 events of 1 MB each: once the subscriber read them, the session holds at most a
    few MB (the in-memory log held all 100 MB), and a replay from since=0 sends them all
    while holding about one page at a time."""
    size, count = 1 << 20, 100
    blob = "x" * size

    async def big(turn: Turn) -> None:
        for _ in range(count):
            await turn.chunk(blob)
        await turn.say("done")

    async def drain(http: httpx.AsyncClient, url: str, after: Any = None) -> list[int]:
        """The agent seqs of a stream, read until the turn's events are all in (kept: seqs)."""
        got: list[int] = []
        buf = b""
        async with http.stream("GET", url) as response:
            async for chunk in response.aiter_bytes():
                buf += chunk
                while b"\n\n" in buf:
                    raw, buf = buf.split(b"\n\n", 1)
                    if raw.startswith(b"event: agent"):
                        got.append(json.loads(raw.split(b"data: ", 1)[1])["seq"])
                        if len(got) == count + 2:  # the user event, the chunks, the answer
                            return got
                    elif raw.startswith(b"event: capabilities") and after is not None:
                        await after()
        return got

    host = host_on(tmp_path / "sessions.sqlite3", behavior=big)
    async with client(host) as http:
        path = await new_session(http)

        async def inject() -> None:
            await http.post(f"{path}/inject", headers=JSON, json={"message": "go"})

        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            live = await asyncio.wait_for(drain(http, f"{path}/events", after=inject), 60)
            held = tracemalloc.get_traced_memory()[0] - base
            tracemalloc.reset_peak()
            before_replay = tracemalloc.get_traced_memory()[0]
            replayed = await asyncio.wait_for(drain(http, f"{path}/events?since=0"), 60)
            replay_peak = tracemalloc.get_traced_memory()[1] - before_replay
        finally:
            tracemalloc.stop()
        assert len(live) == count + 2 and replayed == live
        assert held < 8 * size, f"the session holds {held / size:.1f} MB after its turn"
        assert replay_peak < 12 * size, f"a replay peaked at {replay_peak / size:.1f} MB"
    await host.aclose()


async def answer_bytes(http: httpx.AsyncClient, path: str) -> int:
    """One turn on `path`, read as bytes (nothing of it kept): the largest frame's size."""
    biggest, buf = 0, b""
    async with http.stream("GET", f"{path}/events") as response:
        async for chunk in response.aiter_bytes():
            if not buf and b"capabilities" in chunk:
                await http.post(f"{path}/inject", headers=JSON, json={"message": "go"})
            buf += chunk
            while b"\n\n" in buf:
                frame, buf = buf.split(b"\n\n", 1)
                biggest = max(biggest, len(frame))
                if frame.startswith(b"event: usage-update") and b"last_turn" in frame:
                    return biggest
    return biggest


async def test_a_session_whose_turn_is_over_holds_none_of_its_answer(tmp_path: Path) -> None:
    """A session idle until the sweep (up to a minute, as on a daemon) keeps no frame of
    its turn: its 4 MB answer, once read, is in the store only (it once kept the last
    write's result, the answer's frame, until evicted: 200 KB answers made an in-process
    soak hold 220 KB a session)."""
    size = 4 << 20

    async def answer(turn: Turn) -> None:
        await turn.say("y" * size)

    host = host_on(tmp_path / "sessions.sqlite3", behavior=answer)
    async with client(host) as http:
        path = await new_session(http)
        await http.get("/sessions")  # the host's own one-time allocations come first
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            biggest = await answer_bytes(http, path)
            assert biggest > size
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        assert path.rsplit("/", 1)[1] in host.sessions  # still in memory, idle
        assert held < size // 8, f"an idle session holds {held / size:.2f}x its answer"
    await host.aclose()


# --- startup in one line ----------------------------------------------------------------


def _corrupt(path: Path) -> None:
    """A store whose first page (the schema) is garbage past the header."""
    host = host_on(path)

    async def made() -> None:
        async with client(host) as http:
            await new_session(http)
        await host.aclose()

    asyncio.run(made())
    with path.open("r+b") as f:
        f.seek(100)
        f.write(bytes(random.Random(7).randrange(256) for _ in range(3000)))


def _newer(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version=99")


def _many_agents(path: Path) -> None:
    host = MultiAgentHost({"a": None}, store=path)

    async def made() -> None:
        async with httpx.AsyncClient(
            transport=ASGITransport(host.app("a")), base_url="http://a.test"
        ) as http:
            await http.post("/sessions", headers=JSON)
        await host.aclose()

    asyncio.run(made())


BAD_STORES = {
    "corrupted": (_corrupt, "is corrupted", "restore it from a backup"),
    "not a database": (
        lambda p: p.write_bytes(b"my notes " * 1000),
        "is not a SQLite database",
        "name a new file",
    ),
    "a newer schema": (_newer, "has schema 99", "serve it with that version"),
    "another kind of host's": (_many_agents, "MultiAgentHost's agents", "file of its own"),
    "a directory": (lambda p: p.mkdir(), "is a directory", "name a file"),
}


@pytest.mark.parametrize("case", sorted(BAD_STORES))
def test_a_store_that_cannot_be_served_stops_the_command_in_one_line(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str], command_path: None
) -> None:
    """Pins `eventlog.Open` (one wrapped error): exit 1, one line naming the file and the
    fix, no traceback, nothing listening."""
    make, why, fix = BAD_STORES[case]
    store = tmp_path / "sessions.sqlite3"
    make(store)
    code = host_main(["tests.host_agents:echo", "--store", str(store)])
    err = capsys.readouterr().err
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("coreagent_sdk.host: AgentHost: store ")
    assert repr(str(store)) in lines[0] and why in lines[0] and fix in lines[0], lines[0]


def test_a_store_in_a_missing_directory_stops_the_command_naming_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command_path: None
) -> None:
    store = tmp_path / "nowhere" / "sessions.sqlite3"
    assert host_main(["tests.host_agents:echo", "--store", str(store)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"coreagent_sdk.host: AgentHost: store {str(store)!r} cannot be made: its directory "
        f"{str(tmp_path / 'nowhere')!r} does not exist; create it, or name a file in an "
        "existing directory"
    )


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr to make a file immutable")
def test_an_immutable_store_stops_the_command_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command_path: None
) -> None:
    store = tmp_path / "sessions.sqlite3"
    _newer(store)
    with contextlib.closing(sqlite3.connect(store)) as db:
        db.execute("PRAGMA user_version=2")
    made = subprocess.run(["chattr", "+i", str(store)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"chattr +i refused here: {made.stderr.decode().strip()}")
    try:
        assert host_main(["tests.host_agents:echo", "--store", str(store)]) == 1
    finally:
        subprocess.run(["chattr", "-i", str(store)], check=True)
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"coreagent_sdk.host: AgentHost: store {str(store)!r} cannot be")
    assert "writable" in err and "\n" not in err


# --- a real small filesystem ------------------------------------------------------------


@contextlib.contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (skips when this process may not mount one)."""
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small filesystem needs root and mount(8)")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    """Fill the filesystem to the last byte; the filler's path (delete it to make room)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for block in (1 << 16, 4096, 1):  # bounded: the disk is small
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * block) == block:
                    pass
    finally:
        os.close(fd)
    return filler


def all_seqs(path: Path) -> list[int]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [s for (s,) in db.execute("SELECT seq FROM events ORDER BY seq")]


async def test_a_full_disk_fails_what_cannot_be_stored_and_writes_resume_with_room(
    tmp_path: Path,
) -> None:
    """A 1 MiB tmpfs fills up: what fails is answered 500 or fails its turn, what was
    answered is in the file after a restart, seqs stay unique, and once there is room
    again sessions and turns go on."""
    with small_disk(tmp_path / "disk", "1m") as disk:
        store = disk / "sessions.sqlite3"
        host = host_on(store)
        acknowledged: list[str] = []
        sent: dict[int, Any] = {}
        async with client(host) as http:
            path = await new_session(http)
            acknowledged.append(path)
            for e, p in turn_of(await one_turn(http, path)):
                if e == "agent":
                    sent[p["seq"]] = p["event"]
            filler = fill(disk)
            statuses = []
            for _ in range(50):  # bounded: a full disk fails a write well before this
                answer = await http.post("/sessions", headers=JSON)
                statuses.append(answer.status_code)
                if answer.status_code == 201:
                    body = answer.json()
                    acknowledged.append(f"/sessions/{body['app']}/{body['sessionID']}")
                else:
                    assert answer.status_code == 500
                    assert answer.text.startswith("create session: register: attach: ")
                    assert FULL in answer.text
                    break
            assert statuses[-1] == 500, statuses
            failed = await turn_until_idle(http, path)
            assert [p["kind"] for e, p in failed if e == "turn-error"] == ["unknown"]
            assert [e for e, _ in failed if e == "agent"] == []
            filler.unlink()
            resumed = await new_session(http)
            acknowledged.append(resumed)
            for e, p in turn_of(await one_turn(http, resumed)):
                if e == "agent":
                    sent[p["seq"]] = p["event"]
        await host.aclose()
        stored = all_seqs(store)
        assert set(sent) <= set(stored) and len(stored) == len(set(stored))
        again = host_on(store)
        async with client(again) as http:
            listed = {r["sessionID"] for r in (await http.get("/sessions")).json()["sessions"]}
            assert {p.rsplit("/", 1)[1] for p in acknowledged} <= listed
            later = seqs(turn_of(await one_turn(http, acknowledged[0], since="0")))
            assert min(later) > max(sent)  # numbered past every seq a client was sent
        await again.aclose()


async def chattr(flag: str, *paths: Path) -> bool:
    done = await asyncio.create_subprocess_exec(
        "chattr", flag, *map(str, paths), stderr=asyncio.subprocess.DEVNULL
    )
    return await done.wait() == 0


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr to make files immutable")
async def test_a_store_made_read_only_while_running_fails_writes_until_it_is_writable_again(
    tmp_path: Path,
) -> None:
    """The file and its write-ahead log made immutable under a running host (`chattr +i`: even the
    descriptors it holds cannot write): a new session is 500, a turn fails unsent, nothing
    is marked saved; made writable again, writes go on and the file holds what was sent."""
    store = tmp_path / "sessions.sqlite3"
    host = host_on(store)
    sent: set[int] = set()
    async with client(host) as http:
        path = await new_session(http)
        # Not the -shm: SQLite maps it into memory, where a refused write is a SIGBUS.
        files = [p for p in (store, Path(f"{store}-wal")) if p.exists()]
        if not await chattr("+i", *files):
            pytest.skip("this filesystem has no immutable files")
        try:
            refused = await http.post("/sessions", headers=JSON)
            assert refused.status_code == 500, refused.text
            failed = await turn_until_idle(http, path)
            assert [e for e, _ in failed if e == "agent"] == []
            assert [p["kind"] for e, p in failed if e == "turn-error"] == ["unknown"]
        finally:
            await chattr("-i", *files)
        kept = await new_session(http)
        sent.update(seqs(turn_of(await one_turn(http, kept))))
        assert sent
    await host.aclose()
    assert sent <= set(all_seqs(store))


# --- real processes: kill -9, two hosts ---------------------------------------------------


class ForkServer:
    """`tests/crash_host.py`: hosts forked from one process that imported them already."""

    def __init__(self, store: Path, *mode: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.crash_host", str(store), *mode],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    async def start(self) -> dict[str, Any]:
        """Fork a host; its line: {"pid", "url"} serving, or {"pid", "error"} refused."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("start\n")
        self.proc.stdin.flush()
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), 60)
        assert line, "the fork server ended"
        started: dict[str, Any] = json.loads(line)
        return started

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        reap(self.proc)


@contextlib.asynccontextmanager
async def fork_server(store: Path, *mode: str) -> AsyncIterator[ForkServer]:
    server = ForkServer(store, *mode)
    try:
        yield server
    finally:
        server.close()


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
async def test_a_second_host_process_is_refused_and_a_killed_ones_lock_does_not_block(
    tmp_path: Path,
) -> None:
    store = tmp_path / "sessions.sqlite3"
    async with fork_server(store) as hosts:
        first = await hosts.start()
        assert "url" in first, first
        second = await hosts.start()
        assert second.get("error", "").startswith(
            f"AgentHost: store {str(store)!r} is in use by another host (process {first['pid']} on "
        ), second
        kill(first["pid"])
        third = await hosts.start()
        assert "url" in third, third
        kill(third["pid"])


class Ledger:
    """Everything the crash loop's clients were told, to check against the log."""

    def __init__(self) -> None:
        self.sessions: list[str] = []  # paths answered 201
        self.events: dict[int, tuple[str, Any]] = {}  # seq -> (session path, event)
        self.last: dict[str, int] = {}  # session path -> the newest seq its clients saw
        # (session path, since, seqs seen) of every resumed stream: nothing may be missing
        self.resumes: list[tuple[str, int, list[int]]] = []

    def saw(self, path: str, seq: int, event: Any) -> None:
        known = self.events.setdefault(seq, (path, event))
        assert known == (path, event), f"seq {seq} was given twice: {known} and {event}"
        self.last[path] = max(self.last.get(path, 0), seq)


async def client_loop(url: str, ledger: Ledger, rng: random.Random, name: str) -> None:
    """Create sessions, resume their streams from the last seq seen, inject; until killed."""
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        for i in range(1000):  # bounded: the host is killed long before
            if not ledger.sessions or rng.random() < 0.25:
                created = await http.post("/sessions", headers=JSON)
                assert created.status_code == 201, created.text
                body = created.json()
                ledger.sessions.append(f"/sessions/{body['app']}/{body['sessionID']}")
            path = rng.choice(ledger.sessions)
            since = ledger.last.get(path, 0)
            got: list[int] = []
            ledger.resumes.append((path, since, got))
            async with http.stream("GET", f"{path}/events?since={since}") as stream:
                assert stream.status_code == 200
                answer = await http.post(
                    f"{path}/inject", headers=JSON, json={"message": f"{name}-{i}"}
                )
                assert answer.status_code == 200
                buf = b""
                async for chunk in stream.aiter_bytes():
                    buf += chunk
                    done = False
                    for event, data in FRAME.findall(buf):
                        payload = json.loads(data)
                        if event == b"agent":
                            ledger.saw(path, payload["seq"], payload["event"])
                            got.append(payload["seq"])
                        done = done or event == b"turn-complete"
                    buf = buf[buf.rfind(b"\n\n") + 2 :] if b"\n\n" in buf else buf
                    if done:
                        break


async def replay(url: str, path: str, upto: int) -> dict[int, Any]:
    """A session's log read back with since=0, up to seq `upto` (bounded: 20 s). A log
    that lacks `upto` falls silent before it: after 3 s of silence, what came is returned
    (only a failing run waits that long)."""
    out: dict[int, Any] = {}
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(10, read=3)) as http:

        async def read() -> None:
            buf = b""
            async with http.stream("GET", f"{path}/events?since=0") as stream:
                assert stream.status_code == 200, f"{path}: {stream.status_code}"
                if upto == 0:
                    return
                async for chunk in stream.aiter_bytes():
                    buf += chunk
                    for event, data in FRAME.findall(buf):
                        if event == b"agent":
                            payload = json.loads(data)
                            out[payload["seq"]] = payload["event"]
                            if payload["seq"] >= upto:
                                return
                    buf = buf[buf.rfind(b"\n\n") + 2 :] if b"\n\n" in buf else buf

        with contextlib.suppress(httpx.ReadTimeout):
            await asyncio.wait_for(read(), 20)
    return out


@pytest.mark.slow
async def test_a_host_killed_at_random_moments_keeps_everything_it_acknowledged(
    tmp_path: Path,
) -> None:
    """The crash loop: a host with a store, clients creating sessions, injecting and reading
    with since=, killed with SIGKILL at 24 seeded random moments and restarted each time.
    Every 201 session exists after restart; every event a client was sent is in the log
    with the same seq and content; no seq is given twice; a client resuming from its last
    seq misses nothing."""
    rng = random.Random(25)
    store = tmp_path / "sessions.sqlite3"
    ledger = Ledger()
    async with fork_server(store) as hosts:
        for kill_no in range(24):
            host = await hosts.start()
            assert "url" in host, host
            url = host["url"]
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                listed = {r["sessionID"] for r in (await http.get("/sessions")).json()["sessions"]}
            missing = [p for p in ledger.sessions if p.rsplit("/", 1)[1] not in listed]
            assert missing == [], f"after kill {kill_no}: 201 sessions gone: {missing}"
            clients = [
                asyncio.create_task(
                    client_loop(url, ledger, random.Random(rng.random()), f"k{kill_no}c{c}")
                )
                for c in range(3)
            ]
            # Killed at a random moment once this round's clients were sent something (a
            # loaded machine may take a while to get there), so every round can lose something.
            seen = len(ledger.events)
            for _ in range(2000):  # bounded: 20 s
                if len(ledger.events) > seen or all(c.done() for c in clients):
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(rng.uniform(0, 0.3))
            kill(host["pid"])
            results = await asyncio.gather(*clients, return_exceptions=True)
            for result in results:  # the kill cuts them off; any other failure is the test's
                if isinstance(result, BaseException) and not isinstance(
                    result, (httpx.TransportError, asyncio.TimeoutError)
                ):
                    raise result
        host = await hosts.start()
        assert "url" in host, host
        log: dict[int, tuple[str, Any]] = {}
        for path in ledger.sessions:
            for seq, event in (await replay(host["url"], path, ledger.last.get(path, 0))).items():
                log[seq] = (path, event)
        kill(host["pid"])
    assert len(ledger.events) > 50, "the clients saw too little to prove anything"
    lost = {seq: seen for seq, seen in ledger.events.items() if log.get(seq) != seen}
    assert lost == {}, f"{len(lost)} events clients were sent are not in the log as sent"
    for path, since, got in ledger.resumes:
        if got:
            expected = sorted(s for s, (p, _) in log.items() if p == path and since < s <= got[-1])
            assert got == expected, f"a client resuming {path} from {since} missed events"


@pytest.mark.slow
async def test_hosts_sharing_a_store_killed_under_load_keep_everything_either_acknowledged(
    tmp_path: Path,
) -> None:
    """Issue 38's guard that held, pinned: two hosts on one `SharedStore` file (their writes
    committed together), clients on both, the process killed with SIGKILL at 6 seeded random
    moments and restarted. Every 201 session of either host exists after restart, and every
    event a client of either was sent is in its host's log with the same seq and content."""
    rng = random.Random(38)
    store = tmp_path / "fleet.sqlite3"
    ledgers = {"crashy": Ledger(), "other": Ledger()}
    async with fork_server(store, "shared") as hosts:
        for kill_no in range(6):
            host = await hosts.start()
            assert "urls" in host, host
            for name, ledger in ledgers.items():
                async with httpx.AsyncClient(base_url=host["urls"][name], timeout=10) as http:
                    listed = {
                        r["sessionID"] for r in (await http.get("/sessions")).json()["sessions"]
                    }
                missing = [p for p in ledger.sessions if p.rsplit("/", 1)[1] not in listed]
                assert missing == [], f"after kill {kill_no}: {name}'s 201 sessions gone"
            clients = [
                asyncio.create_task(
                    client_loop(
                        host["urls"][name], ledger, random.Random(rng.random()), f"k{kill_no}{c}"
                    )
                )
                for name, ledger in ledgers.items()
                for c in range(2)
            ]
            seen = sum(len(ledger.events) for ledger in ledgers.values())
            for _ in range(2000):  # bounded: 20 s, until this round's clients were sent something
                now = sum(len(ledger.events) for ledger in ledgers.values())
                if now > seen or all(c.done() for c in clients):
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(rng.uniform(0, 0.3))
            kill(host["pid"])
            for result in await asyncio.gather(*clients, return_exceptions=True):
                if isinstance(result, BaseException) and not isinstance(
                    result, (httpx.TransportError, asyncio.TimeoutError)
                ):
                    raise result
        host = await hosts.start()
        assert "urls" in host, host
        logs: dict[str, dict[int, tuple[str, Any]]] = {name: {} for name in ledgers}
        for name, ledger in ledgers.items():
            for path in ledger.sessions:
                got = await replay(host["urls"][name], path, ledger.last.get(path, 0))
                for seq, event in got.items():
                    logs[name][seq] = (path, event)
        kill(host["pid"])
    for name, ledger in ledgers.items():
        assert len(ledger.events) > 10, f"{name}'s clients saw too little to prove anything"
        lost = {s: seen for s, seen in ledger.events.items() if logs[name].get(s) != seen}
        assert lost == {}, f"{len(lost)} events {name}'s clients were sent are not in its log"


# --- what a commit survives: the operator's choice ---------------------------------------


@pytest.mark.parametrize(("given", "pragma"), [(None, 1), ("normal", 1), ("full", 2)])
async def test_the_operator_chooses_what_a_commit_survives(
    tmp_path: Path, given: str | None, pragma: int
) -> None:
    """`store_sync` (and `--store-sync`): "normal" is SQLite's synchronous=NORMAL (1), which
    survives a killed process; "full" (2) syncs every commit and survives a power cut."""
    options = {} if given is None else {"store_sync": given}
    host = host_on(tmp_path / "sessions.sqlite3", **options)
    await host.open()
    db = host.store.file._db[0]
    assert db.conn.execute("PRAGMA synchronous").fetchone()[0] == pragma
    await host.aclose()


def test_a_sync_mode_that_is_not_one_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r"store_sync must be 'normal' .* or 'full' .*'always'"):
        AgentHost("agent", store="x.sqlite3", store_sync="always")


def test_the_command_passes_store_sync_and_refuses_it_without_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command_path: None
) -> None:
    from coreagent_sdk.host.__main__ import build, main, parser

    store = str(tmp_path / "s.sqlite3")
    host = build(
        parser().parse_args(["tests.host_agents:echo", "--store", store, "--store-sync", "full"])
    )
    assert isinstance(host, AgentHost) and host.store.file.synchronous == "full"
    with pytest.raises(SystemExit, match="--store-sync applies to a store file"):
        main(["tests.host_agents:echo", "--store-sync", "full"])
