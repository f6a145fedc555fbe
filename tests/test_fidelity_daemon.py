"""The simulated daemon behaves as core-agent's Go daemon does, on the wire.

Each test names the Go behaviour it pins (core-agent `pkg/attach`), so that
what a client learns against the simulator holds against a real fleet. Raw
httpx only (no SDK), over both transports: in-process and loopback sockets.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest

from coreagent_sdk import FakeClock
from coreagent_sdk._attach._wire import InjectResult
from simulator import Fleet, Identity, behaviors

from .conftest import ReachFactory, load_fixture

JSON = {"Content-Type": "application/json"}
FRAME = re.compile(rb"event: ([a-z-]+)\ndata: ([^\n]+)\n\n")
ALICE, BOB, ROOT = "tok-alice", "tok-bob", "tok-root"
TOKENS = {ALICE: "alice", BOB: "bob", ROOT: Identity("root", admin=True)}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def frames_until(
    http: httpx.AsyncClient,
    url: str,
    stop: Any,
    *,
    after: Any = None,
    headers: dict[str, str] | None = None,
    limit: float = 5.0,
) -> list[tuple[str, dict[str, Any]]]:
    """(event, payload) pairs of a stream until `stop(event, payload)` is true.

    Bounded by progress, not by a total a loaded machine could outlast: the stream fails the
    test when no byte comes for `limit` seconds, or after 100,000 frames.
    """
    out: list[tuple[str, dict[str, Any]]] = []
    buf = b""
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, response.status_code
        started = False
        chunks = response.aiter_bytes()
        while len(out) < 100_000:
            try:
                chunk = await asyncio.wait_for(anext(chunks), limit)
            except StopAsyncIteration:
                return out
            buf += chunk
            if not started and after is not None:
                started = True
                await after()
            for event, data in FRAME.findall(buf):
                out.append((event.decode(), json.loads(data)))
                if stop(*out[-1]):
                    return out
            buf = buf[buf.rfind(b"\n\n") + 2 :] if b"\n\n" in buf else buf
    raise AssertionError(f"frames_until: no stop after {len(out)} frames")


async def new_session(http: httpx.AsyncClient, base: str, **kw: Any) -> str:
    created = await http.post(f"{base}/sessions", headers={**JSON, **kw.get("headers", {})})
    assert created.status_code == 201, created.text
    body = created.json()
    return f"{base}/sessions/{body['app']}/{body['sessionID']}"


@pytest.fixture
async def open_fleet(make_reach: ReachFactory):
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.narrate(["listing nodes"], "3 nodes ready"))
    fleet.add_peer("bad", behaviors.fail("rate_limited", "slow down", retryable=True))
    reach = await make_reach(fleet)
    async with httpx.AsyncClient(transport=reach.transport) as http:
        yield reach, http


def ends_turn(event: str, payload: dict[str, Any]) -> bool:
    return event == "status-update" and payload == {"turn_state": "idle"}


async def one_turn(
    http: httpx.AsyncClient, path: str, message: str = "nodes?", *, limit: float = 5.0
) -> list[Any]:
    async def inject() -> None:
        answer = await http.post(f"{path}/inject", headers=JSON, json={"message": message})
        assert answer.status_code == 200

    return await frames_until(http, f"{path}/events", ends_turn, after=inject, limit=limit)


# --- item 1: since ------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "?since=", "?since=abc", "?since=-3", "?since=1_0"])
async def test_events_without_a_usable_cursor_replay_the_whole_session_log(
    open_fleet, query
) -> None:
    """Pins `pkg/attach/handlers.go` `parseSince`: missing, invalid or negative means 0."""
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    await one_turn(http, path)
    replay = await frames_until(
        http, f"{path}/events{query}", lambda e, p: e == "agent" and p["seq"] == 4
    )
    assert [p["seq"] for e, p in replay if e == "agent"] == [1, 2, 3, 4]


async def test_a_cursor_replays_only_what_came_after_it(open_fleet) -> None:
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    await one_turn(http, path)
    replay = await frames_until(
        http, f"{path}/events?since= 2", lambda e, p: e == "agent" and p["seq"] == 4
    )
    assert [p["seq"] for e, p in replay if e == "agent"] == [3, 4]


# --- item 2: version negotiation ---------------------------------------------------


@pytest.mark.parametrize(
    ("query", "header", "status"),
    [
        ("?protocol=v1", None, 200),
        ("?protocol=1", None, 200),
        ("?protocol=1.4.0-rc.1", None, 200),
        ("", "1", 200),
        ("", "v1.2", 200),
        ("?protocol=1", "2.0.0", 200),  # the query is read first
        ("?protocol=2", "1.10.0", 409),
        ("?protocol=v2.0.0", None, 409),
        ("?protocol=one", None, 400),
        ("", "x1", 400),
    ],
)
async def test_the_declared_version_is_read_as_the_daemon_reads_it(
    open_fleet, query, header, status
) -> None:
    """Pins `pkg/attach/protocol.go` `clientProtocolVersion`, `protocolMajor`."""
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    headers = {"X-Attach-Protocol-Version": header} if header is not None else {}
    async with http.stream("GET", f"{path}/events{query}", headers=headers) as answer:
        assert answer.status_code == status
        assert answer.headers["x-attach-protocol-version"] == "1.10.0"


async def test_a_declared_version_is_quoted_in_the_400_as_go_percent_q_quotes_it(
    open_fleet,
) -> None:
    """Pins `pkg/attach/protocol.go` `negotiateProtocolVersion`: `malformed protocol version %q`."""
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    for declared, quoted in [
        ("one\u2028two\u202e\x7f", '"one\\u2028two\\u202e\\x7f"'),
        ("x" * 5000, '"' + "x" * 198 + '"... (cut: 5000 characters, the first 198 shown)'),
    ]:
        async with http.stream("GET", f"{path}/events", params={"protocol": declared}) as answer:
            assert answer.status_code == 400
            body = (await answer.aread()).decode()
        assert body.startswith(f"malformed protocol version {quoted} (expected semver like ")


async def test_an_unknown_session_is_404_whatever_version_is_declared(open_fleet) -> None:
    """Pins `pkg/attach/handlers.go` `streamEvents`: negotiation runs after the lookup."""
    reach, http = open_fleet
    url = f"{reach.url('prod-1')}/sessions/core-agent/s-missing/events"
    async with http.stream("GET", f"{url}?protocol=garbage") as answer:
        assert answer.status_code == 404
    for declared in ("garbage", "9.0.0"):
        headers = {"X-Attach-Protocol-Version": declared}
        async with http.stream("GET", url, headers=headers) as answer:
            assert answer.status_code == 404


# --- item 3: the turn's life on the stream --------------------------------------------


async def test_each_turn_is_announced_streaming_and_closed_idle(open_fleet) -> None:
    """Pins the status-update frames a daemon emits around each turn (through
    `pkg/attach/broadcaster.go` `Broadcaster.Emit`) and `deliverBootFrames`: the boot
    snapshot is only `{model, turn_state}` (`statusSnapshot`)."""
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    frames = await one_turn(http, path)
    statuses = [p for e, p in frames if e == "status-update"]
    assert statuses == [
        {"model": "sim-model", "turn_state": "idle"},
        {"model": "sim-model", "turn_state": "streaming"},
        {"turn_state": "idle"},
    ]
    kinds = [e for e, _ in frames]
    assert kinds.index("turn-complete") < len(kinds) - 1  # idle comes after the terminal event
    streaming = kinds.index("status-update", 2)
    assert kinds[streaming + 1] == "agent"  # announced before the turn's first event


async def test_a_failed_turn_is_closed_idle_too(open_fleet) -> None:
    reach, http = open_fleet
    path = await new_session(http, reach.url("bad"))
    frames = await one_turn(http, path)
    kinds = [e for e, _ in frames]
    assert kinds[-2:] == ["turn-error", "status-update"]


async def test_turn_complete_carries_the_turns_own_prompt_id_and_no_cost(open_fleet) -> None:
    """Pins the daemon's prompt ids (protocol.md, "Prompt ids"): the turn mints its own,
    the inbox frames name the inject's; `turn-complete` leaves `cost_usd` out."""
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    injected: list[str] = []

    async def inject() -> None:
        answer = await http.post(f"{path}/inject", headers=JSON, json={"message": "hi"})
        injected.append(answer.json()["prompt_id"])

    frames = await frames_until(http, f"{path}/events", ends_turn, after=inject)
    done = next(p for e, p in frames if e == "turn-complete")
    inbox = [p["prompt_id"] for e, p in frames if e == "inbox"]
    assert inbox == injected * 2  # queued and dequeued name the inbox entry
    assert done["prompt_id"] and done["prompt_id"] != injected[0]
    assert "cost_usd" not in done
    assert set(done) == {"prompt_id", "model", "tokens_in", "tokens_out", "latency_ms"}


