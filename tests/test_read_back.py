"""`CallPeer.read_answer`: a truncated call's whole answer, read back from the peer's session."""

from __future__ import annotations

import asyncio
import time

import attrs
import httpx
import pytest

from coreagent_sdk import AllowList, CallPeerResult
from coreagent_sdk.errors import (
    InvalidArgumentError,
    PeerRequestError,
    PeerTimeoutError,
    PermissionDeniedError,
    UnknownPeerError,
)
from simulator import Fleet, behaviors


class Recording(httpx.AsyncBaseTransport):
    """Passes requests on and remembers each one's method and path."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.sent: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(f"{request.method} {request.url.path}")
        return await self.inner.handle_async_request(request)


def long_answer(pieces: int, piece: int = 4_000) -> behaviors.Behavior:
    async def write(turn: behaviors.Turn) -> str:
        for i in range(pieces):
            await turn.narrate(str(i % 10) * piece, tool="write")
        return "done."

    return behaviors.custom(write)


async def test_a_truncated_answer_is_read_back_whole_from_the_peers_session() -> None:
    fleet = Fleet()
    fleet.add_peer("writer", long_answer(10))
    tool = fleet.call_peer(timeout=10, max_response_bytes=1_000)
    cut = await tool.acall(peer="writer", prompt="a long report")
    assert cut.truncated and len(cut.response.encode()) <= 1_000
    whole = await tool.read_answer(cut)
    assert not whole.truncated
    assert whole.response.startswith(cut.response) and whole.response.endswith("done.")
    assert len(whole.response.encode()) == 10 * 4_000 + 10 * 2 + len("done.")  # \n\n between
    assert (whole.peer, whole.session_id) == ("writer", cut.session_id)
    assert whole.max_response_bytes == 1024 * 1024
    assert "read_answer(result)" in cut._repr_html_()  # the card says how
    await fleet.aclose()


async def test_reading_back_stops_at_its_own_cap_and_says_so() -> None:
    fleet = Fleet()
    fleet.add_peer("writer", long_answer(10))
    tool = fleet.call_peer(timeout=10, max_response_bytes=1_000)
    cut = await tool.acall(peer="writer", prompt="a long report")
    part = await tool.read_answer(cut, max_response_bytes=8_002)
    assert part.truncated and len(part.response.encode()) <= 8_002
    assert len(part.response.encode()) > 8_000 - 10  # cut at the cap, not far before it
    await fleet.aclose()


async def test_reading_back_a_turn_still_running_waits_for_its_end() -> None:
    go_on = asyncio.Event()

    async def slow(turn: behaviors.Turn) -> str:
        await turn.narrate("a" * 3_000, tool="write")
        await go_on.wait()
        return "the end"

    fleet = Fleet()
    fleet.add_peer("slow", behaviors.custom(slow))
    tool = fleet.call_peer(timeout=10, max_response_bytes=100)
    cut = await tool.acall(peer="slow", prompt="go")
    assert cut.truncated
    reading = asyncio.ensure_future(tool.read_answer(cut, timeout=5))
    await asyncio.sleep(0.05)
    assert not reading.done()
    go_on.set()
    whole = await reading
    assert whole.response == "a" * 3_000 + "\n\nthe end"
    await fleet.aclose()


async def test_reading_back_an_answer_that_never_ends_fails_at_its_deadline() -> None:
    async def endless(turn: behaviors.Turn) -> str:
        await turn.narrate("b" * 500, tool="write")
        await asyncio.Event().wait()
        return ""

    fleet = Fleet()
    fleet.add_peer("endless", behaviors.custom(endless))
    tool = fleet.call_peer(timeout=10, max_response_bytes=100)
    cut = await tool.acall(peer="endless", prompt="go")
    started = time.perf_counter()
    with pytest.raises(PeerTimeoutError, match=r"did not end within 0\.2 s"):
        await tool.read_answer(cut, timeout=0.2)
    assert time.perf_counter() - started < 2
    await fleet.aclose()


async def test_a_log_that_lost_its_beginning_fails_instead_of_returning_the_tail() -> None:
    fleet = Fleet()
    daemon = fleet.add_peer("writer", long_answer(5))
    tool = fleet.call_peer(timeout=10, max_response_bytes=1_000)
    cut = await tool.acall(peer="writer", prompt="a long report")
    await tool.read_answer(cut)  # whole while the log holds the prompt
    await daemon.store.file.read(  # its oldest event goes, as the replay window moving past it
        lambda db: db.conn.execute(
            "DELETE FROM events WHERE seq = (SELECT min(seq) FROM events WHERE session_id = ?)",
            (cut.session_id,),
        )
    )
    with pytest.raises(PeerRequestError, match="no longer starts with the prompt"):
        await tool.read_answer(cut)
    await fleet.aclose()


async def test_a_session_id_that_is_not_a_path_segment_is_refused_before_sending() -> None:
    fleet = Fleet()
    fleet.add_peer("writer", long_answer(2))
    recording = Recording(fleet.transport)
    tool = fleet.call_peer(timeout=10, max_response_bytes=100, transport=recording)
    cut = await tool.acall(peer="writer", prompt="go")
    recording.sent.clear()
    for bad in ("../../peers", "s-1/events?since=0", "", "a b"):
        with pytest.raises(InvalidArgumentError, match="not a plain path segment"):
            await tool.read_answer(attrs.evolve(cut, session_id=bad))
    assert recording.sent == []
    await fleet.aclose()


async def test_reading_back_is_gated_and_resolves_the_peer_by_name_again() -> None:
    fleet = Fleet()
    fleet.add_peer("writer", long_answer(2))
    recording = Recording(fleet.transport)
    tool = fleet.call_peer(timeout=10, max_response_bytes=100, transport=recording)
    cut = await tool.acall(peer="writer", prompt="go")
    gated = fleet.call_peer(timeout=10, gate=AllowList(["call_peer:prod-*"]), transport=recording)
    recording.sent.clear()
    with pytest.raises(PermissionDeniedError):
        await gated.read_answer(cut)
    assert recording.sent == []
    fleet.add_peer("other")
    fleet.remove_peer("writer")
    with pytest.raises(UnknownPeerError, match='unknown peer "writer"'):
        await tool.read_answer(cut)
    assert recording.sent == []
    await fleet.aclose()


async def test_read_answer_checks_its_arguments() -> None:
    fleet = Fleet()
    tool = fleet.call_peer()
    result = CallPeerResult("p", "s-1", "x", 1, truncated=True)
    with pytest.raises(ValueError, match="max_response_bytes"):
        await tool.read_answer(result, max_response_bytes=0)
    with pytest.raises(ValueError, match="max_response_bytes"):
        await tool.read_answer(result, max_response_bytes=64 * 1024 * 1024 + 1)
    with pytest.raises(ValueError, match="timeout"):
        await tool.read_answer(result, timeout=901)
    with pytest.raises(InvalidArgumentError, match="CallPeerResult"):
        await tool.read_answer("s-1")  # type: ignore[arg-type]
    await fleet.aclose()
