"""Issue 16 item 2: recordings are as strong as the SDK they wrap, against hostile peers and files.

A recording passes what it keeps through the SDK's one scrubber, bounds the
memory it holds (not the bytes it read), never raises into the caller's read
what the unrecorded call would have failed typed, and turns every hostile
file into the documented `ValueError` starting `recording:`.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from coreagent_sdk import (
    AttachClient,
    CallPeer,
    Peer,
    Recording,
    SessionRecorder,
    StaticDirectory,
)
from coreagent_sdk._attach._wire import encode_sse
from coreagent_sdk.errors import CoreAgentError
from simulator import Fleet, behaviors

from ..canary import CANARY, leaked
from .servers import (
    SESSION,
    RawServer,
    daemon,
    one_peer,
    read_request,
    respond,
    send_json,
    send_stream,
    turn,
)

ENV = {"FLEET_TOKEN": CANARY}
DEEP = 30_000
JSON = {"Content-Type": "application/json"}


async def outcome_of(app: Any, *, recorded: bool) -> tuple[Any, SessionRecorder]:
    """The call's result or its exception, with or without a recorder in between."""
    directory, transport = one_peer(app)
    recorder = SessionRecorder()
    tool = CallPeer(
        directory,
        transport=recorder.wrap(transport) if recorded else transport,
        token_env="FLEET_TOKEN",
        environ=ENV,
        timeout=5,
    )
    try:
        return await tool.acall(peer="evil", prompt="go"), recorder
    except BaseException as exc:  # a raw RecursionError is what the test looks for
        return exc, recorder
    finally:
        await tool.aclose()


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def session_nested_deep() -> Any:
    body = (
        '{"app":"core-agent","user":"u","sessionID":"s-1","url":"","x":' + deep(DEEP) + "}"
    ).encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/sessions":
            await send_json(send, 201, body)
        else:
            await daemon(stream=turn("hi"))(scope, receive, send)

    return app


def frame_nested_deep() -> Any:
    frame = b"event: agent\ndata: " + deep(DEEP).encode() + b"\n\n"
    return daemon(stream=[frame, *turn("after the deep frame")])


@pytest.mark.parametrize("app", [session_nested_deep, frame_nested_deep], ids=["answer", "frame"])
async def test_json_nested_30000_deep_fails_a_recorded_call_as_it_fails_an_unrecorded_one(
    app: Any,
) -> None:
    plain, _ = await outcome_of(app(), recorded=False)
    recorded, recorder = await outcome_of(app(), recorded=True)
    assert not isinstance(recorded, RecursionError), recorded
    assert type(recorded) is type(plain)
    if isinstance(plain, CoreAgentError):
        assert str(recorded) == str(plain)
    else:
        assert recorded.response == plain.response
    # What was kept can be saved and loaded again: the deep value is kept as its text.
    for recording in recorder.recordings:
        assert Recording.loads(recording.dumps()) == recording


async def test_a_base64_token_echoed_percent_encoded_never_reaches_the_file() -> None:
    """Issue 16 item 2(c): the recorder's own exact-match replace missed these spellings."""
    token = "Zm9v/YmFy+YmF6=cnry-b64"
    encoded = quote(token, safe="")
    lower_hex = re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), encoded)
    spellings = [encoded, quote(token), lower_hex, token]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/sessions":
            await send_json(send, 201, dict(SESSION, url=" ".join(spellings)))
        elif scope["path"].endswith("/events"):
            echo = {"seq": 1, "said": spellings}
            await send_stream(send, [encode_sse("status-update", echo), *turn("ok")])
        else:
            await send_json(send, 200, {"injected": spellings[0], "session": "s-1", "woke": True})

    directory, transport = one_peer(app)
    recorder = SessionRecorder()
    tool = CallPeer(
        directory,
        transport=recorder.wrap(transport),
        token_env="TOKEN",
        environ={"TOKEN": token},
        timeout=5,
    )
    async with tool:
        await tool.acall(peer="evil", prompt="go")
    text = recorder.recordings[0].dumps()
    assert [s for s in spellings if s in text] == []
    assert text.count("[redacted]") == 2 * len(spellings) + 1  # answer, frame, inject