async def test_messages_queued_without_waking_drain_into_one_inbox_turn(open_fleet) -> None:
    """Pins `wake` (omitted means true) and the inbox drain: one turn, an `[Inbox]` block
    framed as core-agent `pkg/agent/inbox.go` `formatInboxBundle` frames it."""
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    answers: list[dict[str, Any]] = []

    async def inject() -> None:
        for body in ({"message": "first", "wake": False}, {"message": "second"}):
            answer = await http.post(f"{path}/inject", headers=JSON, json=body)
            answers.append(answer.json())

    frames = await frames_until(http, f"{path}/events", ends_turn, after=inject)
    assert [a["woke"] for a in answers] == [False, True]
    users = [
        p["event"]["Content"]["parts"][0]["text"]
        for e, p in frames
        if e == "agent" and p["event"]["Author"] == "user"
    ]
    assert len(users) == 1
    assert users[0].startswith("[Inbox]\n- first\n- second\n\nHow to handle the bundle:\n- ")
    assert users[0].endswith("treat the bundle as the next request and respond once.")
    assert [e for e, _ in frames].count("turn-complete") == 1


async def test_a_message_queued_without_waking_runs_at_the_next_wake(open_fleet) -> None:
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    woken: list[dict[str, Any]] = []

    async def queue_then_wake() -> None:
        queued = await http.post(
            f"{path}/inject", headers=JSON, json={"message": "later", "wake": False}
        )
        assert queued.json()["woke"] is False
        woken.append((await http.post(f"{path}/wake", headers=JSON)).json())

    frames = await frames_until(http, f"{path}/events", ends_turn, after=queue_then_wake)
    assert woken[0]["woken"] == path.rsplit("/", 1)[1]
    assert set(woken[0]) <= set(load_fixture("rest-wake-v1.json"))
    assert any(e == "turn-complete" for e, _ in frames)


