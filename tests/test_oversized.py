"""An answer sent as one event over the stream's bound: truncated at the cap, never buffered.

A daemon's final model event carries the whole answer, so an answer over 1 MiB is one
event over `MAX_EVENT_BYTES`. `CallPeer` reads such an event to its end keeping only its
first bytes and its last ones (`_oversized`), and returns the first `cap` bytes flagged
truncated. Bodies are pulled in-process (tests/hostile/streams.py): every loop is bounded.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coreagent_sdk import CallPeer, Peer, StaticDirectory
from coreagent_sdk.errors import PeerRequestError
from simulator import Fleet, behaviors

from .hostile.streams import CHUNK, Pulled, StreamingPeer

MIB = 1024 * 1024
CAP = 16 * 1024


def go_json(payload: Any) -> bytes:
    """JSON as the daemon's encoding/json writes it: compact, UTF-8, <, > and & escaped."""
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def event(text: str, author: str = "peer", role: str = "model", **fields: Any) -> dict[str, Any]:
    """An agent frame in the daemon's field order: Content first, Author near the end."""
    return {
        "seq": 7,
        "event": {
            "Content": {"parts": [{"text": text}], "role": role},
            "CitationMetadata": None,
            "Partial": False,
            "TurnComplete": False,
            "ID": "e-1",
            "Author": author,
            "Actions": {"StateDelta": None, "Escalate": False},
            "LongRunningToolIDs": None,
            **fields,
        },
    }


def sse(payload: dict[str, Any], kind: str = "agent") -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + go_json(payload) + b"\n\n"


def big_event(size: int, unit: str = "x", author: str = "peer") -> Callable[[], Iterator[bytes]]:
    """One agent event whose text is `unit` repeated to about `size` bytes, made in chunks."""
    head, tail = sse(event("@@", author=author)).split(b"@@")

    def chunks() -> Iterator[bytes]:
        yield head
        piece = go_json(unit * (CHUNK // len(go_json(unit))))[1:-1]
        for _ in range(size // len(piece)):
            yield piece
        yield tail

    return chunks


def tool_for(*parts: Callable[[], Iterator[bytes]], **kw: Any) -> tuple[CallPeer, Pulled]:
    def body() -> Iterator[bytes]:
        for part in parts:
            yield from part()

    pulled = Pulled(body)
    peer = StreamingPeer(pulled)
    directory = StaticDirectory([Peer("big", "http://big.test")])
    return CallPeer(directory, transport=peer, timeout=30, max_response_bytes=CAP, **kw), pulled


async def test_a_2_mb_answer_from_the_simulator_comes_back_truncated_at_the_cap() -> None:
    fleet = Fleet()
    fleet.add_peer("big", behaviors.reply("x" * 2_000_000))
    try:
        result = await fleet.call_peer(timeout=10, max_response_bytes=CAP).acall(
            peer="big", prompt="write it all"
        )
    finally:
        await fleet.aclose()
    assert result.truncated and result.response == "x" * CAP


async def test_a_100_mb_answer_in_one_event_is_truncated_in_bounded_memory() -> None:
    tool, body = tool_for(big_event(100 * MIB))
    tracemalloc.start()
    try:
        result = await tool.acall(peer="big", prompt="go")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.truncated and result.response == "x" * CAP
    assert body.pulled >= 99 * MIB  # read to its end (Author comes last), never held
    assert peak < 16 * MIB, f"peak {peak / MIB:.1f} MiB"


@pytest.mark.parametrize("unit", ["<a&b>", "é€", "😀", '\\"', "a<"])
async def test_escapes_and_multibyte_characters_at_the_cut_give_whole_characters(unit) -> None:
    tool, _ = tool_for(big_event(3 * MIB, unit=unit))
    result = await tool.acall(peer="big", prompt="go")
    whole = (unit * (CAP // len(unit.encode()) + 8)).encode()
    assert result.truncated
    assert result.response == whole[:CAP].decode("utf-8", "ignore").rstrip()


def test_a_cut_anywhere_in_an_event_reads_a_true_prefix_of_its_text() -> None:
    from coreagent_sdk._attach._oversized import OversizedFrame, read_oversized

    # Every cut point of the first bytes: escapes (Go's \\u003c, a surrogate pair) and
    # multi-byte characters are never halved, and nothing is invented.
    text = 'é<€>&😀"\\\n\U0001f600' * 40
    for data in (go_json(event(text)), json.dumps(event(text)).encode()):
        tail = data[-400:]
        for cut in range(40, len(data) - 400):
            read = read_oversized("agent", data[:cut], tail, len(data) + 1)
            assert isinstance(read, OversizedFrame) and read.frame is not None, cut
            got = read.frame.event.text
            assert text.startswith(got), cut
            assert read.frame.event.author == "peer"


async def test_an_oversized_event_by_the_user_is_not_counted() -> None:
    # The echoed prompt is no answer, however large; the peer's short answer is.
    answer = lambda: iter([sse(event("the answer", TurnComplete=True))])  # noqa: E731
    tool, _ = tool_for(big_event(2 * MIB, author="user"), answer)
    result = await tool.acall(peer="big", prompt="go")
    assert result.response == "the answer" and not result.truncated


async def test_an_oversized_event_too_short_in_text_fails_typed_with_the_session() -> None:
    # Its first bytes hold only a tool result: the answer text, if any, was discarded.
    payload = event("", functionResponse=None)
    payload["event"]["Content"]["parts"] = [
        {"text": "short"},
        {"functionResponse": {"name": "dump", "response": {"out": "@@"}}},
    ]
    head, tail = sse(payload).split(b"@@")
    filler = b"z" * CHUNK

    def chunks() -> Iterator[bytes]:
        yield head
        yield from [filler] * 40
        yield tail

    tool, _ = tool_for(chunks)
    with pytest.raises(PeerRequestError) as info:
        await tool.acall(peer="big", prompt="go")
    message = str(info.value)
    assert "sent one event of" in message and "session s-1" in message
    assert "could not be reached" not in message


async def test_an_oversized_event_that_is_not_json_still_fails_at_the_bound() -> None:
    tool, body = tool_for(lambda: iter([b"event: agent\ndata: "] + [b"q" * CHUNK] * 200))
    with pytest.raises(PeerRequestError, match="cannot be read") as info:
        await tool.acall(peer="big", prompt="go")
    assert "could not be reached" not in str(info.value)
    assert body.pulled <= 2 * MIB


async def test_an_oversized_event_ending_the_turn_with_its_text_discarded_fails_not_empty() -> None:
    # A huge tool result first, the answer text after it: that text was in the discarded
    # middle, so an empty answer would be a silent loss.
    payload = event("", TurnComplete=True)
    payload["event"]["Content"]["parts"] = [
        {"functionResponse": {"name": "dump", "response": {"out": "@@"}}},
        {"text": "the answer"},
    ]
    head, tail = sse(payload).split(b"@@")

    def chunks() -> Iterator[bytes]:
        yield head
        yield from [b"z" * CHUNK] * 40
        yield tail

    tool, _ = tool_for(chunks)
    with pytest.raises(PeerRequestError, match="sent one event of"):
        await tool.acall(peer="big", prompt="go")
