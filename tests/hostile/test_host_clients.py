"""Hostile clients against the agent host, served on 127.0.0.1 as a user serves it.

The host faces the network: whatever a client sends, it stays up, keeps
answering other callers, holds bounded memory and never logs a token. Every
loop here is bounded in count and time and stops by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coreagent_sdk import CallPeer, Peer, StaticDirectory
from coreagent_sdk.host import MAX_INJECT_BYTES, REPLAY_WINDOW, AgentHost, Identity, Turn, _limits
from coreagent_sdk.host._events_endpoint import _CHUNK_BYTES
from coreagent_sdk.host._limits import GoHeaderLimits
from coreagent_sdk.host._limits_httptools import GoHeaderLimitsHttpTools
from tests.processes import reap, stored_frames

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


PARSERS = {"h11": GoHeaderLimits, "httptools": GoHeaderLimitsHttpTools}


@pytest.fixture
async def served(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Served]:
    """A served host; parametrized indirectly with a parser's name, served on that parser."""
    parser = getattr(request, "param", None)
    if parser is not None:
        monkeypatch.setattr(_limits, "_http_protocol", lambda: PARSERS[parser])
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


async def test_slowloris_headers_are_closed_at_the_header_timeout_while_others_are_answered(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pins `pkg/attach/server.go` `Bind` (`ReadHeaderTimeout`): 50 connections that send
    half a request or nothing neither stop another caller nor stay open past the timeout."""
    from coreagent_sdk.host import uvicorn_options

    timeout = 2.0  # the daemon's 10 s, shortened for the test
    monkeypatch.setattr(uvicorn_options()["http"], "read_header_timeout", timeout)
    host, port = served.hostport.split(":")
    held = []
    started = time.monotonic()
    for i in range(50):  # half send half a request and stall, half send nothing at all
        reader, writer = await asyncio.open_connection(host, int(port))
        if i % 2:
            writer.write(b"POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Le")
        held.append((reader, writer))
    try:
        assert await asyncio.wait_for(served.answers(), 15) == "still there?"
        still_held = sum(not reader.at_eof() for reader, _ in held)
        closed = [await asyncio.wait_for(reader.read(), 10) for reader, _ in held]
        waited = time.monotonic() - started
    finally:
        for _, writer in held:
            writer.close()
    assert still_held == 50  # answered while all 50 were held
    assert closed == [b""] * 50  # closed by the host, without an answer, as net/http does
    assert timeout <= waited < timeout + 5


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


@pytest.mark.slow  # a soak: replay storms of 5,000 events
async def test_since_zero_storms_replay_the_newest_5000_uncopied_while_others_are_answered(
    served: Served,
) -> None:
    """Pins `pkg/attach/handlers.go` `streamEvents` (`since` replays the log, newest
    `maxReplayEvents`): 20 readers ask for it all again and again until another caller is
    answered; each holds its place in the log and one write's worth, never a copy of it."""
    text = "x" * 400  # frames big enough that a copy of the log per reader would show

    async def chatty(turn: Turn) -> None:
        for i in range(REPLAY_WINDOW + 50):
            await turn.chunk(f"{i} {text}")
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
    served.host.behavior = echo
    session = served.host.sessions[created["sessionID"]]
    sizes = await stored_frames(served.host, created["sessionID"])
    assert len(sizes) >= REPLAY_WINDOW == 5_000  # the store holds the newest 5,000 at least
    log_bytes = sum(sizes[-REPLAY_WINDOW:])
    assert await served.answers() == "still there?"  # warm
    with traced() as grown:
        assert await served.answers() == "still there?"
        _, other_caller = grown()

    host, port = served.hostport.split(":")
    request = f"GET {path}/events?since=0 HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    answered = asyncio.Event()
    counts: list[int] = []

    async def since_zero() -> None:
        for _ in range(5):  # bounded: a few storms each, until the other caller is answered
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(request)
                frames, tail = 0, b""
                for _ in range(100_000):  # bounded: until the turn's last frame is replayed
                    data = tail + await reader.read(65536)
                    frames += data.count(b"event: ")
                    if b'{"text":"done"}' in data or len(data) == len(tail):
                        break
                    tail = data[-6:]
                counts.append(frames)
            finally:
                writer.close()
            if answered.is_set():
                return

    with traced() as grown:
        storm = asyncio.gather(*(since_zero() for _ in range(20)))
        await asyncio.sleep(0.05)
        assert await asyncio.wait_for(served.answers(), 20) == "still there?"
        answered.set()
        stormed_meanwhile = not storm.done()
        await asyncio.wait_for(storm, 60)
        _, peak = grown()
        for _ in range(200):  # bounded: the host sees each reader go within moments
            if not session.subscribers:
                break
            await asyncio.sleep(0.01)
        retained, _ = grown()
    # Per reader: a page of the log read from the store (64 KiB), one write being joined,
    # and the socket's buffers. A copy of the log per reader is not.
    per_reader = REPLAY_WINDOW * 16 + 2 * _CHUNK_BYTES + CONNECTION_BYTES
    bound = other_caller + 20 * per_reader
    assert peak <= bound, f"20 readers of a {log_bytes}-byte log held {peak} bytes; {bound} allowed"
    assert stormed_meanwhile
    # capabilities, status and usage, then exactly the newest 5,000 events, every time
    assert counts and set(counts) == {REPLAY_WINDOW + 3}, counts
    assert not session.subscribers  # every reader that left was unsubscribed
    assert retained <= other_caller, retained  # and nothing of the storms stays behind


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
        ("0" * 40 + "1", 200),  # Atoi reads leading zeros: the major is 1
        ("0" * 40 + "9223372036854775808", 400),  # and past int64 is past it, zeros or not
        ("\xa01\u3000", 200),  # Unicode spaces, trimmed by strings.TrimSpace
        ("\x1c1", 400),  # a separator Python's strip() trims, and TrimSpace does not
        ("\x1f", 400),  # nor on its own: declared, and no integer
    ],
    ids=[
        "no-digit",
        "arabic-digit",
        "huge",
        "negative",
        "plus",
        "blank",
        "nul",
        "leading-zeros",
        "zeros-past-int64",
        "unicode-spaces",
        "separator-before",
        "separator-alone",
    ],
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


