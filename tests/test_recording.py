"""Recording daemon sessions through a transport wrapper: frames, answers, times, no secrets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from coreagent_sdk import (
    MAX_EVENT_BYTES,
    RECORDING_VERSION,
    ASGITransport,
    AttachClient,
    CallPeer,
    Peer,
    Recording,
    SessionRecorder,
    StaticDirectory,
)
from coreagent_sdk.errors import FrameTooLargeError
from coreagent_sdk.host._inbox import inbox_block
from simulator import Fleet, behaviors

from .conftest import ReachFactory

CANARY = "canary-3d1f77a0-do-not-record"
SECRET = "hunter2-db-password"


async def test_a_call_peer_recording_holds_the_session_the_inject_and_every_frame(
    make_reach: ReachFactory,
) -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.narrate(["listing nodes"], "3 nodes ready"))
    reach = await make_reach(fleet)
    recorder = SessionRecorder()
    tool = reach.call_peer(timeout=10, transport=recorder.wrap(reach.transport))

    result = await tool.acall(peer="prod-1", prompt="How is prod-1?")

    (recording,) = recorder.recordings
    assert recording.session_id == result.session_id
    kinds = [(e.kind, e.event) for e in recording.entries]
    assert kinds[0] == ("session", None)
    assert recording.entries[0].data["sessionID"] == result.session_id
    inject = next(e for e in recording.entries if e.kind == "inject")
    assert inject.message == "How is prod-1?" and inject.data["session"] == result.session_id
    events = [e.event for e in recording.frames()]
    # Everything the daemon sent up to the answer, including what CallPeer does not parse.
    assert events[:7] == [
        "capabilities",
        "status-update",
        "inbox",
        "inbox",
        "status-update",  # the turn starts streaming
        "agent",
        "agent",
    ]
    texts = [
        e.data["event"]["Content"]["parts"][0].get("text")
        for e in recording.frames()
        if e.event == "agent"
    ]
    # The user's event is the drained message as the daemon frames it: an [Inbox] bundle.
    assert texts[:2] == [inbox_block(["How is prod-1?"]), "listing nodes"]
    assert "3 nodes ready" in texts
    times = [e.t for e in recording.entries]
    assert times == sorted(times) and times[0] >= 0


async def test_an_attach_client_recording_saves_and_loads_as_versioned_json_lines(
    tmp_path: Path,
) -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.reply("ok"))
    recorder = SessionRecorder()
    async with AttachClient(fleet.url("prod-1"), transport=recorder.wrap(fleet.transport)) as c:
        session = await c.new_session()
        async with c.events(session) as frames:
            await c.inject(session, "status?")
            async for frame in frames:
                if type(frame).__name__ == "TurnComplete":
                    break
    (recording,) = recorder.recordings
    path = recording.save(tmp_path / "prod-1.jsonl")

    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "coreagent-sdk/session-recording"
    assert header["version"] == RECORDING_VERSION == 1
    assert header["session_id"] == session.session_id
    assert all(isinstance(json.loads(line)["t"], float | int) for line in lines[1:])
    assert Recording.load(path) == recording
    assert [e.event for e in recording.frames()][-2:] == ["agent", "turn-complete"]


def test_a_recording_of_another_format_or_version_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="not a session recording"):
        Recording.loads('{"format": "something-else"}\n')
    with pytest.raises(ValueError, match=r"version 2 is not supported .* record it again"):
        Recording.loads('{"format": "coreagent-sdk/session-recording", "version": 2}\n')
    with pytest.raises(ValueError, match="line 2 is not an entry"):
        Recording.loads(
            '{"format": "coreagent-sdk/session-recording", "version": 1}\n{"kind": "nope"}\n'
        )


async def test_a_recording_contains_neither_the_token_nor_a_configured_secret(
    tmp_path: Path,
) -> None:
    # The peer says both back (echo), so they are in frames, the inject and its answer.
    fleet = Fleet(tokens={CANARY: "alice"})
    fleet.add_peer("prod-1", behaviors.echo(), token=CANARY)
    recorder = SessionRecorder(secrets=[SECRET])
    environ = {"FLEET_TOKEN": CANARY}
    tool = CallPeer(
        StaticDirectory([Peer("prod-1", fleet.url("prod-1"))]),
        transport=recorder.wrap(fleet.transport),
        token_env="FLEET_TOKEN",
        environ=environ,
        timeout=5,
    )
    async with tool:
        result = await tool.acall(peer="prod-1", prompt=f"token {CANARY} and {SECRET}")
    # The peer said both back; a configured secret joins the SDK's one scrubber, so the
    # result hides it as it hides the token.
    assert result.response == "token [redacted] and [redacted]"

    (recording,) = recorder.recordings
    text = recording.save(tmp_path / "r.jsonl").read_text()
    assert CANARY not in text and SECRET not in text
    assert text.count("[redacted]") >= 4  # inject message, its answer, echo, answer
    assert CANARY not in repr(recorder) and CANARY not in repr(recording)


async def test_recording_leaves_the_bytes_a_caller_reads_unchanged() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.stream(3000, 500, char="é"))
    plain = fleet.call_peer(timeout=5, max_response_bytes=1001)
    recorded = fleet.call_peer(
        timeout=5, max_response_bytes=1001, transport=SessionRecorder().wrap(fleet.transport)
    )
    async with plain, recorded:
        a, b = await asyncio.gather(
            plain.acall(peer="prod-1", prompt="go"), recorded.acall(peer="prod-1", prompt="go")
        )
    assert (a.response, a.truncated) == (b.response, b.truncated) and b.truncated


async def test_a_session_over_max_frames_is_recorded_up_to_it_and_says_so() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.stream(10, 1))
    recorder = SessionRecorder(max_frames=5)
    async with fleet.call_peer(timeout=5, transport=recorder.wrap(fleet.transport)) as tool:
        await tool.acall(peer="prod-1", prompt="go")
    (recording,) = recorder.recordings
    assert len(recording.frames()) == 5 and recording.truncated
    assert Recording.loads(recording.dumps()).truncated


FRAME = b'event: status-update\ndata: {"x": "' + b"y" * 1000 + b'"}\n\n'


def closing_daemon(frames: int) -> Any:
    """A daemon answering the session, the inject, then `frames` frames and the end."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        if path == "/sessions":
            body = json.dumps({"app": "a", "user": "u", "sessionID": "s1", "url": ""}).encode()
        elif path.endswith("/inject"):
            body = json.dumps({"injected": "p", "session": "s1", "woke": True}).encode()
        else:
            body = FRAME * frames
        kind = b"text/event-stream" if path.endswith("/events") else b"application/json"
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]}
        )
        await send({"type": "http.response.body", "body": body})

    return app


