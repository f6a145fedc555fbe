"""Hostile clients against the agent host, served on 127.0.0.1 as a user serves it.

The host faces the network: whatever a client sends, it stays up, keeps
answering other callers, holds bounded memory and never logs a token. Every
loop here is bounded in count and time and stops by itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from coreagent_sdk import CallPeer, Peer, StaticDirectory
from coreagent_sdk.host import REPLAY_WINDOW, AgentHost, Identity, Turn

JSON = {"Content-Type": "application/json"}
TOKEN = "tok-hostile-secret-value"


async def echo(turn: Turn) -> None:
    await turn.say(turn.prompt)


class Served:
    def __init__(self, host: AgentHost, url: str) -> None:
        self.host = host
        self.url = url
        self.hostport = url.removeprefix("http://")

    async def answers(self) -> str:
        """A well-behaved caller's delegation, bounded: the host still answers."""
        async with CallPeer(StaticDirectory([Peer("echo", self.url)]), timeout=10) as tool:
            return (await tool.acall(peer="echo", prompt="still there?")).response


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    host = AgentHost("echo", behavior=echo, session_rate_limit=None)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    url = await asyncio.wait_for(ready, 10)
    yield Served(host, url)
    host.stop()
    await asyncio.wait_for(task, 10)


async def raw(served: Served, data: bytes, *, read: bool = True) -> bytes:
    """Send raw bytes on a fresh connection; the first answer (bounded: 5 s, 64 KiB)."""
    host, port = served.hostport.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        if not read:
            return b""
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


async def test_slowloris_connections_do_not_stop_other_callers(served: Served) -> None:
    host, port = served.hostport.split(":")
    held = []
    for _ in range(50):  # each sends half a request line and stalls
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Le")
        held.append(writer)
    try:
        assert await asyncio.wait_for(served.answers(), 15) == "still there?"
    finally:
        for writer in held:
            writer.close()


async def test_an_endless_body_is_refused_at_the_cap_and_the_host_goes_on(
    served: Served,
) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        created = (await http.post("/sessions", headers=JSON)).json()
        path = f"/sessions/{created['app']}/{created['sessionID']}/inject"

        async def endless() -> AsyncIterator[bytes]:
            for _ in range(4096):  # 64 MiB if the server read it all; it stops at 8 KiB
                yield b"x" * 16384

        answer = await http.post(path, headers=JSON, content=endless())
        assert answer.status_code == 400
        assert answer.text == "request body too large (max 8192 bytes)\n"
    assert await served.answers() == "still there?"


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 8000,
        b'{"message": ' * 600 + b'"x"' + b"}" * 600,
        b'{"message": "' + b"\\ud800" * 1000,
    ],
    ids=["deep-array", "deep-object", "escapes"],
)
async def test_deep_or_odd_json_is_a_400_never_a_crash(served: Served, body: bytes) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        created = (await http.post("/sessions", headers=JSON)).json()
        path = f"/sessions/{created['app']}/{created['sessionID']}/inject"
        answer = await http.post(path, headers=JSON, content=body)
        assert answer.status_code == 400
        assert answer.text.startswith("malformed JSON: ")
    assert await served.answers() == "still there?"


async def test_many_subscribers_and_since_zero_storms_stay_bounded(served: Served) -> None:
    async def chatty(turn: Turn) -> None:
        for i in range(REPLAY_WINDOW + 50):
            await turn.chunk(str(i))
        await turn.say("done")

    served.host.behavior = chatty
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        created = (await http.post("/sessions", headers=JSON)).json()
        path = f"/sessions/{created['app']}/{created['sessionID']}"
        await http.post(f"{path}/inject", headers=JSON, json={"message": "go"})
        for _ in range(500):  # bounded: until the turn is over
            if not served.host.busy():
                break
            await asyncio.sleep(0.02)
        session = served.host.sessions[created["sessionID"]]
        assert len(session.log) == REPLAY_WINDOW  # the log holds the newest 5,000 only

        async def since_zero() -> int:
            frames, tail = 0, b""
            async with http.stream("GET", f"{path}/events?since=0") as stream:
                async for chunk in stream.aiter_bytes():
                    data = tail + chunk
                    frames += chunk.count(b"event: ")
                    if b'{"text":"done"}' in data:
                        return frames
                    tail = data[-64:]
            return frames

        counts = await asyncio.wait_for(asyncio.gather(*(since_zero() for _ in range(20))), 60)
        # capabilities + status + usage + at most 5,000 replayed events, each time
        assert all(c <= REPLAY_WINDOW + 3 for c in counts), counts
        assert not session.subscribers or len(session.subscribers) <= 20
    served.host.behavior = echo
    assert await served.answers() == "still there?"


