"""CallLog: calls rebuilt from CallPeer's events, concurrent calls kept apart."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

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


def test_many_threads_writing_while_another_reads_never_break_the_log() -> None:
    log = CallLog(max_records=500)
    errors: list[str] = []
    writers_done = threading.Event()

    def write(worker: int) -> None:
        for j in range(400):
            call_id = worker * 1_000 + j + 1
            log.on_event(CallPeerEvent("started", "call_peer", f"p{worker}", call_id=call_id))
            log.on_event(
                CallPeerEvent("finished", "call_peer", f"p{worker}", call_id=call_id, duration_ms=1)
            )

    def read() -> None:
        deadline = time.monotonic() + 60
        for _ in range(100_000):  # bounded; stops when the writers are done
            if writers_done.is_set() or time.monotonic() > deadline:
                return
            try:
                repr(log)
                log._repr_html_()
                assert len(log.records()) <= 500 + 8  # at most one running call per writer
                list(log)
                len(log)
            except Exception as exc:  # every failure is the finding
                errors.append(f"{type(exc).__name__}: {exc}")

    reader = threading.Thread(target=read)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so a race shows in every run
    try:
        reader.start()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(write, range(8)))
    finally:
        writers_done.set()
        sys.setswitchinterval(switch)
    reader.join(timeout=60)
    assert not reader.is_alive()
    assert errors == []
    assert log.events == 8 * 400 * 2  # no increment lost between threads
    records = log.records()
    assert len(records) == 500 and {r.state for r in records} == {"finished"}


def test_sync_calls_from_a_thread_pool_all_land_in_one_log() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    log = CallLog()
    tool = fleet.call_peer(timeout=10, on_event=log.on_event)

    def calls(worker: int) -> list[str]:
        return [tool(peer="echo", prompt=f"{worker}-{j}").response for j in range(10)]

    with ThreadPoolExecutor(8) as pool:
        answers = [a for batch in pool.map(calls, range(8), timeout=60) for a in batch]
    assert sorted(answers) == sorted(f"{w}-{j}" for w in range(8) for j in range(10))
    records = log.records()
    assert len(records) == 80 == len({r.call_id for r in records})
    assert {r.state for r in records} == {"finished"}
    assert "finished 80" in repr(log)
    fleet.close()
