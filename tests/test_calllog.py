"""CallLog: calls rebuilt from CallPeer's events, concurrent calls kept apart."""

from __future__ import annotations

import asyncio

import pytest

from coreagent_sdk import CallLog, CallPeerEvent
from coreagent_sdk.errors import PeerTurnError, UnknownPeerError
from simulator import Fleet, behaviors

from .html_parse import Page


async def test_fifty_concurrent_calls_to_one_peer_make_fifty_records() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    log = CallLog()
    async with fleet.call_peer(timeout=10, on_event=log.on_event) as tool:
        await asyncio.gather(*(tool.acall(peer="echo", prompt=f"n{i}") for i in range(50)))
    records = log.records()
    assert len(records) == 50 == len({r.call_id for r in records})
    assert {r.state for r in records} == {"finished"}
    assert all(r.ended is not None and r.ended >= r.started for r in records)
    assert sorted(r.response_bytes for r in records if r.response_bytes) == sorted(
        len(f"n{i}") for i in range(50)
    )
    assert len({r.session_id for r in records}) == 50
    await fleet.aclose()


async def test_outcomes_carry_truncation_bytes_and_the_error_class() -> None:
    fleet = Fleet()
    fleet.add_peer("writer", behaviors.stream(5_000, 500))
    fleet.add_peer("flaky", behaviors.fail("rate_limited", "quota", retryable=True))
    log = CallLog()
    async with fleet.call_peer(timeout=10, max_response_bytes=100, on_event=log.on_event) as tool:
        await tool.acall(peer="writer", prompt="essay")
        with pytest.raises(PeerTurnError):
            await tool.acall(peer="flaky", prompt="work")
        with pytest.raises(UnknownPeerError):
            await tool.acall(peer="nobody", prompt="work")
    writer, flaky, nobody = log.records()
    assert (writer.state, writer.truncated, writer.response_bytes) == ("truncated", True, 100)
    assert (flaky.state, flaky.error_type) == ("failed", "PeerTurnError")
    assert nobody.error_type == "UnknownPeerError" and "unknown peer" in (nobody.error or "")
    page = Page(log._repr_html_())
    assert [row[1] for row in page.rows[1:]] == ["nobody", "flaky", "writer"]
    assert "failed 2" in page.text and "truncated 1" in page.text
    await fleet.aclose()


def test_the_log_is_bounded_and_drops_the_oldest_finished_calls_first() -> None:
    ticks = iter(range(1_000_000))
    log = CallLog(max_records=3, timer=lambda: float(next(ticks)))
    log.on_event(CallPeerEvent("started", "call_peer", "slow", call_id=1))
    for i in range(2, 7):
        log.on_event(CallPeerEvent("started", "call_peer", "p", call_id=i))
        log.on_event(CallPeerEvent("finished", "call_peer", "p", call_id=i, duration_ms=1))
    assert [r.call_id for r in log.records()] == [1, 5, 6]
    assert log.records()[0].state == "running"
    assert log.events == 11


def test_a_listener_sees_each_event_until_it_unsubscribes() -> None:
    log = CallLog()
    seen: list[str] = []
    unsubscribe = log.subscribe(lambda e: seen.append(e.kind))
    log.on_event(CallPeerEvent("started", "t", "p", call_id=1))
    unsubscribe()
    log.on_event(CallPeerEvent("failed", "t", "p", call_id=1, error_type="X"))
    assert seen == ["started"]


def test_max_records_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_records"):
        CallLog(max_records=0)