async def test_ten_thousand_session_creations_from_one_caller_stay_bounded() -> None:
    """The daemon's default rate limit bounds how many sessions one caller can make."""
    from coreagent_sdk import ASGITransport, FakeClock

    host = AgentHost("echo", behavior=echo, clock=FakeClock())  # no refill while it runs
    async with httpx.AsyncClient(
        transport=ASGITransport(host.app), base_url="http://echo.test"
    ) as http:
        statuses = [(await http.post("/sessions", headers=JSON)).status_code for _ in range(2000)]
    assert statuses.count(201) == 5 and statuses.count(429) == 1995
    assert len(host.sessions) == 6  # the startup session and the burst


@pytest.mark.parametrize(
    ("version", "status"),
    [
        ("v", 400),
        ("\u0661.0.0", 400),  # a non-ASCII digit: Atoi refuses it
        ("1" * 5000, 400),  # past int64 (and past Python's int() digit limit)
        ("-1", 400),
        ("+1", 400),
        (" ", 200),  # blank: no version declared
        ("1.2.3\x00", 200),  # the major is 1; the rest is not read
    ],
    ids=["no-digit", "arabic-digit", "huge", "negative", "plus", "blank", "nul"],
)
async def test_malformed_protocol_versions_are_refused_in_words(
    served: Served, version: str, status: int
) -> None:
    """Pins `pkg/attach/protocol.go` `protocolMajor` against what a hostile client sends."""
    async with httpx.AsyncClient(base_url=served.url) as http:
        created = (await http.post("/sessions", headers=JSON)).json()
        path = f"/sessions/{created['app']}/{created['sessionID']}/events"
        async with http.stream("GET", path, params={"protocol": version}) as answer:
            assert answer.status_code == status
            if status == 400:
                assert (await answer.aread()).startswith(b"malformed protocol version ")
    assert await served.answers() == "still there?"


async def test_malformed_requests_get_an_answer_and_the_host_stays_up(served: Served) -> None:
    garbage = [
        b"GARBAGE\r\n\r\n",
        b"GET /sessions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n",
        b"POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        b"POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"GET /sessions/%00/x/events HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    for data in garbage:
        answer = await raw(served, data)
        # An answer (refused, or a read of what was asked), or a closed connection: no crash.
        assert answer == b"" or answer.startswith(b"HTTP/1.1 "), answer[:80]
    assert await served.answers() == "still there?"


async def test_the_host_never_logs_a_token(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    host = AgentHost("echo", behavior=echo, tokens={"tok-real": Identity("alice")})
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    url = await asyncio.wait_for(ready, 10)
    server_log = logging.getLogger("uvicorn.error")  # uvicorn's loggers do not propagate
    server_log.addHandler(caplog.handler)
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            answers: list[Any] = [
                await http.post("/sessions", headers={**JSON, "Authorization": f"Bearer {TOKEN}"}),
                await http.get("/sessions", headers={"X-Attach-Token": TOKEN}),
                await http.post(
                    f"/sessions/core-agent/{TOKEN}/inject",
                    headers={**JSON, "Authorization": "Bearer tok-real"},
                    json={"message": TOKEN},
                ),
            ]
        assert [a.status_code for a in answers] == [401, 401, 404]
        assert all(TOKEN not in a.text for a in answers)
        # A request uvicorn cannot parse is logged: the token in it must not be.
        hostport = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(hostport[0], int(hostport[1]))
        writer.write(f"GET /x{TOKEN} BROKEN\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        await writer.drain()
        await asyncio.wait_for(reader.read(4096), 5)
        writer.close()
    finally:
        host.stop()
        await asyncio.wait_for(task, 10)
        server_log.removeHandler(caplog.handler)
    # The host's own logs (uvicorn's, the SDK's); the test's httpx client logs its own URLs.
    logged = [
        r.getMessage() + str(r.exc_info or "")
        for r in caplog.records
        if not r.name.startswith(("httpx", "httpcore"))
    ]
    assert any("Invalid HTTP request" in m for m in logged), logged  # the check sees logs
    assert not [m for m in logged if TOKEN in m or "tok-real" in m]


async def test_a_caller_gone_mid_body_is_no_server_error_in_the_hosts_log(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    request = (
        f"POST /sessions/default/inject HTTP/1.1\r\nHost: {served.hostport}\r\n"
        "Content-Type: application/json\r\nContent-Length: 200\r\n\r\n"
        '{"message": "half'
    ).encode()
    for _ in range(5):
        await raw(served, request, read=False)  # and the connection closes mid-body
    await asyncio.sleep(0.3)  # bounded: the host sees each disconnect in a few ms
    assert await served.answers() == "still there?"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == []
