"""CallPeer as a web service uses it: sessions it leaves behind, and errors an app can act on."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from coreagent_sdk import AllowList, FakeClock
from coreagent_sdk.errors import (
    CallPeerError,
    PeerRateLimitedError,
    PeerRequestError,
    PeerTimeoutError,
    PeerTurnError,
    StreamEndedError,
    UnknownPeerError,
)
from simulator import Fleet, SessionRateLimit, behaviors

from .processes import Stopwatch


def sessions_left(fleet: Fleet) -> int:
    """Sessions callers opened that are still on the peers (startup sessions excluded)."""
    return sum(
        1
        for name, daemon in fleet.daemons.items()
        if name != "hub"
        for sid in daemon.sessions
        if sid != "default"
    )


class Meddling(httpx.AsyncBaseTransport):
    """The fleet's transport, with one kind of request answered by `handler` instead."""

    def __init__(self, inner: httpx.AsyncBaseTransport, method: str, path_end: str, handler):
        self.inner = inner
        self.method = method
        self.path_end = path_end
        self.handler = handler
        self.seen = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == self.method and request.url.path.endswith(self.path_end):
            self.seen += 1
            return await self.handler(request)
        return await self.inner.handle_async_request(request)


# --- sessions left on peers (delete_sessions) ---------------------------------------


async def test_by_default_every_call_leaves_its_session_on_the_peer() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    tool = fleet.call_peer(timeout=5)
    for i in range(3):
        await tool.acall(peer="echo", prompt=f"call {i}")
    assert sessions_left(fleet) == 3
    await fleet.aclose()


async def test_delete_sessions_deletes_each_calls_session_once_the_answer_is_read() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    tool = fleet.call_peer(timeout=5, delete_sessions=True)
    results = [await tool.acall(peer="echo", prompt=f"call {i}") for i in range(3)]
    assert [r.response for r in results] == ["call 0", "call 1", "call 2"]
    assert sessions_left(fleet) == 0
    await fleet.aclose()


async def test_a_truncated_answers_session_is_kept_it_holds_the_rest() -> None:
    fleet = Fleet()
    fleet.add_peer("writer", behaviors.stream(4_000, 1_000))
    tool = fleet.call_peer(timeout=5, delete_sessions=True, max_response_bytes=100)
    result = await tool.acall(peer="writer", prompt="write")
    assert result.truncated
    assert sessions_left(fleet) == 1
    await fleet.aclose()


async def test_a_failed_delete_never_changes_the_answer() -> None:
    async def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="no")

    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    meddling = Meddling(fleet.transport, "DELETE", "", refuse)
    tool = fleet.call_peer(timeout=5, delete_sessions=True, transport=meddling)
    assert (await tool.acall(peer="echo", prompt="still here")).response == "still here"
    assert meddling.seen == 1
    await fleet.aclose()


async def test_a_delete_that_hangs_ends_at_the_calls_deadline_with_the_answer() -> None:
    async def hang(request: httpx.Request) -> httpx.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    fleet = Fleet()
    fleet.add_peer("slow", behaviors.slow(0.2))
    meddling = Meddling(fleet.transport, "DELETE", "", hang)
    tool = fleet.call_peer(timeout=0.5, delete_sessions=True, transport=meddling)
    started = time.perf_counter()
    watch = Stopwatch()  # less this thread's waits for a CPU: the fleet runs on this loop
    result = await tool.acall(peer="slow", prompt="answer me")
    took, own = time.perf_counter() - started, watch.seconds()
    assert result.response == "answer me"
    # 0.2 s of the budget went on the turn: the delete had the 0.3 s left, and no more.
    assert took >= 0.45 and own < 0.8
    await fleet.aclose()


async def test_the_sync_form_deletes_sessions_too() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    tool = fleet.call_peer(timeout=5, delete_sessions=True)
    result = await asyncio.to_thread(tool, "echo", "from a thread")
    await asyncio.to_thread(tool.close)
    assert result.response == "from a thread"
    assert sessions_left(fleet) == 0
    await fleet.aclose()


# --- errors an app can act on ---------------------------------------------------------


async def test_an_unknown_peer_error_carries_the_roster_names_the_gate_allows() -> None:
    fleet = Fleet()
    for name in ("zeta", "alpha", "secret-ops"):
        fleet.add_peer(name, behaviors.echo())
    tool = fleet.call_peer(timeout=5, gate=AllowList(["call_peer:alpha", "call_peer:zeta"]))
    with pytest.raises(UnknownPeerError) as info:
        await tool.acall(peer="", prompt="who is there?")
    assert info.value.names == ("alpha", "zeta")
    assert info.value.retry_safe is True
    await fleet.aclose()


async def test_an_unknown_peer_error_lists_every_name_where_the_message_stops_at_50() -> None:
    fleet = Fleet()
    for i in range(60):
        fleet.add_peer(f"p{i:02d}", behaviors.echo())
    with pytest.raises(UnknownPeerError, match=r"and 10 more") as info:
        await fleet.call_peer(timeout=5).acall(peer="nobody", prompt="hi")
    assert info.value.names == tuple(f"p{i:02d}" for i in range(60))
    await fleet.aclose()


async def test_an_empty_hub_gives_no_names() -> None:
    fleet = Fleet()
    with pytest.raises(UnknownPeerError, match="no peers are registered") as info:
        await fleet.call_peer(timeout=5).acall(peer="x", prompt="hi")
    assert info.value.names == ()


async def test_a_429_on_opening_the_session_is_safe_to_retry() -> None:
    fleet = Fleet(clock=FakeClock(), session_rate_limit=SessionRateLimit(burst=1))
    fleet.add_peer("echo", behaviors.echo())
    tool = fleet.call_peer(timeout=5)
    await tool.acall(peer="echo", prompt="one")
    with pytest.raises(PeerRateLimitedError) as info:
        await tool.acall(peer="echo", prompt="two")
    assert info.value.retry_safe is True
    await fleet.aclose()


async def test_a_turn_error_is_not_safe_to_retry_the_turn_ran() -> None:
    fleet = Fleet()
    fleet.add_peer("flaky", behaviors.fail("rate_limited", "quota", retryable=True))
    with pytest.raises(PeerTurnError) as info:
        await fleet.call_peer(timeout=5).acall(peer="flaky", prompt="work")
    assert info.value.retry_safe is False
    assert info.value.retryable is True  # the peer's own word, a different question
    await fleet.aclose()


async def test_a_timeout_after_the_prompt_went_out_is_not_safe_to_retry() -> None:
    fleet = Fleet()
    fleet.add_peer("stuck", behaviors.never_finish())
    with pytest.raises(PeerTimeoutError) as info:
        await fleet.call_peer(timeout=0.2).acall(peer="stuck", prompt="work")
    assert info.value.retry_safe is False
    await fleet.aclose()


async def test_a_stream_dropped_mid_turn_is_not_safe_to_retry() -> None:
    fleet = Fleet()
    fleet.add_peer("dropper", behaviors.drop_stream(after_frames=1))
    with pytest.raises(StreamEndedError) as info:
        await fleet.call_peer(timeout=5).acall(peer="dropper", prompt="work")
    assert info.value.retry_safe is False
    await fleet.aclose()


async def test_an_inject_the_peer_refused_is_safe_to_retry_one_that_broke_is_not() -> None:
    async def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text="empty message\n")

    async def break_off(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("")

    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    outcomes = []
    for handler in (refuse, break_off):
        tool = fleet.call_peer(
            timeout=5, transport=Meddling(fleet.transport, "POST", "/inject", handler)
        )
        with pytest.raises(PeerRequestError) as info:
            await tool.acall(peer="echo", prompt="work")
        outcomes.append(info.value.retry_safe)
    assert outcomes == [True, False]
    await fleet.aclose()


async def test_an_error_with_an_empty_cause_says_what_broke_in_words() -> None:
    async def reset(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("")

    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    tool = fleet.call_peer(
        timeout=5, transport=Meddling(fleet.transport, "POST", "/sessions", reset)
    )
    with pytest.raises(PeerRequestError) as info:
        await tool.acall(peer="echo", prompt="work")
    text = str(info.value)
    assert "(ReadError: the connection broke while reading the answer)" in text
    assert "ReadError: )" not in text
    assert info.value.retry_safe is True
    await fleet.aclose()


def test_every_call_peer_error_class_says_whether_retrying_is_safe() -> None:
    import coreagent_sdk.errors as errors

    classes = [
        c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, CallPeerError)
    ]
    assert len(classes) >= 13
    assert {c.__name__ for c in classes if not c.retry_safe} == {
        "PeerTurnError",
        "StreamEndedError",
    }
