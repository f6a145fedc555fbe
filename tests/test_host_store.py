"""Sessions in the host's store: idle eviction frees memory only, and a restart resumes them.

Each test names the core-agent function it pins (`pkg/attach/registry.go`,
`pkg/attach/handlers.go`, `pkg/attach/session_acl_store.go`). Time moves on a
`FakeClock`: the host sweeps on it every max(idle / 4, 60 s), as `SweepIdle`
ticks, so a test drives hours of idleness without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import shutil
import sqlite3
import tempfile
import weakref
from pathlib import Path
from typing import Any

import httpx
import pytest

from coreagent_sdk import ASGITransport, FakeClock
from coreagent_sdk.host import REPLAY_WINDOW, AgentHost, Identity, MultiAgentHost, Turn
from coreagent_sdk.host._inbox import inbox_block
from simulator import Fleet
from tests.test_host_fidelity import (
    JSON,
    TOKENS,
    bearer,
    frames,
    new_session,
    one_turn,
    seqs,
    split_at_turn,
)

IDLE = 60.0  # a quarter is under a minute: the sweep runs every 60 s
V1_STORE = Path(__file__).parent / "fixtures" / "store" / "v1.sqlite3"


def client(host: AgentHost) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=ASGITransport(host.app), base_url="http://agent.test")


def make(clock: FakeClock, idle: float = IDLE, **options: Any) -> AgentHost:
    return AgentHost(
        "agent", clock=clock, session_idle_timeout=idle, session_rate_limit=None, **options
    )


async def advance(clock: FakeClock, seconds: float) -> None:
    """Move the clock, then let a sweeper it woke run its sweep (it awaits nothing else)."""
    clock.advance(seconds)
    for _ in range(3):  # the wake-up is scheduled, then the task runs to its next sleep
        await asyncio.sleep(0)


async def listing(http: httpx.AsyncClient, headers: dict[str, str] = JSON) -> dict[str, str]:
    """GET /sessions as {session id: status}."""
    answer = await http.get("/sessions", headers=headers)
    assert answer.status_code == 200, answer.text
    return {row["sessionID"]: row["status"] for row in answer.json()["sessions"]}


def sid_of(path: str) -> str:
    return path.rsplit("/", 1)[1]


async def test_an_evicted_session_stays_listed_idle_and_resumes_with_its_log() -> None:
    """Pins `SessionRegistry.EvictBefore` (memory only: the row stays), `listSessions` (the
    store's half as "idle") and `resumeAndRegister` (the next request brings the session back
    with its log; seqs go on from the host's one counter)."""
    clock = FakeClock()
    host = make(clock)
    async with client(host) as http:
        path = await new_session(http)
        first = seqs(await one_turn(http, path))
        touched = (await http.get("/sessions")).json()["sessions"][1]["last_touched_at"]
        await clock.until_sleeping()
        await advance(clock, 2 * IDLE)
        assert sid_of(path) not in host.sessions
        rows = (await http.get("/sessions")).json()["sessions"]
        assert rows == [
            rows[0],
            {
                "app": "core-agent",
                "user": "anonymous",
                "sessionID": sid_of(path),
                "has_event_log": True,
                "status": "idle",
                "last_touched_at": touched,
            },
        ]
        other = await new_session(http)
        between = seqs(await one_turn(http, other))
        replayed, live = split_at_turn(await one_turn(http, path, "again"))
        assert sid_of(path) in host.sessions
        assert replayed == first
        assert live == [between[-1] + 1, between[-1] + 2]
        assert (await listing(http))[sid_of(path)] == "active"
    await host.aclose()


@pytest.mark.parametrize(("idle", "period"), [(60.0, 60.0), (400.0, 100.0)])
async def test_a_session_idle_exactly_the_timeout_stays_until_the_next_sweep(
    idle: float, period: float
) -> None:
    """Pins `SessionRegistry.SweepIdle` (a tick every idleAfter / 4, floored to a minute) and
    `EvictBefore(now - idleAfter)` (evicted only when last touched strictly before the cutoff)."""
    clock = FakeClock()
    host = make(clock, idle)
    async with client(host) as http:
        sid = sid_of(await new_session(http))
        await clock.until_sleeping()
        await advance(clock, idle)  # a sweep runs now: idle exactly the timeout is not past it
        assert (await listing(http))[sid] == "active"
        await advance(clock, period - 0.001)  # no sweep before the next tick
        assert (await listing(http))[sid] == "active"
        await advance(clock, 0.001)
        assert (await listing(http))[sid] == "idle"
        assert sid not in host.sessions
    await host.aclose()


async def test_a_request_touches_a_session_and_moves_its_eviction() -> None:
    """Pins `lookupGated`: a memory hit is activity (`e.touch()`), so the sweep spares it."""
    clock = FakeClock()
    host = make(clock)
    async with client(host) as http:
        path = await new_session(http)
        await clock.until_sleeping()
        await advance(clock, IDLE)
        async with http.stream("GET", f"{path}/events") as stream:  # a touch at t = 60
            assert stream.status_code == 200
        await advance(clock, IDLE)  # t = 120: idle 60 s exactly, kept
        assert sid_of(path) in host.sessions
        await advance(clock, IDLE)
        assert sid_of(path) not in host.sessions
    await host.aclose()


async def test_a_session_with_a_queued_message_is_evicted_and_the_message_goes_with_it() -> None:
    """Pins `EvictBefore`: last touch alone decides; the daemon's inbox lives in the evicted
    agent (`pkg/agent/inbox.go`), so a message queued with `wake: false` is gone on resume."""
    clock = FakeClock()
    host = make(clock)
    async with client(host) as http:
        path = await new_session(http)
        queued = await http.post(
            f"{path}/inject", headers=JSON, json={"message": "for later", "wake": False}
        )
        assert queued.status_code == 200 and queued.json()["woke"] is False
        await clock.until_sleeping()
        await advance(clock, 2 * IDLE)
        assert (await listing(http))[sid_of(path)] == "idle"
        got = await one_turn(http, path, "now")
        prompts = [p["event"]["Content"]["parts"][0]["text"] for e, p in got if e == "agent"]
        # The daemon's [Inbox] bundle of "now" alone: "for later" went with the eviction.
        assert prompts[0] == inbox_block(["now"])
    await host.aclose()


async def test_a_running_turn_is_never_evicted() -> None:
    """The host spares a session whose turn runs (see differences.md: a daemon's pump touches
    it on every event, and cancels the turn of a session evicted anyway)."""
    clock = FakeClock()

    async def silent(turn: Turn) -> None:
        await clock.sleep(10 * IDLE)  # no event for ten idle timeouts
        await turn.say("done")

    host = make(clock, behavior=silent)
    async with client(host) as http:
        path = await new_session(http)
        assert (await http.post(f"{path}/inject", headers=JSON, json={"message": "go"})).is_success
        await clock.until_sleeping(2)  # the sweeper and the turn
        await advance(clock, 2 * IDLE)
        assert (await listing(http))[sid_of(path)] == "active"
    await host.aclose()


async def test_owners_viewers_and_contributors_survive_eviction_and_gate_the_resume() -> None:
    """Pins `resumeAndRegister` with `resumeGateFor`: the stored ACL is checked (read) before
    any resume, a caller it denies gets the 404 of a missing session and resumes nothing;
    `ListVisibleTo` lists an idle session to its owner, viewers and contributors only."""
    clock = FakeClock()
    tokens = {**TOKENS, "tok-dave": Identity("dave")}
    host = make(clock, tokens=tokens)
    async with client(host) as http:
        acl = {"viewers": ["bob"], "contributors": ["carol"]}
        created = await http.post("/sessions", headers=bearer("tok-alice"), json=acl)
        path = f"/sessions/core-agent/{created.json()['sessionID']}"
        sid = sid_of(path)
        await clock.until_sleeping()
        await advance(clock, 2 * IDLE)
        for token in ("tok-alice", "tok-bob", "tok-carol", "tok-root"):
            assert (await listing(http, bearer(token))).get(sid) == "idle", token
        assert sid not in await listing(http, bearer("tok-dave"))
        async with http.stream("GET", f"{path}/events", headers=bearer("tok-dave")) as denied:
            assert denied.status_code == 404
        assert sid not in host.sessions  # the gate turned dave away before any resume
        hi = {"message": "hi"}
        # bob may read, so the gate lets the resume happen; then writing is denied (404).
        assert (
            await http.post(f"{path}/inject", headers=bearer("tok-bob"), json=hi)
        ).status_code == 404
        assert sid in host.sessions
        await advance(clock, 2 * IDLE)
        got = await one_turn(http, path, headers=bearer("tok-carol"))  # carol still contributes
        assert [e for e, _ in got][-1] == "usage-update"
        assert (await http.delete(path, headers=bearer("tok-bob"))).status_code == 404
        assert (await http.delete(path, headers=bearer("tok-alice"))).status_code == 204
    await host.aclose()


async def test_a_deleted_session_is_gone_from_the_store_and_is_not_resumed() -> None:
    """Pins `doDeleteSession` -> `SessionRegistry.HardDelete`: the persisted row goes too."""
    clock = FakeClock()
    host = make(clock)
    async with client(host) as http:
        path = await new_session(http)
        await one_turn(http, path)
        await clock.until_sleeping()
        await advance(clock, 2 * IDLE)
        assert (await http.delete(path, headers=JSON)).status_code == 204  # resumed, deleted
        assert sid_of(path) not in await listing(http)
        async with http.stream("GET", f"{path}/events") as gone:
            assert gone.status_code == 404
    await host.aclose()


async def test_an_evicted_session_leaves_nothing_of_itself_in_memory() -> None:
    """Eviction frees memory: the session object is unreachable once it is in the store."""
    clock = FakeClock()
    host = make(clock)
    async with client(host) as http:
        path = await new_session(http)
        await one_turn(http, path)
        held = weakref.ref(host.sessions[sid_of(path)])
        await clock.until_sleeping()
        await advance(clock, 2 * IDLE)
        assert (await listing(http))[sid_of(path)] == "idle"  # written: the store answered
        gc.collect()
        assert held() is None
    await host.aclose()


async def test_a_host_restarted_on_its_store_file_serves_its_sessions_again(
    tmp_path: Path,
) -> None:
    """Pins the daemon's resume after restart (docs/session-resume-design.md, `Resume` from
    the row and the event log): sessions are listed, replay their events with their seqs,
    keep their owners and usage, and new seqs and ids go on past the old ones."""
    store = tmp_path / "sessions.sqlite3"
    clock = FakeClock()
    first = make(clock, tokens=TOKENS, store=store)
    async with client(first) as http:
        mine = await new_session(http, bearer("tok-alice"))
        before = seqs(await one_turn(http, mine, headers=bearer("tok-alice")))
        default = seqs(
            await one_turn(http, "/sessions/core-agent/default", headers=bearer("tok-root"))
        )
    await first.aclose()

    again = make(clock, tokens=TOKENS, store=store)
    async with client(again) as http:
        assert await listing(http, bearer("tok-alice")) == {sid_of(mine): "idle"}
        assert await listing(http, bearer("tok-bob")) == {}
        got = await one_turn(http, mine, "more", headers=bearer("tok-alice"))
        replayed, live = split_at_turn(got)
        assert replayed == before
        assert live == [default[-1] + 1, default[-1] + 2]
        usage = [p for e, p in got if e == "usage-update"]
        assert usage[0]["turns_total"] == 1 and usage[-1]["turns_total"] == 2  # snapshot, then
        boot = await frames(
            http,
            "/sessions/core-agent/default/events",
            lambda e, p: e == "agent" and p["seq"] == default[-1],
            headers=bearer("tok-root"),
        )
        assert seqs(boot) == default
        created = await http.post("/sessions", headers=bearer("tok-bob"))
        assert created.json()["sessionID"].startswith("s-0002")  # numbered on, not s-0001
    await again.aclose()


async def test_a_new_store_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    store = tmp_path / "sessions.sqlite3"
    host = AgentHost("agent", store=store, session_rate_limit=None)
    async with client(host) as http:
        await one_turn(http, await new_session(http))
    await host.aclose()
    assert store.stat().st_mode & 0o777 == 0o600


async def test_the_store_keeps_the_newest_replay_window_events(tmp_path: Path) -> None:
    """Pins the daemon's `maxReplayEvents` across a restart: the newest 5,000 come back."""

    async def chatty(turn: Turn) -> None:
        for i in range(REPLAY_WINDOW + 10):
            await turn.chunk(f"{i}")
        await turn.say("done")

    store = tmp_path / "sessions.sqlite3"
    first = AgentHost("agent", behavior=chatty, store=store, session_rate_limit=None)
    async with client(first) as http:
        path = await new_session(http)
        logged = seqs(await one_turn(http, path))
    await first.aclose()
    again = AgentHost("agent", store=store)
    async with client(again) as http:
        replay = await frames(
            http, f"{path}/events", lambda e, p: e == "agent" and p["seq"] == logged[-1]
        )
    await again.aclose()
    assert len(logged) == REPLAY_WINDOW + 12  # more than the window was logged
    assert seqs(replay) == logged[-REPLAY_WINDOW:]


async def test_the_default_store_is_a_temporary_file_made_on_first_use_and_removed_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without `store=` the log is a private temporary file: none until the host is first
    used (a host nobody called holds no file), removed by `aclose()`."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    clock = FakeClock()
    host = make(clock)
    assert files(tmp_path) == []  # never used: no file
    async with client(host) as http:
        assert (await listing(http)) == {"default": "active"}
        made = files(tmp_path)
        assert made and all(name.startswith("coreagent-host-") for name in made)
        path = await new_session(http)
        await one_turn(http, path)
        await clock.until_sleeping()
        await advance(clock, 2 * IDLE)
        assert (await listing(http))[sid_of(path)] == "idle"
    await host.aclose()
    assert files(tmp_path) == []


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def test_a_file_that_is_not_a_session_store_is_refused_with_the_fix(
    tmp_path: Path,
) -> None:
    garbage = tmp_path / "notes.txt"
    garbage.write_bytes(b"these are my notes, not a database" * 100)
    host = AgentHost("agent", store=garbage)
    with pytest.raises(ValueError, match=r"is not a SQLite database; name a new file"):
        await host.open()
    await host.aclose()
    assert garbage.read_bytes().startswith(b"these are my notes")


async def test_a_host_with_no_session_to_evict_runs_no_sweep() -> None:
    """The sweep task runs only while a session could be evicted (a thousand idle agents of a
    process hold no timers); its ticks keep the grid of the host's start all the same."""
    clock = FakeClock()
    host = make(clock)
    async with client(host) as http:
        assert (await listing(http)) == {"default": "active"}
        assert clock.sleepers == 0
        clock.advance(IDLE / 2)  # the next tick is at t = 60, counted from the host's start
        sid = sid_of(await new_session(http))
        await clock.until_sleeping()
        await advance(clock, IDLE / 2)  # t = 60: idle 30 s, kept
        await advance(clock, IDLE - 0.001)  # t = 119.999: the grid is the host's, no tick at 90
        assert (await listing(http))[sid] == "active"
        await advance(clock, 0.001)  # t = 120: idle 90 s, evicted; nothing left to sweep
        assert (await listing(http))[sid] == "idle"
        assert clock.sleepers == 0
    await host.aclose()


# --- one file for every agent of a MultiAgentHost ------------------------------------------


def agents(clock: FakeClock, store: Path | None = None, **options: Any) -> MultiAgentHost:
    host = MultiAgentHost(
        clock=clock, session_idle_timeout=IDLE, session_rate_limit=None, store=store, **options
    )
    for name in ("a", "b"):
        host.add(name)  # each runs the host's behaviour: echo
    return host


def client_of(host: MultiAgentHost, name: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=ASGITransport(host.app(name)), base_url=f"http://{name}.test"
    )


async def test_a_multi_agent_host_restarted_on_its_store_file_serves_every_agents_sessions(
    tmp_path: Path,
) -> None:
    """Each agent is a daemon of its own (`registry.go` `resumeAndRegister` from its rows and
    log): after a restart on the one file, each lists and replays its own sessions only, its
    `default` included, and numbers its seqs and session ids on from its own last ones."""
    store = tmp_path / "agents.sqlite3"
    clock = FakeClock()
    first = agents(clock, store)
    logged: dict[str, tuple[str, list[int], list[int]]] = {}
    for name in ("a", "b"):
        async with client_of(first, name) as http:
            path = await new_session(http)
            mine = seqs(await one_turn(http, path, f"to {name}"))
            default = seqs(await one_turn(http, "/sessions/core-agent/default", f"{name}!"))
            logged[name] = (path, mine, default)
    # Each agent counts from 1, as two daemons would: their seqs and defaults collide.
    assert logged["a"][1] == logged["b"][1] == [1, 2]
    await first.aclose()

    again = agents(clock, store)
    for name in ("a", "b"):
        path, mine, default = logged[name]
        async with client_of(again, name) as http:
            assert await listing(http) == {"default": "active", sid_of(path): "idle"}
            got = await one_turn(http, path, "more")
            said = [
                p["event"]["Content"]["parts"][0]["text"]
                for e, p in got
                if e == "agent" and p["event"]["Author"] != "user"
            ]
            assert said == [f"to {name}", "more"]  # its own log, not the other agent's
            replayed, live = split_at_turn(got)
            assert replayed == mine
            assert live == [default[-1] + 1, default[-1] + 2]
            boot = await frames(
                http,
                "/sessions/core-agent/default/events",
                lambda e, p, last=default[-1]: e == "agent" and p["seq"] == last,
            )
            assert [p["event"]["Content"]["parts"][0]["text"] for e, p in boot if e == "agent"][
                -1
            ] == f"{name}!"
            created = await http.post("/sessions", headers=JSON)
            assert created.json()["sessionID"].startswith("s-0002")
    await again.aclose()
    assert files(tmp_path) == ["agents.sqlite3"]  # one file, closed (no -wal left)


async def test_an_agents_evicted_session_is_listed_idle_for_it_alone_and_resumes_with_its_log(
    tmp_path: Path,
) -> None:
    """Pins `SessionRegistry.EvictBefore` and `resumeAndRegister` for each agent of one
    file: agent a's evicted session is idle in a's list, absent from b's, and b cannot
    reach it by its id (404, as on another daemon)."""
    clock = FakeClock()
    host = agents(clock)  # the default: one temporary file for every agent
    async with client_of(host, "a") as a, client_of(host, "b") as b:
        path = await new_session(a)
        first = seqs(await one_turn(a, path))
        other = await new_session(b)
        await clock.until_sleeping(1)  # one task sweeps every agent (a loop's, see _sweeps)
        await advance(clock, 2 * IDLE)
        assert await listing(a) == {"default": "active", sid_of(path): "idle"}
        assert await listing(b) == {"default": "active", sid_of(other): "idle"}
        async with b.stream("GET", f"{path}/events") as elsewhere:
            assert elsewhere.status_code == 404
        replayed, live = split_at_turn(await one_turn(a, path, "again"))
        assert replayed == first
        assert live == [first[-1] + 1, first[-1] + 2]
        assert (await listing(a))[sid_of(path)] == "active"
        assert (await b.delete(path, headers=JSON)).status_code == 404
        assert (await a.delete(path, headers=JSON)).status_code == 204
        assert await listing(a) == {"default": "active"}
    await host.aclose()


async def test_a_store_file_written_before_agents_were_keyed_is_served_by_an_agent_host(
    tmp_path: Path,
) -> None:
    """The first store's files (schema 1, one AgentHost's sessions; the fixture was written
    by that version) open as they were: owners, viewers, usage, events and counters."""
    store = tmp_path / "old.sqlite3"
    shutil.copyfile(V1_STORE, store)
    clock = FakeClock()
    host = make(clock, tokens={**TOKENS, "tok-bob": Identity("bob")}, store=store)
    async with client(host) as http:
        assert await listing(http, bearer("tok-alice")) == {"s-000170b66f": "idle"}
        assert await listing(http, bearer("tok-bob")) == {"s-000170b66f": "idle"}  # a viewer
        path = "/sessions/core-agent/s-000170b66f"
        got = await one_turn(http, path, "and now", headers=bearer("tok-alice"))
        replayed, live = split_at_turn(got)
        assert replayed == [1, 2]
        assert live == [3, 4]
        said = [p["event"]["Content"]["parts"][0]["text"] for e, p in got if e == "agent"]
        assert said[1] == "hello from v1"
        usage = [p for e, p in got if e == "usage-update"]
        assert usage[0]["turns_total"] == 1 and usage[-1]["turns_total"] == 2
        created = await http.post("/sessions", headers=bearer("tok-alice"))
        assert created.json()["sessionID"].startswith("s-0002")
    await host.aclose()
    with contextlib.closing(sqlite3.connect(store)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (2,)


async def test_a_store_file_of_a_newer_schema_is_refused_with_the_fix(tmp_path: Path) -> None:
    store = tmp_path / "newer.sqlite3"
    with contextlib.closing(sqlite3.connect(store)) as db:
        db.execute("CREATE TABLE sessions (x)")
        db.execute("PRAGMA user_version=3")
        db.commit()
    host = AgentHost("agent", store=store)
    with pytest.raises(ValueError, match=r"schema 3; .* a newer coreagent-sdk wrote it"):
        await host.open()
    await host.aclose()


@pytest.mark.parametrize("first", ["single", "multi"])
async def test_a_store_file_of_the_other_kind_of_host_is_refused_with_the_fix(
    tmp_path: Path, first: str
) -> None:
    """An AgentHost's file opened by a MultiAgentHost (or the other way) would show none of
    its sessions; it is refused, naming the host that wrote it."""
    store = tmp_path / "sessions.sqlite3"
    clock = FakeClock()
    writer: AgentHost | MultiAgentHost = (
        make(clock, store=store) if first == "single" else agents(clock, store)
    )
    http = client(writer) if isinstance(writer, AgentHost) else client_of(writer, "a")
    async with http:
        await one_turn(http, await new_session(http))
    await writer.aclose()
    if first == "single":
        with pytest.raises(ValueError, match="holds an AgentHost's sessions; serve it with an"):
            await agents(clock, store).serve(handle_signals=False)
    else:
        reader = make(clock, store=store)
        with pytest.raises(ValueError, match=r"of a MultiAgentHost's agents .*'a'"):
            await reader.open()
        await reader.aclose()


# --- a store that cannot be read -------------------------------------------------------------


@pytest.mark.parametrize("table", ["sessions", "events"])
async def test_a_resume_whose_store_cannot_be_read_is_answered_400_on_every_session_route(
    tmp_path: Path, table: str
) -> None:
    """Pins `pkg/attach/handlers.go` `writeLookupError`: a lookup error that is neither a miss
    (404) nor an ambiguous id (409), such as a resume whose store read failed (the row's read
    in `resumeAndRegister`, or the log's), is 400 with the error's text. The caller reads
    SQLite's words, never the file's path."""
    store = tmp_path / "sessions.sqlite3"
    clock = FakeClock()
    host = make(clock, store=store)
    async with client(host) as http:
        path = await new_session(http)
        await one_turn(http, path)
        await clock.until_sleeping()
        await advance(clock, 2 * IDLE)
        assert sid_of(path) not in host.sessions
        with contextlib.closing(sqlite3.connect(store)) as db:  # the disk loses a table
            db.execute(f"DROP TABLE {table}")
            db.commit()
        said = f"the session store could not be read (no such table: {table})"
        shortcut = f"/sessions/{sid_of(path)}"
        for method, url in [
            ("GET", f"{path}/events"),
            ("GET", f"{shortcut}/events"),
            ("POST", f"{path}/inject"),
            ("POST", f"{shortcut}/wake"),
            ("DELETE", path),
        ]:
            body = {"message": "hi"} if url.endswith("/inject") else None
            answer = await http.request(method, url, headers=JSON, json=body)
            assert answer.status_code == 400, (method, url, answer.text)
            assert answer.text == f'attach: resume "{sid_of(path)}": {said}\n'
            assert str(tmp_path) not in answer.text
        assert sid_of(path) not in host.sessions
    await host.aclose()


async def test_a_store_that_cannot_be_listed_still_lists_the_sessions_in_memory(
    tmp_path: Path,
) -> None:
    """Pins `pkg/attach/handlers.go` `listSessions`: the store's half is best effort ("a store
    hiccup mustn't zero out the list"): the sessions in memory are listed, 200."""
    store = tmp_path / "sessions.sqlite3"
    clock = FakeClock()
    host = make(clock, store=store)
    async with client(host) as http:
        kept = await new_session(http)
        with contextlib.closing(sqlite3.connect(store)) as db:
            db.execute("DROP TABLE sessions")
            db.commit()
        assert await listing(http) == {"default": "active", sid_of(kept): "active"}
    await host.aclose()


async def test_a_draining_host_answers_503_before_it_looks_a_session_up() -> None:
    """Pins `pkg/attach/handlers.go` `routeSessionDrainGated` (`rejectDraining` before the
    lookup on inject and wake): an unknown session is 503, not 404, and an evicted one is
    not resumed for an answer that refuses it; reads still resume it."""
    clock = FakeClock()
    host = make(clock)
    async with client(host) as http:
        path = await new_session(http)
        await clock.until_sleeping()
        await advance(clock, 2 * IDLE)
        host.draining = True
        for url in (f"{path}/inject", f"{path}/wake", "/sessions/core-agent/s-missing/inject"):
            refused = await http.post(url, headers=JSON, json={"message": "late"})
            assert refused.status_code == 503, (url, refused.text)
            assert refused.headers["retry-after"] == "5"
        assert sid_of(path) not in host.sessions  # nothing was resumed to be refused
        async with http.stream("GET", f"{path}/events") as reading:
            assert reading.status_code == 200
        assert sid_of(path) in host.sessions
    await host.aclose()


async def test_hosts_on_one_clock_share_one_sweeper_each_swept_on_its_own_grid() -> None:
    """One task sweeps every host of a loop and clock (_sweeps), each on the grid of its own
    start and period, as each host's own ticker did: a host whose tick comes before the
    one the task sleeps for wakes it, and a fleet's called peers hold no task each."""
    clock = FakeClock()
    slow, quick = make(clock, idle=600), make(clock)  # sweeps every 150 s; every 60 s
    async with client(slow) as a, client(quick) as b:
        kept = sid_of(await new_session(a))  # t = 0: slow's grid, ticks at 150, 300
        await clock.until_sleeping()
        await advance(clock, 10)
        gone = sid_of(await new_session(b))  # t = 10: quick's grid, ticks at 70, 130
        for _ in range(3):
            await asyncio.sleep(0)
        assert clock.sleepers == 1  # one task for both
        await advance(clock, 60)  # t = 70: idle 60 s exactly, kept
        await advance(clock, 59.9)  # t = 129.9: no tick between
        assert (await listing(b))[gone] == "active"
        await advance(clock, 0.1)  # t = 130: quick's tick, idle 120 s: evicted
        assert (await listing(b))[gone] == "idle"
        assert (await listing(a))[kept] == "active"  # slow's timeout is ten minutes
        assert clock.sleepers == 1  # slow's tick at 150 is still ahead
    await quick.aclose()
    await slow.aclose()
    for _ in range(3):
        await asyncio.sleep(0)
    assert clock.sleepers == 0  # the last host closed: the task is gone


async def test_a_fleets_called_peers_hold_no_task_of_their_own() -> None:
    fleet = Fleet(clock=FakeClock())
    for i in range(50):
        fleet.add_peer(f"p-{i}")
    tool = fleet.call_peer(timeout=10)
    before = asyncio.all_tasks()
    for i in range(50):
        await tool.acall(peer=f"p-{i}", prompt="hi")
    for _ in range(3):
        await asyncio.sleep(0)
    new = asyncio.all_tasks() - before
    await fleet.aclose()
    assert len(new) <= 1, sorted(t.get_coro().__qualname__ for t in new)  # the one sweeper