async def record_frames(frames: int, max_bytes: int) -> tuple[Recording, int]:
    recorder = SessionRecorder(max_bytes=max_bytes)
    transport = recorder.wrap(ASGITransport(closing_daemon(frames)))
    async with AttachClient("http://d.sim", transport=transport) as client:
        session = await client.new_session()
        await client.inject(session, "go")  # the session and the inject spend part of the bound
        async with client.events(session) as stream:
            async for _ in stream:
                pass
    (recording,) = recorder.recordings
    return recording, recorder.held_bytes


async def test_max_bytes_keeps_every_frame_up_to_the_bound_exactly_and_none_past_it() -> None:
    _, three = await record_frames(3, 10**9)
    _, four = await record_frames(4, 10**9)
    one_frame = four - three
    assert one_frame > 1000  # a frame is charged at least its characters

    # The bound is checked with the frame added: exactly at it, everything is kept.
    at_bound, held = await record_frames(3, max_bytes=three)
    assert (len(at_bound.frames()), at_bound.truncated, held) == (3, False, three)
    # One more frame would pass it: that frame is not kept, and the recording says so.
    past, held = await record_frames(4, max_bytes=three)
    assert (len(past.frames()), past.truncated, held) == (3, True, three)
    # A byte short of three frames holds two.
    short, held = await record_frames(3, max_bytes=three - 1)
    assert (len(short.frames()), short.truncated, held) == (2, True, three - one_frame)


async def test_a_session_over_max_bytes_keeps_the_frames_that_fit_and_the_caller_reads_on() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.stream(20_000, 2_000))
    recorder = SessionRecorder(max_bytes=8_000)
    async with fleet.call_peer(timeout=5, transport=recorder.wrap(fleet.transport)) as tool:
        result = await tool.acall(peer="prod-1", prompt="go")
    (recording,) = recorder.recordings
    assert recording.truncated and recorder.held_bytes <= 8_000
    assert not any("x" * 20_000 in json.dumps(e.data) for e in recording.frames())
    assert len(result.response) == 16_384  # the caller read on, unaffected
    recorder.clear()
    assert recorder.recordings == [] and recorder.held_bytes == 0