def test_an_inject_answer_without_woke_reads_as_woken() -> None:
    """A daemon that predates `wake` leaves `woke` out, and wakes."""
    assert InjectResult.from_dict({"injected": "x", "session": "s-1"}).woke is True
    assert InjectResult.from_dict(load_fixture("rest-inject-v1.json")).woke is False


# --- item 4 and issue 10 item 10: body caps -----------------------------------------------


async def test_an_oversized_body_is_400_with_the_daemons_words(open_fleet) -> None:
    """Pins `pkg/attach/handlers.go` `readJSON` (Go's `http.MaxBytesReader`): 400, not 413."""
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    big = await http.post(f"{path}/inject", headers=JSON, json={"message": "x" * 8192})
    assert big.status_code == 400
    assert big.text == "request body too large (max 8192 bytes)\n"
    register = {"name": "x", "endpoint": "http://x", "labels": {"k": "v" * 16384}}
    huge = await http.post(f"{reach.url('hub')}/peers", headers=JSON, json=register)
    assert huge.status_code == 400
    assert huge.text == "request body too large (max 16384 bytes)\n"


async def test_inject_looks_the_session_up_before_reading_the_body(open_fleet) -> None:
    """Pins `pkg/attach/handlers.go` `routeSessionDrainGated`: lookup (404) runs first."""
    reach, http = open_fleet
    url = f"{reach.url('prod-1')}/sessions/core-agent/s-missing/inject"
    for content in (b"x" * 20_000, b"{nope", b""):
        assert (await http.post(url, headers=JSON, content=content)).status_code == 404


@pytest.mark.parametrize("body", [b"", b"  ", b"{nope", b"[]", b'{"message": 5}'])
async def test_a_body_that_does_not_decode_is_400(open_fleet, body) -> None:
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    assert (await http.post(f"{path}/inject", headers=JSON, content=body)).status_code == 400