async def test_the_first_of_two_declared_versions_is_the_one_negotiated(served: Served) -> None:
    """Pins `protocol.go` `clientProtocolVersion` (`URL.Query().Get`: the first value) against
    a client that repeats `?protocol=`: Starlette's `query_params.get` took the last."""
    async with httpx.AsyncClient(base_url=served.url) as http:
        path = "/sessions/core-agent/default/events"
        for declared, status in ((["9", "1"], 409), (["1", "9"], 200)):
            params = [("protocol", v) for v in declared]
            async with http.stream("GET", path, params=params) as answer:
                assert answer.status_code == status, declared
                if status == 409:
                    assert (await answer.aread()).startswith(
                        b'protocol version mismatch: client speaks "9" (major 9)'
                    )


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
    # uvicorn's loggers do not propagate: its error log, and its access log were it on.
    server_logs = [logging.getLogger(name) for name in ("uvicorn.error", "uvicorn.access")]
    for server_log in server_logs:
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
                await http.get(
                    "/sessions",
                    params={"token": TOKEN, "access_token": "tok-real"},
                    headers={"Authorization": "Bearer tok-real"},
                ),
            ]
        assert [a.status_code for a in answers] == [401, 401, 404, 200]
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
        for server_log in server_logs:
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


CALLER_TOKEN = "tok-caller-9f3e1c7a"  # one the host knows (an identity's)
FOREIGN_TOKEN = "tok-foreign-5b2d8e04"  # one it does not
GUARDED = """
import os
from coreagent_sdk.host import AgentHost, Identity

async def echo(turn):
    await turn.say(turn.prompt)

tokens = {os.environ["CALLER_TOKEN"]: Identity("alice")}
guarded = AgentHost("guarded", behavior=echo, tokens=tokens)
"""


def hostile_requests(token: str) -> list[bytes]:
    """Raw requests carrying `token` in headers, query, body and path, well-formed or not."""
    body = json.dumps({"message": token, "owner": token}).encode()
    return [
        f"GET /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"X-Attach-Token: {token}\r\nCookie: token={token}\r\n\r\n".encode(),
        f"GET /sessions?token={token}&access_token={token} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
        f"GET /sessions/core-agent/default/events?since={token}&protocol={token} HTTP/1.1\r\n"
        f"Host: x\r\nAuthorization: Bearer {CALLER_TOKEN}\r\n\r\n".encode(),
        f"POST /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {CALLER_TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body,
        f"POST /sessions/core-agent/{token}/inject HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {CALLER_TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body,
        f"GET /{token}/%00{token} HTTP/1.1\r\nHost: {token}\r\n\r\n".encode(),
        # What uvicorn cannot parse, and logs: a bad request line, a bad header, a bad length.
        f"GET /x{token} BROKEN\r\nAuthorization: Bearer {token}\r\n\r\n".encode(),
        f"GET /sessions HTTP/1.1\r\nHost: x\r\nBad Header {token}\r\n\r\n".encode(),
        f"POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Length: {token}\r\n\r\n".encode(),
        f"GET /sessions HTTP/1.1\r\nHost: x\r\nX-Filler: {token}{'a' * (1 << 21)}\r\n\r\n".encode(),
    ]


def spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


async def test_the_command_never_logs_a_token_whatever_a_client_sends_and_where(
    tmp_path: Path,
) -> None:
    """`python -m coreagent_sdk.host` as a user runs it: its output is uvicorn's logs and the
    SDK's (access log on stdout, the rest on stderr). A client puts tokens (one the host
    knows, one it never saw) in every part of a request, well-formed or not: none is logged."""
    (tmp_path / "guarded_agents.py").write_text(GUARDED)
    env = {
        **os.environ,
        "CALLER_TOKEN": CALLER_TOKEN,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
    }
    argv = [sys.executable, "-m", "coreagent_sdk.host", "guarded_agents:guarded", "--port", "0"]
    proc = spawn(argv, env)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        url = json.loads(line)["url"]
        assert url.startswith("http://127.0.0.1:")
        served = Served(None, url)  # type: ignore[arg-type]
        answers = [
            await raw(served, data)
            for token in (CALLER_TOKEN, FOREIGN_TOKEN)
            for data in hostile_requests(token)
        ]
        assert all(a == b"" or a.startswith(b"HTTP/1.") for a in answers), answers
        assert any(a.startswith(b"HTTP/1.1 200 ") for a in answers)  # the host read some
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(asyncio.to_thread(proc.wait), 15)
        # uvicorn's error log is on stderr, its access log (were it on) on stdout: read both.
        logged = proc.stdout.read() + proc.stderr.read()
    finally:
        reap(proc)
    assert code == 0, logged
    assert "Invalid HTTP request received" in logged, logged  # the check sees the logs
    for token in (CALLER_TOKEN, FOREIGN_TOKEN):
        assert token.split("-")[-1] not in logged, logged  # in any spelling: its tail is unique


# --- bounded memory, measured (tracemalloc), while another caller is answered -----------------


@contextlib.contextmanager
def traced() -> Iterator[Callable[[], tuple[int, int]]]:
    """Trace allocations for the block; `grown()` is (retained, peak) bytes since its start."""
    assert not tracemalloc.is_tracing(), "another tracer is running"
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()

        def grown() -> tuple[int, int]:
            _, peak = tracemalloc.get_traced_memory()
            gc.collect()  # what is retained, not garbage a cycle holds until the next sweep
            current = tracemalloc.get_traced_memory()[0]
            return current - base, peak - base

        yield grown
    finally:
        tracemalloc.stop()


# What one connection may hold besides what a bound allows, however much a client sends:
# a socket read (asyncio reads up to 256 KiB at once) held up to four times over (as read,
# in h11's buffer, as the parsed body event, and a copy on its way to the app), and two
# 64 KiB write buffers (uvicorn's, and the test's own client's, which is traced too).
CONNECTION_BYTES = 4 * 256 * 1024 + 2 * 64 * 1024


@pytest.mark.slow  # a soak: megabytes sent until the cap holds
async def test_an_endless_body_holds_the_cap_not_the_body_while_another_caller_is_answered(
    served: Served,
) -> None:
    """Pins `pkg/attach/handlers.go` `readJSON` (`http.MaxBytesReader`): past 8 KiB the rest
    of a body is never kept, however much a client sends and for however long."""
    assert await served.answers() == "still there?"  # warm: imports and pools are not growth
    with traced() as grown:
        assert await served.answers() == "still there?"
        _, other_caller = grown()  # what the other caller's delegation takes, measured here
    chunk, most = b"x" * 16384, 2048  # at most 32 MiB, sent until the other caller is answered
    host, port = served.hostport.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /sessions/default/inject HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (most * len(chunk))
    )
    sent = 0
    answered = asyncio.Event()

    async def endless() -> None:
        nonlocal sent
        for _ in range(most):  # bounded in count; stops once the other caller is answered
            if answered.is_set():
                return
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)

    try:
        with traced() as grown:
            sender = asyncio.create_task(endless())
            answer = await asyncio.wait_for(reader.read(4096), 30)
            for _ in range(500):  # bounded: until 8 MiB more went in after the answer
                if sent >= 8 << 20 or sender.done():
                    break
                await asyncio.sleep(0.01)
            assert await asyncio.wait_for(served.answers(), 15) == "still there?"
            answered.set()
            still_sending = not sender.done()
            await asyncio.wait_for(sender, 10)
            _, peak = grown()
    finally:
        writer.close()
    bound = other_caller + MAX_INJECT_BYTES + CONNECTION_BYTES
    assert peak <= bound, f"held {peak} bytes of a {sent}-byte body; the cap allows {bound}"
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert answer.endswith(b"\r\n\r\nrequest body too large (max 8192 bytes)\n")
    assert still_sending and sent >= 8 << 20  # the body went on while the other was answered