async def test_a_call_peer_recording_names_the_peer_it_came_from(tmp_path: Path) -> None:
    """Issue 16 item 2(h): the header says which peer, not only an address."""
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.reply("ok"))
    recorder = SessionRecorder()
    async with fleet.call_peer(timeout=5, transport=recorder.wrap(fleet.transport)) as tool:
        await tool.acall(peer="prod-1", prompt="go")
    (recording,) = recorder.recordings
    path = recording.save(tmp_path / "r.jsonl")
    header = json.loads(path.read_text().splitlines()[0])
    assert (header["peer"], header["host"]) == ("prod-1", "prod-1.sim")
    assert Recording.load(path).peer == "prod-1"


@pytest.mark.parametrize("option", ["max_frames", "max_bytes"])
def test_the_bounds_must_be_positive_ints(option: str) -> None:
    with pytest.raises(ValueError, match=f"{option} must be a positive int, got 0"):
        SessionRecorder(**{option: 0})


async def test_a_hostile_daemon_echoing_the_token_everywhere_leaves_no_trace_of_it() -> None:
    """The token comes back as an event name, a JSON key, raw text and inside an answer."""

    async def hostile(scope: dict, receive: object, send: object) -> None:
        headers = dict(scope["headers"])
        token = headers.get(b"authorization", b"").split(b" ")[-1].decode()
        path = scope["path"]
        if path == "/sessions":
            body = json.dumps({"app": "a", "user": token, "sessionID": "s1", "url": token})
            ctype = b"application/json"
        elif path.endswith("/inject"):
            body = json.dumps({"injected": token, "session": "s1", "woke": True})
            ctype = b"application/json"
        else:
            body = (
                f'event: {token}\ndata: {{"{token}": ["x{token}x"]}}\n\n'
                f"event: agent\ndata: not json {token}\n\n"
                f"event: turn-complete\ndata: {{}}\n\n"
            )
            ctype = b"text/event-stream"
        await send(
            {
                "type": "http.response.start",
                "status": 200,  # type: ignore[operator]
                "headers": [(b"content-type", ctype)],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})  # type: ignore[operator]

    recorder = SessionRecorder()
    transport = recorder.wrap(ASGITransport(hostile))
    async with AttachClient("http://evil.sim", transport=transport, token=CANARY) as client:
        session = await client.new_session()
        async with client.events(session) as frames:
            await client.inject(session, "hello")
            async for _ in frames:
                pass
    (recording,) = recorder.recordings
    text = recording.dumps()
    assert len(recording.frames()) == 3
    assert CANARY not in text and text.count("[redacted]") >= 6


async def test_a_frame_over_the_event_bound_is_not_buffered_and_the_recording_says_truncated() -> (
    None
):
    """The recorder decodes the teed stream with the SDK's own bounded decoder."""
    huge = b"x" * (MAX_EVENT_BYTES + 1024)

    async def hostile(scope: dict, receive: object, send: object) -> None:
        path = scope["path"]
        if path == "/sessions":
            body = json.dumps({"app": "a", "user": "u", "sessionID": "s1", "url": "/x"}).encode()
            ctype = b"application/json"
        elif path.endswith("/inject"):
            body = json.dumps({"injected": "hi", "session": "s1", "woke": True}).encode()
            ctype = b"application/json"
        else:
            first = b'event: status-update\ndata: {"turn_state": "streaming"}\n\n'
            body = b'event: agent\ndata: "' + huge + b'"\n\nevent: turn-complete\ndata: {}\n\n'
            ctype = b"text/event-stream"
        await send(
            {
                "type": "http.response.start",
                "status": 200,  # type: ignore[operator]
                "headers": [(b"content-type", ctype)],
            }
        )
        if ctype == b"text/event-stream":
            chunk = {"type": "http.response.body", "body": first, "more_body": True}
            await send(chunk)  # type: ignore[operator]
        await send({"type": "http.response.body", "body": body})  # type: ignore[operator]

    recorder = SessionRecorder()
    transport = recorder.wrap(ASGITransport(hostile))

    async def read_the_turn(client: AttachClient) -> None:
        session = await client.new_session()
        async with client.events(session) as frames:
            await client.inject(session, "hello")
            async for _ in frames:
                pass

    async with AttachClient("http://evil.sim", transport=transport) as client:
        with pytest.raises(FrameTooLargeError):
            await read_the_turn(client)
    (recording,) = recorder.recordings
    assert recording.truncated
    assert [e.event for e in recording.frames()] == ["status-update"]
    assert len(recording.dumps()) < MAX_EVENT_BYTES