async def test_a_recording_and_its_replay_use_the_one_redaction_marker() -> None:
    """Issue 16 item 2(g): the replayed answer is the original answer, marker and all."""
    fleet = Fleet(tokens={CANARY: "alice"})
    fleet.add_peer("prod-1", behaviors.echo(), token=CANARY)
    recorder = SessionRecorder()
    async with fleet.call_peer(
        timeout=5, transport=recorder.wrap(fleet.transport), token_env="T", environ={"T": CANARY}
    ) as tool:
        original = await tool.acall(peer="prod-1", prompt=f"say {CANARY} back")
    assert "[redacted]" in original.response

    replaying = Fleet()
    replaying.add_peer("prod-1", behaviors.replay(recorder.recordings[0]))
    async with replaying.call_peer(timeout=5) as tool:
        replayed = await tool.acall(peer="prod-1", prompt="say it back")
    assert replayed.response == original.response
    assert "[REDACTED]" not in recorder.recordings[0].dumps()


def deep_size(value: Any) -> int:
    """Bytes `value` takes in memory, every object counted once (no recursion)."""
    seen: set[int] = set()
    todo, total = [value], 0
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            todo += [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple)):
            todo += list(item)
    return total


async def test_max_bytes_bounds_the_memory_kept_not_the_bytes_read() -> None:
    """Issue 16 item 2(d): 3 bytes of `{},` on the wire are 72 bytes decoded."""
    bound = 256 * 1024
    frame = encode_sse("status-update", [{}] * 20_000)  # 60 KB on the wire, ~1.4 MB decoded
    app = daemon(stream=[frame] * 16 + turn("done"))
    result, recorder = await outcome_of(app, recorded=True)
    assert result.response == "done"
    (recording,) = recorder.recordings
    kept = [e.data for e in recording.entries]
    small = SessionRecorder(max_bytes=bound)
    directory, transport = one_peer(app)
    async with CallPeer(directory, transport=small.wrap(transport), timeout=5) as tool:
        await tool.acall(peer="evil", prompt="go")
    (bounded,) = small.recordings
    assert bounded.truncated and small.held_bytes <= bound
    assert deep_size([e.data for e in bounded.entries]) <= bound
    assert deep_size(kept) > bound  # the unbounded recording really held more


