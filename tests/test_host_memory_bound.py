"""What finished delegations leave in a host's memory is bounded (`max_sessions_in_memory`).

A caller that never deletes its sessions (CallPeer's default) left every one of
them in the host's memory until the daemon's 24 h idle timeout: RSS grew by
kilobytes per delegation. Past the bound the least recently used sessions nothing
is using go to the store, as the idle sweep sends them, and come back on use.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import httpx
import pytest

from coreagent_sdk import ASGITransport, CallPeer, Peer, StaticDirectory
from coreagent_sdk.host import DEFAULT_MAX_SESSIONS_IN_MEMORY, AgentHost, Turn
from tests.test_host_fidelity import new_session, one_turn, seqs, split_at_turn

BOUND = 8
STARTUP = "default"


def make(bound: int | None = BOUND, **options: Any) -> AgentHost:
    return AgentHost("agent", session_rate_limit=None, max_sessions_in_memory=bound, **options)


def client(host: AgentHost) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=ASGITransport(host.app), base_url="http://agent.test")


def in_memory(host: AgentHost) -> set[str]:
    return set(host.sessions) - {STARTUP}


async def listing(http: httpx.AsyncClient) -> dict[str, str]:
    answer = await http.get("/sessions")
    assert answer.status_code == 200, answer.text
    return {row["sessionID"]: row["status"] for row in answer.json()["sessions"]}


async def test_past_its_bound_a_host_keeps_the_latest_used_sessions_and_lists_the_rest_idle() -> (
    None
):
    host = make()
    made: list[str] = []
    async with client(host) as http:
        for _ in range(3 * BOUND):
            path = await new_session(http)
            await one_turn(http, path)
            made.append(path.rsplit("/", 1)[1])
            assert len(in_memory(host)) <= BOUND  # counted after every delegation
        kept = in_memory(host)
        assert kept == set(made[-len(kept) :])  # the most recently used stay
        assert len(kept) >= BOUND - BOUND // 8
        listed = await listing(http)
        assert {sid for sid in made if listed[sid] == "active"} == kept
        assert {sid for sid in made if listed[sid] == "idle"} == set(made) - kept
    await host.aclose()


async def test_a_session_sent_to_the_store_by_the_bound_resumes_with_its_log() -> None:
    host = make(bound=2)
    async with client(host) as http:
        first = await new_session(http)
        logged = seqs(await one_turn(http, first))
        for _ in range(4):
            await one_turn(http, await new_session(http))
        assert first.rsplit("/", 1)[1] not in host.sessions
        replayed, live = split_at_turn(await one_turn(http, first, "again", since="0"))
        assert replayed == logged
        assert len(live) == 2 and live[0] > logged[-1]
        assert first.rsplit("/", 1)[1] in host.sessions
        assert len(in_memory(host)) <= 2
    await host.aclose()


async def test_a_session_with_an_open_stream_or_a_running_turn_stays_past_the_bound() -> None:
    release = asyncio.Event()

    async def waits(turn: Turn) -> None:
        await release.wait()
        await turn.say("released")

    host = make(bound=2, behavior=waits)
    async with client(host) as http:
        streamed, running = await new_session(http), await new_session(http)
        answer = await http.post(f"{running}/inject", json={"message": "wait"})
        assert answer.status_code == 200
        async with http.stream("GET", f"{streamed}/events") as stream:
            assert stream.status_code == 200
            for _ in range(2 * 2):
                await new_session(http)
            sids = {p.rsplit("/", 1)[1] for p in (streamed, running)}
            assert sids <= in_memory(host)
            assert len(in_memory(host)) == 2  # every session the bound could evict has gone
        release.set()
    await host.aclose()


async def test_the_sessions_of_finished_delegations_are_freed_past_the_bound() -> None:
    """Through CallPeer, as a fleet delegates: sessions it leaves are not held in memory."""
    host = make(bound=4)
    tool = CallPeer(
        StaticDirectory([Peer("agent", "http://agent.test")]), transport=ASGITransport(host.app)
    )
    alive: list[weakref.ref[Any]] = []
    for _ in range(20):
        result = await tool.acall(peer="agent", prompt="hi")
        assert result.response == "hi"
        alive += [weakref.ref(s) for sid, s in host.sessions.items() if sid != STARTUP]
    await tool.aclose()
    gc.collect()
    held = {id(r()) for r in alive if r() is not None}
    assert len(held) == len(in_memory(host)) <= 4
    await host.aclose()


def test_the_default_bound_holds_a_thousand_sessions() -> None:
    assert make(bound=DEFAULT_MAX_SESSIONS_IN_MEMORY).max_sessions_in_memory == 1_000
    assert AgentHost("agent").max_sessions_in_memory == DEFAULT_MAX_SESSIONS_IN_MEMORY


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_a_bound_that_is_not_a_whole_number_above_zero_is_refused_with_the_fix(bad: Any) -> None:
    refused = r"max_sessions_in_memory must be a whole number >= 1 or None .*, got "
    with pytest.raises(ValueError, match=refused):
        make(bound=bad)