async def test_a_body_over_the_cap_is_refused_before_the_rest_is_read() -> None:
    """Issue 10 item 10: count while reading. A client still sending a 64 MiB body gets its
    400 after about 8 KiB, instead of the server buffering everything first."""
    fleet = Fleet()
    fleet.add_peer("prod-1")
    async with await fleet.serve() as served:
        host, port = served.urls["prod-1"].removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        total = 64 * 1024 * 1024
        writer.write(
            b"POST /sessions/default/inject HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % total
        )
        sent = 0
        answer = b""
        try:
            for _ in range(256):  # at most 256 x 64 KiB = 16 MiB, a quarter of the body
                writer.write(b"x" * 65536)
                sent += 65536
                try:
                    answer += await asyncio.wait_for(reader.read(4096), 0.02)
                except asyncio.TimeoutError:
                    continue
                if b"\r\n\r\n" in answer or not answer:
                    break
        except (ConnectionError, OSError):
            pass  # the server closed the connection after answering: also a refusal
        if b"\r\n\r\n" not in answer:
            answer += await asyncio.wait_for(reader.read(4096), 2)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b"request body too large (max 8192 bytes)" in answer
        assert sent < total // 4
    await fleet.aclose()


# --- item 6: session visibility ----------------------------------------------------------


async def test_a_caller_sees_only_its_own_sessions(make_reach: ReachFactory) -> None:
    """Pins `pkg/attach/handlers.go` `listSessions` (`ListAuthorized`) and `authorize` (404)."""
    fleet = Fleet(tokens=TOKENS)
    fleet.add_peer("prod-1", token=ALICE)
    reach = await make_reach(fleet)
    base = reach.url("prod-1")
    async with httpx.AsyncClient(transport=reach.transport) as http:
        path = await new_session(http, base, headers=bearer(ALICE))
        sid = path.rsplit("/", 1)[1]

        async def listed(token: str) -> list[str]:
            answer = await http.get(f"{base}/sessions", headers=bearer(token))
            return [row["sessionID"] for row in answer.json()["sessions"]]

        assert sid in await listed(ALICE)
        assert sid not in await listed(BOB)
        assert sid in await listed(ROOT)  # an admin sees every session
        as_bob = {**JSON, **bearer(BOB)}
        inject = await http.post(f"{path}/inject", headers=as_bob, json={"message": "x"})
        assert inject.status_code == 404
        async with http.stream("GET", f"{path}/events", headers=bearer(BOB)) as answer:
            assert answer.status_code == 404
        assert (await http.delete(path, headers=as_bob)).status_code == 404
        assert (await http.delete(path, headers={**JSON, **bearer(ALICE)})).status_code == 204


# --- item 8: session routes and names ------------------------------------------------------


async def test_delete_frees_a_session_and_the_startup_session_is_default(open_fleet) -> None:
    """Pins `pkg/attach/handlers_delete_session.go` `doDeleteSession`: 204, 403 for `default`."""
    reach, http = open_fleet
    base = reach.url("prod-1")
    path = await new_session(http, base)
    await one_turn(http, path)
    rows = (await http.get(f"{base}/sessions")).json()["sessions"]
    assert {r["sessionID"] for r in rows} >= {"default", path.rsplit("/", 1)[1]}
    assert (await http.delete(path, headers=JSON)).status_code == 204
    async with http.stream("GET", f"{path}/events") as answer:
        assert answer.status_code == 404
    assert (await http.delete(path, headers=JSON)).status_code == 404
    forbidden = await http.delete(f"{base}/sessions/core-agent/default", headers=JSON)
    assert forbidden.status_code == 403
    shortcut = await new_session(http, base)
    short_url = f"{base}/sessions/{shortcut.rsplit('/', 1)[1]}"
    assert (await http.delete(short_url, headers=JSON)).status_code == 204


async def test_every_listed_session_is_active_with_an_event_log(open_fleet) -> None:
    """Pins `pkg/attach/handlers.go` `listSessions`: in-memory entries are `active`."""
    reach, http = open_fleet
    base = reach.url("prod-1")
    await new_session(http, base)  # fresh: no event yet, not running
    rows = (await http.get(f"{base}/sessions")).json()["sessions"]
    assert rows and all(r["status"] == "active" and r["has_event_log"] is True for r in rows)


async def test_whoami_for_an_anonymous_caller(open_fleet) -> None:
    reach, http = open_fleet
    answer = await http.get(f"{reach.url('prod-1')}/whoami")
    assert answer.json() == {"identity": "anon", "source": "anonymous"}


async def test_the_event_stream_has_the_daemons_headers(open_fleet) -> None:
    reach, http = open_fleet
    path = await new_session(http, reach.url("prod-1"))
    async with http.stream("GET", f"{path}/events") as answer:
        assert answer.headers["cache-control"] == "no-cache"
        assert answer.headers["x-accel-buffering"] == "no"


# --- item 11: memory bounds ------------------------------------------------------------------


async def test_a_session_replays_only_its_newest_5000_events(make_reach: ReachFactory) -> None:
    """Pins `pkg/attach/broadcaster.go` `maxReplayEvents` / `clampReplaySince`."""

    async def chatty(turn: Any) -> str:
        for i in range(5_010):
            await turn.chunk(f"{i}")
        return "done"

    fleet = Fleet()
    fleet.add_peer("chatty", behaviors.custom(chatty))
    reach = await make_reach(fleet)
    async with httpx.AsyncClient(transport=reach.transport) as http:
        path = await new_session(http, reach.url("chatty"))
        await one_turn(http, path, "go")
        last = 1 + 5_010 + 1  # the user echo, the chunks, the answer
        replay = await frames_until(
            http, f"{path}/events", lambda e, p: e == "agent" and p["seq"] == last
        )
    seqs = [p["seq"] for e, p in replay if e == "agent"]
    assert len(seqs) == 5_000 and seqs[0] == last - 4_999 and seqs[-1] == last


async def test_an_idle_session_leaves_memory_stays_listed_and_a_running_turn_keeps_its_own() -> (
    None
):
    """Pins the daemon's `session_idle_timeout` (24 h by default) as `EvictBefore` applies it:
    memory only, the session stays listed as idle and answers again (tests/test_host_store.py
    pins the rest); a running turn is not idle."""
    clock = FakeClock()
    fleet = Fleet(clock=clock, session_idle_timeout=60)
    fleet.add_peer("quick")
    fleet.add_peer("stuck", behaviors.never_finish())
    async with httpx.AsyncClient(transport=fleet.transport) as http:
        quick = await new_session(http, fleet.url("quick"))
        await one_turn(http, quick)
        stuck = await new_session(http, fleet.url("stuck"))
        started = await http.post(f"{stuck}/inject", headers=JSON, json={"message": "go"})
        assert started.status_code == 200
        await clock.until_sleeping(1)  # one task sweeps both hosts (a loop's, see _sweeps)
        clock.advance(120)
        for _ in range(3):  # the woken sweepers run their sweeps
            await asyncio.sleep(0)
        assert quick.rsplit("/", 1)[1] not in fleet.peer("quick").sessions
        listed = (await http.get(f"{fleet.url('quick')}/sessions")).json()["sessions"]
        assert [(r["sessionID"], r["status"]) for r in listed] == [
            ("default", "active"),
            (quick.rsplit("/", 1)[1], "idle"),
        ]
        await one_turn(http, quick)  # resumed
        rows = (await http.get(f"{fleet.url('stuck')}/sessions")).json()["sessions"]
        assert (stuck.rsplit("/", 1)[1], "active") in [(r["sessionID"], r["status"]) for r in rows]
        # Deleting it stops the turn and frees it.
        assert (await http.delete(stuck, headers=JSON)).status_code == 204
        assert list(fleet.peer("stuck").sessions) == ["default"]
        assert not fleet.peer("stuck")._tasks
    await fleet.aclose()


def test_the_daemons_idle_timeout_is_the_default_and_zero_disables_it() -> None:
    from simulator import Daemon

    assert Daemon("x").session_idle_timeout == 24 * 3600
    assert Daemon("x", session_idle_timeout=0).sweep() == []
    with pytest.raises(ValueError, match="session_idle_timeout"):
        Daemon("x", session_idle_timeout=-1)


async def test_the_sdk_reads_the_daemons_400_for_a_big_body_as_payload_too_large() -> None:
    """Against a daemon, `PayloadTooLargeError` must fire on its 400, not only on a 413."""
    from coreagent_sdk import AttachClient
    from coreagent_sdk.errors import BadRequestError, PayloadTooLargeError

    fleet = Fleet()
    fleet.add_peer("prod-1")
    async with AttachClient(fleet.url("prod-1"), transport=fleet.transport) as client:
        session = await client.new_session()
        with pytest.raises(PayloadTooLargeError, match=r"max 8192 bytes") as info:
            await client.inject(session, "x" * 9000)
        assert isinstance(info.value, BadRequestError) and info.value.status_code == 400
        with pytest.raises(BadRequestError) as empty:
            await client.inject(session, "")
        assert not isinstance(empty.value, PayloadTooLargeError)
    await fleet.aclose()