HEADER = '{"format": "coreagent-sdk/session-recording", "version": 1}'
ENTRY = '{"t": 0.5, "kind": "frame", "event": "agent", "data": {}}'


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        (f'{HEADER}\n{{"t": {"9" * 400}, "kind": "frame"}}\n', 2, "finite number"),
        (f'{HEADER}\n{{"t": 1, "kind": ["frame"]}}\n', 2, "kind must be one of"),
        (f'{HEADER}\n{{"t": 1, "kind": "frame", "event": ["agent"]}}\n', 2, "event must be"),
        (f'{HEADER}\n{{"t": NaN, "kind": "frame"}}\n', 2, "finite number"),
        (f'{HEADER}\n{{"t": -1, "kind": "frame"}}\n', 2, "finite number"),
        (f"{HEADER}\n{ENTRY}\n\n{deep(DEEP)}\n", 4, "nests deeper"),
        (f'{HEADER}\n{{"t": 1, "kind": "frame", "data": {deep(400)}}}\n', 2, "nests deeper"),
        (f"{HEADER}\n[1, 2]\n", 2, "is a JSON object"),
        (f"{HEADER}\n{ENTRY[:-3]}\n", 2, "is not JSON"),
        (deep(DEEP) + "\n", 1, "nests deeper"),
        ('{"format": "coreagent-sdk/session-recording", "version": 1, "host": [1]}\n', 1, "host"),
        ('\n\n{"format": "x"}\n', 3, "not a session recording"),
    ],
    ids=[
        "400-digit-time",
        "list-kind",
        "list-event",
        "nan-time",
        "negative-time",
        "nested-entry",
        "nested-data",
        "entry-not-object",
        "cut-line",
        "nested-header",
        "header-host-list",
        "other-format",
    ],
)
def test_a_hostile_recording_file_is_the_documented_value_error_naming_the_line(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    path = tmp_path / "hostile.jsonl"
    path.write_text(text, encoding="utf-8")
    for load in (lambda: Recording.loads(text), lambda: Recording.load(path)):
        with pytest.raises(ValueError, match=r"^recording: ") as info:
            load()
        assert type(info.value) is ValueError
        message = str(info.value)
        assert f"line {line}" in message and says in message
        assert "record" in message.split(";")[-1]  # and what to do about it
        assert len(message) < 600


def test_a_gzip_compressed_recording_says_so_and_how_to_read_it(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl.gz"
    path.write_bytes(gzip.compress(f"{HEADER}\n{ENTRY}\n".encode()))
    with pytest.raises(ValueError, match=r"^recording: r\.jsonl\.gz is not UTF-8 .*gunzip"):
        Recording.load(path)
    with pytest.raises(ValueError, match=r"^recording: .*gunzip"):
        behaviors.replay(path)


async def test_a_line_separator_in_what_a_peer_said_survives_save_and_load(
    tmp_path: Path,
) -> None:
    """U+2028 is written raw (ensure_ascii=False); lines are split on newlines only."""
    said = "one\u2028two\u2029three\x85four\x1cfive"
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.reply(said))
    recorder = SessionRecorder()
    async with fleet.call_peer(timeout=5, transport=recorder.wrap(fleet.transport)) as tool:
        original = await tool.acall(peer="prod-1", prompt="go")
    path = recorder.recordings[0].save(tmp_path / "r.jsonl")
    loaded = Recording.load(path)
    assert loaded == recorder.recordings[0]

    replaying = Fleet()
    replaying.add_peer("prod-1", behaviors.replay(path))
    async with replaying.call_peer(timeout=5) as tool:
        assert (await tool.acall(peer="prod-1", prompt="go")).response == original.response


async def test_an_attach_client_recording_keeps_nothing_a_peer_said_with_the_token() -> None:
    """Every string kept (header included) passes the scrubber, even from a direct client."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/sessions":
            await send_json(send, 201, dict(SESSION, user=CANARY))
        else:
            await send_json(send, 200, {"injected": "p", "session": "s-1", CANARY: True})

    recorder = SessionRecorder()
    transport = recorder.wrap(one_peer(app)[1])
    async with AttachClient("http://evil.test", transport=transport, token=CANARY) as client:
        session = await client.new_session()
        await client.inject(session, f"a prompt quoting {CANARY}")
    text = recorder.recordings[0].dumps()
    assert not leaked(text) and text.count("[redacted]") == 3
    assert json.loads(text.splitlines()[2])["message"] == "a prompt quoting [redacted]"


async def test_a_recording_of_a_hostile_loopback_peer_saves_loads_and_replays_the_same(
    tmp_path: Path,
) -> None:
    """Tried as a user: a raw socket peer on 127.0.0.1, its session `default`, the token
    echoed percent-encoded into an event name, a frame nested 30,000 deep, U+2028 in the
    answer. The file holds no token and replays to the same answer, text left alone."""
    token = "user-trial-Zm9v/YmFy+YmF6="
    lower_hex = re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(token))
    said = f"the default namespace is fine\u2028(token {token})"
    answer = {"Author": "evil", "ID": "e1", "InvocationID": "i1", "TurnComplete": True}
    answer["Content"] = {"role": "model", "parts": [{"text": said}]}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, target, _, _ = await read_request(reader)
        if target == "/sessions":
            body = dict(SESSION, sessionID="default", user=token, url=quote(token, safe=""))
            writer.write(respond("201 Created", json.dumps(body).encode(), JSON))
        elif target.endswith("/inject"):
            body = {"injected": "p-1", "session": "default", "woke": True, "echo": token}
            writer.write(respond("200 OK", json.dumps(body).encode(), JSON))
        else:
            frames = [
                encode_sse(lower_hex, {"k": token}),
                b"event: status-update\ndata: " + deep(DEEP).encode() + b"\n\n",
                encode_sse("agent", {"seq": 1, "event": answer}),
            ]
            writer.write(respond("200 OK", b"".join(frames), {"Content-Type": "text/event-stream"}))
        await writer.drain()

    recorder = SessionRecorder()
    async with RawServer(handler) as server:
        tool = CallPeer(
            StaticDirectory([Peer("evil", server.url)]),
            transport=recorder.wrap(),  # the real network, on loopback
            token_env="T",
            environ={"T": token},
            timeout=5,
        )
        async with tool:
            original = await tool.acall(peer="evil", prompt="How is the default namespace?")
    assert original.response == "the default namespace is fine\u2028(token [redacted])"

    path = recorder.recordings[0].save(tmp_path / "evil.jsonl")
    text = path.read_text(encoding="utf-8")
    assert [s for s in (token, quote(token, safe=""), lower_hex) if s in text] == []
    header = json.loads(text.split("\n")[0])
    assert (header["peer"], header["host"]) == ("evil", server.url.removeprefix("http://"))

    fleet = Fleet()
    fleet.add_peer("evil", behaviors.replay(path))
    async with fleet.call_peer(timeout=5) as tool:
        replayed = await tool.acall(peer="evil", prompt="How is the default namespace?")
    await fleet.aclose()
    assert replayed.response == original.response and replayed.session_id != "default"