@pytest.mark.slow  # a soak: slow bodies past the cap
async def test_slow_bodies_past_the_cap_hold_the_cap_each_while_another_caller_is_answered(
    served: Served,
) -> None:
    """Slowloris bodies: 40 connections trickle 128 KiB each. The daemon sets no body read
    timeout (`server.go` `Bind` sets ReadHeaderTimeout only), so a slow body may hold its
    connection; what it may not hold is more than the 8 KiB cap of `readJSON`."""
    assert await served.answers() == "still there?"
    with traced() as grown:
        assert await served.answers() == "still there?"
        _, other_caller = grown()  # what the other caller's delegation takes, measured here
    clients, piece, pieces = 40, b"y" * 1024, 128
    host, port = served.hostport.split(":")
    connections = [await asyncio.open_connection(host, int(port)) for _ in range(clients)]
    try:
        with traced() as grown:
            for _, writer in connections:
                writer.write(
                    b"POST /sessions/default/inject HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                    % (pieces * len(piece))
                )
            await asyncio.sleep(0.05)
            connected, _ = grown()  # each connection's own objects, before any body
            other = asyncio.create_task(served.answers())
            for _ in range(pieces):  # bounded: 128 rounds of 1 KiB per connection
                for _, writer in connections:
                    writer.write(piece)
                await asyncio.sleep(0.005)
            assert await asyncio.wait_for(other, 15) == "still there?"
            _, peak = grown()
            answers = [await asyncio.wait_for(reader.read(4096), 10) for reader, _ in connections]
    finally:
        for _, writer in connections:
            writer.close()
    bound = other_caller + clients * MAX_INJECT_BYTES + CONNECTION_BYTES
    assert peak - connected <= bound, (
        f"{clients} slow bodies of {pieces * len(piece)} bytes held {peak - connected} bytes "
        f"at most; the cap allows {bound}"
    )
    assert all(a.endswith(b"request body too large (max 8192 bytes)\n") for a in answers)


async def post_sessions(app: Any, count: int, token: str | None = None) -> Counter[int]:
    """`POST /sessions` `count` times straight into an ASGI app: how often it answered what."""
    headers = [(b"host", b"x"), (b"content-type", b"application/json")]
    if token is not None:
        headers.append((b"authorization", b"Bearer " + token.encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/sessions",
        "raw_path": b"/sessions",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 80),
    }
    statuses: Counter[int] = Counter()  # not a list: a list of 10,000 would be growth

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses[message["status"]] += 1

    for _ in range(count):  # bounded
        await app(dict(scope), receive, send)
    return statuses


@pytest.mark.slow  # a soak: ten thousand requests
async def test_ten_thousand_session_creations_from_one_caller_keep_the_burst_and_no_more() -> None:
    """Pins `pkg/attach/rate_limit.go` `costRateLimiter.Allow`, on by default as on a daemon:
    one caller opens its burst of 5, and the 9,995 it is refused leave nothing behind."""
    from coreagent_sdk import FakeClock

    host = AgentHost("echo", behavior=echo, clock=FakeClock())  # no refill while it runs
    await post_sessions(host.app, 0)
    with traced() as grown:  # over the first 4,000 (tracing slows every allocation)
        made = await post_sessions(host.app, 5)
        burst, _ = grown()  # five sessions and the caller's bucket
        # The first refusals fill one-time caches and free lists (13 KB on 3.10, flat
        # from then on); 2,000 more must then keep nothing.
        refusals = await post_sessions(host.app, 1_995)
        settled, _ = grown()
        refusals += await post_sessions(host.app, 2_000)
        refused, _ = grown()
    refusals += await post_sessions(host.app, 6_000)
    # Bounded by the burst, not the count: 2,000 refusals keep less than one session's worth.
    assert refused - settled <= burst / 5, (burst, settled, refused)
    assert (made, refusals) == ({201: 5}, {429: 9_995})
    assert len(host.sessions) == 1 + 5  # the startup session and the burst
    await host.aclose()


