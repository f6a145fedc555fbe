"""Serving a host: turns that call peers, joining a hub, and stopping cleanly."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from coreagent_sdk import (
    ASGITransport,
    AttachClient,
    CallPeer,
    FakeClock,
    HubDirectory,
    Peer,
    RoutingTransport,
    StaticDirectory,
)
from coreagent_sdk.errors import PeerRequestError, UnknownPeerError
from coreagent_sdk.host import AgentHost, MultiAgentHost, PeerRegistry, Turn
from coreagent_sdk.host._inbox import inbox_block
from tests.processes import reap, served_hub, stop_with_sigterm, timed_exit
from tests.test_host_fidelity import JSON, frames, new_session, one_turn, split_at_turn

ROOT = Path(__file__).resolve().parent.parent


async def answer_of(host: AgentHost, prompt: str) -> tuple[str, list[Any]]:
    """Ask `host` in-process; (its answer, the agent events of the turn)."""
    transport = ASGITransport(host.app)
    async with AttachClient("http://asker.test", transport=transport) as client:
        session = await client.new_session()
        events: list[Any] = []
        async with client.events(session) as frames:
            await client.inject(session, prompt)
            async for frame in frames:
                name = type(frame).__name__
                if name == "AgentFrame":
                    events.append(frame.event)
                if name == "TurnComplete":
                    break
    said = [e for e in events if e.author == "asker" and e.text and not e.has_function]
    return said[-1].text, events


def calls_of(event: Any) -> list[Any]:
    return [p.function_call for p in event.content.parts if p.function_call is not None]


def responses_of(event: Any) -> list[Any]:
    return [p.function_response for p in event.content.parts if p.function_response is not None]


def helpers() -> tuple[StaticDirectory, RoutingTransport]:
    helper = AgentHost("helper", behavior=lambda_upper)
    routes = RoutingTransport({"helper.test": ASGITransport(helper.app)})
    return StaticDirectory([Peer("helper", "http://helper.test")]), routes


async def lambda_upper(turn: Turn) -> None:
    await turn.say(turn.prompt.upper())


async def test_a_turn_calls_a_peer_as_a_call_peer_tool_call() -> None:
    async def asker(turn: Turn) -> None:
        result = await turn.call_peer("helper", "shout this")
        await turn.say(f"helper said {result['response']}")

    directory, routes = helpers()
    host = AgentHost("asker", behavior=asker, directory=directory, peer_transport=routes)
    answer, events = await answer_of(host, "go")
    assert answer == "helper said SHOUT THIS"
    (fc,) = next(calls_of(e) for e in events if calls_of(e))
    assert (fc.name, fc.args) == ("call_peer", {"peer": "helper", "prompt": "shout this"})
    reply = next(e for e in events if responses_of(e))
    (fr,) = responses_of(reply)
    assert fr.id == fc.id and fr.name == "call_peer" and reply.content.role == "user"
    assert fr.response["response"] == "SHOUT THIS" and fr.response["peer"] == "helper"
    await host.aclose()


async def test_a_failed_call_is_the_tools_error_answer_and_the_turn_goes_on() -> None:
    async def asker(turn: Turn) -> None:
        result = await turn.call_peer("nobody", "hello?")
        await turn.say(f"got {sorted(result)}: {result['error']}")

    directory, routes = helpers()
    host = AgentHost("asker", behavior=asker, directory=directory, peer_transport=routes)
    answer, events = await answer_of(host, "go")
    assert answer.startswith("got ['error']: call_peer: unknown peer \"nobody\"")
    (fr,) = next(responses_of(e) for e in events if responses_of(e))
    assert set(fr.response) == {"error"}
    bare = AgentHost("asker", behavior=asker)  # no directory at all: an error answer too
    answer, _ = await answer_of(bare, "go")
    assert "has no directory of peers" in answer
    await host.aclose()


async def test_parallel_calls_share_one_call_event_and_one_response_event() -> None:
    async def asker(turn: Turn) -> None:
        results = await turn.call_peers([("helper", "a"), ("nobody", "b"), ("helper", "c")])
        await turn.say(" ".join(r.get("response", "x") for r in results))

    directory, routes = helpers()
    host = AgentHost("asker", behavior=asker, directory=directory, peer_transport=routes)
    answer, events = await answer_of(host, "go")
    assert answer == "A x C"
    (calls,) = [calls_of(e) for e in events if calls_of(e)]
    (responses,) = [responses_of(e) for e in events if responses_of(e)]
    assert [c.args["prompt"] for c in calls] == ["a", "b", "c"]
    assert [r.id for r in responses] == [c.id for c in calls]
    await host.aclose()


@pytest.fixture
async def hub() -> AsyncIterator[str]:
    """A hub served on loopback in this process; yields its URL."""
    async with served_hub() as url:
        yield url


async def test_a_served_host_joins_its_hub_answers_callers_and_leaves_on_stop(hub: str) -> None:
    host = AgentHost("helper", behavior=lambda_upper, register_to=hub)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    url = await asyncio.wait_for(ready, 10)
    directory = HubDirectory(hub)
    assert [(p.name, p.endpoint) for p in await directory.peers()] == [("helper", url)]
    async with CallPeer(directory, timeout=10) as tool:
        assert (await tool.acall(peer="helper", prompt="hi")).response == "HI"
        host.stop()
        started = time.monotonic()
        await asyncio.wait_for(serving, 10)
        assert time.monotonic() - started < 10
        assert list(await directory.peers()) == []  # deregistered on the way out
        with pytest.raises(UnknownPeerError):
            await tool.acall(peer="helper", prompt="still there?")
    await directory.aclose()


async def test_a_served_fleets_own_call_peer_reaches_a_host_registered_on_its_hub(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from simulator import Fleet, behaviors

    dialed: list[str] = []
    network = httpx.AsyncHTTPTransport.handle_async_request

    async def loopback_only(self: Any, request: httpx.Request) -> httpx.Response:
        dialed.append(request.url.host)  # recorded and refused before any socket
        if request.url.host != "127.0.0.1":
            raise AssertionError(f"dialed {request.url.host!r}")
        return await network(self, request)

    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", loopback_only)
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.reply("healthy"))
    served = await fleet.serve()

    async def coordinator(turn: Turn) -> None:
        answer = await turn.call_peer("prod-1", turn.prompt)
        await turn.say(f"prod-1 says: {answer.get('response', answer.get('error'))}")

    host = AgentHost("coordinator", behavior=coordinator, register_to=served.urls["hub"])
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    try:
        await asyncio.wait_for(ready, 10)
        tool = fleet.call_peer(timeout=10)  # in-process to the fleet's own daemons
        result = await tool.acall(peer="coordinator", prompt="status?")
        assert result.response == "prod-1 says: healthy"
        assert (await tool.acall(peer="prod-1", prompt="?")).response == "healthy"
        # A registration the hub lists away from loopback is refused, never dialed.
        async with AttachClient(served.urls["hub"]) as hub_client:
            await hub_client.register_peer("far", "http://far.example:8844", {}, 60)
        with pytest.raises(PeerRequestError, match=r"loopback only, not 'far\.example'"):
            await tool.acall(peer="far", prompt="?")
        assert "far.example" not in dialed
    finally:
        host.stop()
        await asyncio.wait_for(serving, 10)
        await fleet.aclose()
    assert fleet.transport.default is None  # unserved, loopback URLs route nowhere again


async def test_a_served_host_asks_its_hub_for_the_lease_it_is_given(hub: str) -> None:
    from datetime import datetime

    with pytest.raises(ValueError, match="AgentHost: ttl must be a positive number"):
        AgentHost("helper", register_to=hub, ttl=0)
    host = AgentHost("helper", behavior=lambda_upper, register_to=hub, ttl=7)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    try:
        await asyncio.wait_for(ready, 10)
        async with httpx.AsyncClient(base_url=hub) as http:
            (row,) = (await http.get("/peers")).json()["peers"]
        granted = datetime.fromisoformat(row["lease_expires_at"].replace("Z", "+00:00"))
        since = datetime.fromisoformat(row["last_heartbeat"].replace("Z", "+00:00"))
        assert (granted - since).total_seconds() == 7  # not the default 60
    finally:
        host.stop()
        await asyncio.wait_for(serving, 10)


async def test_a_served_host_keeps_its_lease_past_several_leases_on_its_clock() -> None:
    # The daemon's own main.go cancels its heartbeat right after registering, so a daemon
    # drops off its hub after one lease; a served host must keep heartbeating. Fake time:
    # four leases of 3 s pass in loop turns, one heartbeat interval (1 s) at a time.
    hub_clock, host_clock = FakeClock(), FakeClock()
    hub = AgentHost("hub", registry=PeerRegistry(clock=hub_clock), clock=hub_clock)
    routes = RoutingTransport({"hub.test": ASGITransport(hub.app)})
    host = AgentHost(
        "helper",
        behavior=lambda_upper,
        register_to="http://hub.test",
        ttl=3,
        peer_transport=routes,
        clock=host_clock,
        session_idle_timeout=0,  # no idle sweeper: the heartbeat is this clock's one sleeper
    )
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    hub_client = AttachClient("http://hub.test", transport=routes)
    try:
        url = await asyncio.wait_for(ready, 10)

        async def heartbeat_waits(elapsed: int) -> None:
            try:
                await host_clock.until_sleeping(1)
            except TimeoutError:
                pytest.fail(f"the host stopped heartbeating after {elapsed} s of 3 s leases")

        for elapsed in range(1, 13):
            await heartbeat_waits(elapsed - 1)  # asleep until its next tick
            host_clock.advance(1)
            hub_clock.advance(1)
            await heartbeat_waits(elapsed)  # that tick's heartbeat is done
            (row,) = await hub_client.list_peers()
            assert (row.name, row.endpoint) == ("helper", url)
            expires = datetime.fromisoformat(row.lease_expires_at.replace("Z", "+00:00"))
            assert expires.timestamp() == hub_clock.now() + 3  # renewed at this tick
    finally:
        host.stop()
        await asyncio.wait_for(serving, 10)
        await hub_client.aclose()
        await hub.aclose()


async def test_a_stopping_host_lets_its_running_turn_finish_and_refuses_new_work() -> None:
    async def slow(turn: Turn) -> None:
        await asyncio.sleep(0.5)
        await turn.say("finished")

    host = AgentHost("slow", behavior=slow)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    url = await asyncio.wait_for(ready, 10)
    json_headers = {"Content-Type": "application/json"}
    async with (
        CallPeer(StaticDirectory([Peer("slow", url)]), timeout=10) as tool,
        httpx.AsyncClient(base_url=url) as http,
    ):
        other = (await http.post("/sessions", headers=json_headers)).json()
        call = asyncio.create_task(tool.acall(peer="slow", prompt="go"))
        for _ in range(200):  # bounded: until the turn runs
            if host.busy():
                break
            await asyncio.sleep(0.01)
        host.stop()
        for _ in range(200):  # bounded: until the drain starts
            if host.draining:
                break
            await asyncio.sleep(0.01)
        late = await http.post(
            f"/sessions/{other['app']}/{other['sessionID']}/inject",
            headers=json_headers,
            json={"message": "too late"},
        )
        assert late.status_code == 503 and late.headers["retry-after"] == "5"
        assert late.text.startswith("daemon is shutting down")
        assert (await call).response == "finished"  # drained, not cut off
    await asyncio.wait_for(serving, 10)
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(f"{url}/sessions")  # closed once serve() returned


def spawn(argv: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "HOST_TOKEN": "unused-on-an-open-hub", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


async def test_the_command_serves_an_agent_joins_and_a_sigterm_mid_turn_drains(
    hub: str,
) -> None:
    proc = spawn(
        [
            sys.executable,
            "-m",
            "coreagent_sdk.host",
            "tests.host_agents:slow_echo",
            "--port",
            "0",
            "--name",
            "slowpoke",
            "--register-to",
            hub,
            "--token-env",
            "HOST_TOKEN",
        ]
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
        ready = json.loads(line)
        assert ready["name"] == "slowpoke" and ready["url"].startswith("http://127.0.0.1:")
        directory = HubDirectory(hub)
        assert [p.name for p in await directory.peers()] == ["slowpoke"]
        opened: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def on_event(event: Any) -> None:
            if event.kind == "session_opened" and not opened.done():
                opened.set_result(event.session_id)

        async with CallPeer(directory, timeout=15, on_event=on_event) as tool:
            call = asyncio.create_task(tool.acall(peer="slowpoke", prompt="mid-turn"))
            # Stopped once the turn is running (it narrates, then takes 1 s), however long a
            # loaded machine takes to get there.
            sid = await asyncio.wait_for(opened, 10)
            async with httpx.AsyncClient(base_url=ready["url"]) as watcher:
                await frames(
                    watcher,
                    f"/sessions/core-agent/{sid}/events",
                    lambda e, p: e == "agent" and "thinking" in json.dumps(p["event"]),
                )
            proc.send_signal(signal.SIGTERM)
            exited = asyncio.create_task(timed_exit(proc, 30))
            assert (await call).response == "thinking\n\nmid-turn"  # drained, not cut off
            code, took = await exited
            assert code == 0, proc.stderr.read() if proc.stderr else ""
            assert took < 10, f"stopped in {took:.2f} s (not counting its waits for a CPU)"
        assert list(await directory.peers()) == []
        await directory.aclose()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()


async def test_serve_takes_a_grace_only_as_long_as_the_stop_budget_leaves_room_for() -> None:
    # Every later step of a stop has its own bound (the hub's DELETE 2 s, uvicorn's shutdown
    # 3 s): the grace is what is left of the 10 s, not a second more.
    host = AgentHost("roomy", behavior=lambda_upper)
    with pytest.raises(ValueError, match="grace must be between 0 and 5 seconds"):
        await asyncio.wait_for(host.serve(grace=5.5, handle_signals=False), 5)
    many = MultiAgentHost({"roomy": lambda_upper})
    with pytest.raises(ValueError, match="grace must be between 0 and 5 seconds"):
        await asyncio.wait_for(many.serve(grace=5.5, handle_signals=False), 5)
    await host.aclose()


def _hub_record(name: str, endpoint: str) -> dict[str, str]:
    stamp = "2026-01-01T00:00:00Z"
    return {
        "registration_id": f"reg-{name}",
        "name": name,
        "endpoint": endpoint,
        "registered_at": stamp,
        "last_heartbeat": stamp,
        "lease_expires_at": "2126-01-01T00:00:00Z",
    }


async def _mute_hub(peers: dict[str, str], seen: list[str]) -> tuple[asyncio.Server, str]:
    """A hub on 127.0.0.1 that registers and lists `peers`, and never answers a DELETE."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                method, path, _ = line.decode().split(" ", 2)
                length = 0
                while (header := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = header.decode().partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                seen.append(f"{method} {path}")
                if method == "DELETE":
                    await asyncio.sleep(60)  # accepted, never answered (cancelled at teardown)
                if method == "POST" and path == "/peers":
                    sent = json.loads(body)
                    status, out = "201 Created", _hub_record(sent["name"], sent["endpoint"])
                else:
                    status, out = "200 OK", {"peers": [_hub_record(n, e) for n, e in peers.items()]}
                data = json.dumps(out).encode() + b"\n"
                writer.write(
                    f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.mark.slow  # a real process's 5 s grace spent whole, then a restart: 11 s
async def test_the_command_stops_within_ten_seconds_whatever_its_hub_peer_and_callers_do(
    tmp_path: Path,
) -> None:
    async def stalls(turn: Turn) -> None:
        await turn.chunk("partial")
        await asyncio.sleep(60)  # mid-stream, never finishing (cancelled at teardown)

    peer = AgentHost("stalled", behavior=stalls)
    peer_ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    peer_serving = asyncio.create_task(
        peer.serve(on_ready=peer_ready.set_result, handle_signals=False, grace=0)
    )
    seen: list[str] = []
    hub, hub_url = await _mute_hub({"stalled": await asyncio.wait_for(peer_ready, 10)}, seen)
    store = tmp_path / "sessions.sqlite3"
    argv = [sys.executable, "-m", "coreagent_sdk.host", "tests.host_agents:asks_stalled"]
    argv += ["--port", "0", "--register-to", hub_url, "--token-env", "HOST_TOKEN"]
    proc = spawn([*argv, "--store", str(store), "--grace", "5"])  # the longest grace there is
    slow: asyncio.StreamWriter | None = None
    try:
        assert proc.stdout is not None and proc.stderr is not None
        url = json.loads(await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20))["url"]
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            path = await new_session(http)
            await http.post(f"{path}/inject", json={"message": "status?"}, headers=JSON)
            for _ in range(500):  # bounded: until the turn waits on the stalled peer
                if peer.busy():
                    break
                await asyncio.sleep(0.02)
            assert peer.busy()
            # A caller half-way through sending a body when the stop comes.
            _, slow = await asyncio.open_connection(*urlsplit_netloc(url))
            slow.write(
                f"POST {path}/inject HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                "\r\nContent-Length: 100\r\n\r\n{".encode()
            )
            await slow.drain()
            await asyncio.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            code, took = await timed_exit(proc, 30)  # less its waits for a CPU under load
        errors = proc.stderr.read()
        assert code == 0, errors
        assert took < 10, f"stopped in {took:.2f} s (not counting its waits for a CPU)"
        assert "DELETE /peers/reg-asks_stalled" in seen  # it tried to leave the hub
        assert "Traceback" not in errors, errors  # a stop is no crash, whoever was mid-request
        # The store was closed whole: a restart serves the session's turn as it was cut.
        again, url = await serve_command_on(store, "tests.host_agents:asks_stalled")
        try:
            async with httpx.AsyncClient(base_url=url) as http:
                listed = (await http.get("/sessions")).json()["sessions"]
                assert path.rsplit("/", 1)[1] in [s["sessionID"] for s in listed]
        finally:
            await stop_with_sigterm(again)
    finally:
        if slow is not None:
            slow.close()
        reap(proc)
        hub.close()
        peer.stop()
        await asyncio.wait_for(peer_serving, 10)


@pytest.mark.slow  # a real process killed and restarted
async def test_a_host_killed_mid_turn_never_numbers_new_events_with_seqs_it_already_sent(
    tmp_path: Path,
) -> None:
    # The daemon's event log writes each event with its seq as it is appended
    # (eventlog.Stream.Append), so no seq a client was sent is ever given again. A host
    # writes events after the turn; killed mid-turn, it loses them, and must not hand
    # their seqs to the next events (a client resuming with since= would skip those).
    store = tmp_path / "sessions.sqlite3"
    proc, url = await serve_command_on(store, "tests.host_agents:narrates_then_waits")
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            path = await new_session(http)

            async def inject() -> None:
                await http.post(f"{path}/inject", headers=JSON, json={"message": "first"})

            got = await frames(  # the [Inbox] ask and the narration; the answer takes 30 s
                http,
                f"{path}/events",
                lambda e, p: e == "agent" and "working on first" in json.dumps(p),
                after=inject,
            )
        sent = [p["seq"] for e, p in got if e == "agent"]
    except BaseException:
        proc.kill()
        raise
    finally:
        if proc.poll() is None:
            proc.kill()  # SIGKILL: no shutdown, no final write
        await asyncio.to_thread(proc.wait)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert len(sent) == 2, got
    again, url = await serve_command_on(store, "tests.host_agents:echo")
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            resumed = await one_turn(http, path, "second", since=str(sent[-1]))
        new = [p["seq"] for e, p in resumed if e == "agent"]
        assert new and min(new) > max(sent), (sent, new)
    finally:
        await stop_with_sigterm(again)


def urlsplit_netloc(url: str) -> tuple[str, int]:
    """("127.0.0.1", port) of an http URL."""
    host, _, port = url.removeprefix("http://").partition(":")
    return host, int(port)


async def serve_command(store: Path) -> tuple[subprocess.Popen[str], str]:
    """`python -m coreagent_sdk.host ... --store FILE` as a process; (it, its URL)."""
    return await serve_command_on(store, "tests.host_agents:echo")


async def serve_command_on(store: Path, target: str) -> tuple[subprocess.Popen[str], str]:
    """`python -m coreagent_sdk.host TARGET --store FILE` as a process; (it, its URL)."""
    proc = spawn(
        [
            sys.executable,
            "-m",
            "coreagent_sdk.host",
            target,
            "--port",
            "0",
            "--store",
            str(store),
        ]
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
    return proc, json.loads(line)["url"]


@pytest.mark.slow  # a real process stopped and restarted
async def test_the_command_restarted_on_its_store_file_serves_its_sessions_again(
    tmp_path: Path,
) -> None:
    store = tmp_path / "sessions.sqlite3"
    proc, url = await serve_command(store)
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            paths = [await new_session(http) for _ in range(2)]
            logged = [await one_turn(http, path, f"question {n}") for n, path in enumerate(paths)]
    finally:
        await stop_with_sigterm(proc)
    said = [
        [(p["seq"], p["event"]["Content"]["parts"][0]["text"]) for e, p in turn if e == "agent"]
        for turn in logged
    ]
    # The user's event is the daemon's [Inbox] bundle; the echo answers the message itself.
    assert said == [
        [(1, inbox_block(["question 0"])), (2, "question 0")],
        [(3, inbox_block(["question 1"])), (4, "question 1")],
    ]

    proc, url = await serve_command(store)  # the same file, a new process
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            rows = (await http.get("/sessions", headers=JSON)).json()["sessions"]
            assert [(r["sessionID"], r["status"]) for r in rows] == [("default", "active")] + [
                (path.rsplit("/", 1)[1], "idle") for path in paths
            ]
            for path, turn in zip(paths, said, strict=True):
                replay = await frames(
                    http,
                    f"{path}/events",
                    lambda e, p, last=turn[-1][0]: e == "agent" and p["seq"] == last,
                )
                assert [
                    (p["seq"], p["event"]["Content"]["parts"][0]["text"])
                    for e, p in replay
                    if e == "agent"
                ] == turn
            replayed, live = split_at_turn(await one_turn(http, paths[0], "question 2"))
            assert replayed == [1, 2] and live == [5, 6]  # the host's counter goes on
    finally:
        await stop_with_sigterm(proc)