async def test_a_caller_refused_thousands_of_sessions_on_the_wire_leaves_the_others_theirs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`costRateLimiter.Allow` buckets callers by identity: mallory pipelines session
    creations on one loopback connection until alice, with her own token, has delegated."""
    from coreagent_sdk import FakeClock

    monkeypatch.setenv("ALICE_TOKEN", "tok-alice-2c61")
    tokens = {"tok-mallory-7e90": Identity("mallory"), "tok-alice-2c61": Identity("alice")}
    host = AgentHost("echo", behavior=echo, clock=FakeClock(), tokens=tokens)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    url = await asyncio.wait_for(ready, 10)
    request = (
        b"POST /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-mallory-7e90\r\n"
        b"Content-Type: application/json\r\nContent-Length: 0\r\n\r\n"
    )
    batch, most = 100, 10_000
    reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
    answered = asyncio.Event()
    written = 0

    async def mallory() -> None:
        nonlocal written
        while written < most and not answered.is_set():  # bounded in count
            writer.write(request * batch)
            await writer.drain()
            written += batch
            await asyncio.sleep(0.01)

    async def alice() -> str:
        directory = StaticDirectory([Peer("echo", url)])
        async with CallPeer(directory, timeout=10, token_env="ALICE_TOKEN") as tool:
            return (await tool.acall(peer="echo", prompt="mine")).response

    counts = {b"201": 0, b"429": 0}
    try:
        sender = asyncio.create_task(mallory())
        first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert first.startswith(b"HTTP/1.1 201 ")  # mallory's burst is served, and then
        assert await asyncio.wait_for(alice(), 20) == "mine"
        answered.set()
        await asyncio.wait_for(sender, 10)
        received = first
        for _ in range(100_000):  # bounded: read until every request written is answered
            if received.count(b"HTTP/1.1 ") >= written:
                break
            received += await asyncio.wait_for(reader.read(1 << 16), 20)
        for code in counts:
            counts[code] = received.count(b"HTTP/1.1 " + code + b" ")
    finally:
        writer.close()
        host.stop()
        await asyncio.wait_for(task, 10)
    assert counts == {b"201": 5, b"429": written - 5}, (counts, written)
    assert written < most  # alice was answered while mallory was still sending
    owners = sorted(s.user for s in host.sessions.values())
    assert owners.count("mallory") == 5 and owners.count("alice") == 1


async def pipelined(served: Served, request: bytes, count: int) -> list[int]:
    """Send `request` `count` times on one connection at once; the statuses (bounded: 10 s)."""
    host, port = served.hostport.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request * count)
        received = b""
        for _ in range(10_000):  # bounded: until every request is answered
            if received.count(b"HTTP/1.1 ") >= count:
                break
            received += await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", received)]


async def test_a_multi_agent_host_meets_hostile_clients_on_one_agent_and_answers_on_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`MultiAgentHost.serve()` gives every agent's port the daemon's limits (`server.go`
    `Bind`, `handlers.go` `readJSON`, `rate_limit.go` `costRateLimiter.Allow`): while one
    agent's port is held by stalled headers, an endless body, an oversized header and a
    caller refused sessions, the other agent answers."""
    from coreagent_sdk import FakeClock
    from coreagent_sdk.host import MultiAgentHost, uvicorn_options

    timeout = 2.0  # the daemon's 10 s ReadHeaderTimeout, shortened for the test
    monkeypatch.setattr(uvicorn_options()["http"], "read_header_timeout", timeout)
    host = MultiAgentHost({"target": echo, "bystander": echo}, clock=FakeClock())
    ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    urls = await asyncio.wait_for(ready, 10)
    target = Served(host.host("target"), urls["target"])
    bystander = Served(host.host("bystander"), urls["bystander"])
    address, port = target.hostport.split(":")
    held = []
    try:
        for _ in range(20):
            reader, writer = await asyncio.open_connection(address, int(port))
            writer.write(b"GET /sessions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
            held.append((reader, writer))
        endless = (
            b"POST /sessions/default/inject HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n" + b"x" * 65536
        )
        oversized = (
            b"GET /sessions HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * (1 << 21) + b"\r\n\r\n"
        )
        refused = await pipelined(
            target,
            b"POST /sessions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 0\r\n\r\n",
            10,
        )
        answers = [await raw(target, endless), await raw(target, oversized)]
        assert await asyncio.wait_for(bystander.answers(), 15) == "still there?"
        still_held = sum(not reader.at_eof() for reader, _ in held)
        closed = [await asyncio.wait_for(reader.read(), 10) for reader, _ in held]
    finally:
        for _, writer in held:
            writer.close()
        host.stop()
        await asyncio.wait_for(task, 15)
    assert refused == [201] * 5 + [429] * 5  # the daemon's default limit, on each agent
    assert answers[0].startswith(b"HTTP/1.1 400 ")
    assert answers[0].endswith(b"request body too large (max 8192 bytes)\n")
    assert answers[1].startswith(b"HTTP/1.0 431 Request Header Fields Too Large\r\n")
    assert still_held == 20  # the bystander answered while the target's port was held
    assert closed == [b""] * 20  # and the target closed them at the header timeout


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_an_inject_body_of_exactly_the_cap_is_taken_and_one_byte_more_is_refused(
    served: Served, framing: str
) -> None:
    """Pins `readJSON`'s `http.MaxBytesReader` at the limit on the wire, however the body
    is framed: 8,192 bytes are read, 8,193 are a 400 (the SDK's own caller never sends them,
    so only a raw client finds this edge)."""

    def inject(size: int) -> bytes:
        body = b'{"message": "' + b"x" * (size - len(b'{"message": ""}')) + b'"}'
        assert len(body) == size
        head = b"POST /sessions/default/inject HTTP/1.1\r\nHost: x\r\n"
        head += b"Content-Type: application/json\r\n"
        if framing == "chunked":
            halves = [body[: size // 2], body[size // 2 :]]  # two chunks: counted across them
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(h), h) for h in halves)
            return head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
        return head + b"Content-Length: %d\r\n\r\n" % size + body

    at_limit = await raw(served, inject(MAX_INJECT_BYTES))
    past = await raw(served, inject(MAX_INJECT_BYTES + 1))
    assert MAX_INJECT_BYTES == 8192
    assert at_limit.startswith(b"HTTP/1.1 200 "), at_limit[:200]
    assert past.startswith(b"HTTP/1.1 400 ")
    assert past.endswith(b"\r\n\r\nrequest body too large (max 8192 bytes)\n")


@pytest.mark.parametrize(
    ("request_bytes", "answer", "answers"),
    [
        # Both framings: Transfer-Encoding wins, as net/http's fixLength lets it (and drops
        # Content-Length): the chunked body is read whole, and the request after it is one.
        (
            b"POST /sessions/default/inject HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b"application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'5\r\n{"mes\r\n0\r\n\r\n',
            b"malformed JSON: ",
            2,
        ),
        # Two lengths that disagree: net/http's fixLength refuses them, and the connection.
        (
            b"POST /sessions/default/inject HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b"application/json\r\nContent-Length: 2\r\nContent-Length: 6\r\n\r\n{}    ",
            b"Invalid HTTP request received.",
            1,
        ),
        # Two Hosts, or none in HTTP/1.1: net/http's readRequest refuses both.
        (b"GET /sessions HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", b"Invalid HTTP request", 1),
        (b"GET /sessions HTTP/1.1\r\n\r\n", b"Invalid HTTP request received.", 1),
    ],
    ids=["te-and-cl", "two-lengths", "two-hosts", "no-host"],
)
@pytest.mark.parametrize("served", ["h11", "httptools"], indirect=True)
async def test_conflicting_framing_and_host_headers_are_400_and_never_smuggle(
    served: Served, request_bytes: bytes, answer: bytes, answers: int
) -> None:
    """Each is refused or read one way only, as net/http reads it; the host goes on."""
    whoami = b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n"
    got = b""
    host, port = served.hostport.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request_bytes + whoami)
        for _ in range(100):  # bounded: until the host closes or both are answered
            more = await asyncio.wait_for(reader.read(65536), 5)
            got += more
            if not more or (got.count(b"HTTP/1.1 ") == 2 and got.endswith(b"}\n")):
                break
    finally:
        writer.close()
    assert got.startswith(b"HTTP/1.1 400 "), got[:200]
    assert answer in got
    assert got.count(b"HTTP/1.1 ") == answers, got
    if answers == 2:  # the request after the body was read as itself, not as body
        assert got.endswith(b'{"identity":"anon","source":"anonymous"}\n')
    assert await served.answers() == "still there?"
