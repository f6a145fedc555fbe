"""Item 5: PeerRegistration's keep-alive survives any single bad answer, and leaving cleans up.

A scripted hub answers each heartbeat as the test says: cut short, the wrong
shape, timestamps mixing naive and aware values, a 500, a 404. Time is a
FakeClock; every wait for an event is bounded by a second of real time.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from coreagent_sdk import ASGITransport, FakeClock, PeerRegistration, RegistrationEvent

RECORD = {
    "registration_id": "reg-1",
    "name": "p",
    "endpoint": "http://p.test",
    "registered_at": "2026-01-01T00:00:00Z",
    "last_heartbeat": "2026-01-01T00:00:00Z",
    "lease_expires_at": "2026-01-01T00:00:30Z",
}


class ScriptedHub:
    """Registers and deregisters normally; each heartbeat takes the next scripted answer."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, str]] = []
        self.registrations = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        method, path = scope["method"], scope["path"]
        self.seen.append((method, path))
        if method == "POST" and path == "/peers":
            self.registrations += 1
            await self._send(send, 201, RECORD)
        elif path.endswith("/heartbeat"):
            answer = self.answers.pop(0) if self.answers else (200, RECORD)
            if answer == "cut-short":
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": "http.response.body", "body": b'{"name"', "more_body": True})
                raise ConnectionResetError("the hub went away mid-answer")
            await self._send(send, *answer)
        elif method == "DELETE":
            await self._send(send, 204, b"")
        else:
            await self._send(send, 404, b"not found\n")

    @staticmethod
    async def _send(send: Any, status: int, body: Any) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


async def next_event(events: asyncio.Queue[RegistrationEvent], kind: str) -> RegistrationEvent:
    async def wanted() -> RegistrationEvent:
        while True:
            event = await events.get()
            if event.kind == kind:
                return event

    return await asyncio.wait_for(wanted(), 1)


def joined(hub: ScriptedHub, clock: FakeClock, events: asyncio.Queue[Any]) -> PeerRegistration:
    return PeerRegistration(
        "http://hub.test",
        name="p",
        endpoint="http://p.test",
        ttl=30,
        transport=ASGITransport(hub),
        clock=clock,
        on_event=events.put_nowait,
    )


BAD_ANSWERS = {
    "cut-short": "cut-short",
    "wrong-shape": (200, []),
    "naive-and-aware": (200, {**RECORD, "lease_expires_at": "2026-01-01T00:00:30"}),
    "garbage-time": (200, {**RECORD, "lease_expires_at": "9999-99-99"}),
    "server-error": (500, b"boom\n"),
    "not-json": (200, b"<html>"),
}


@pytest.mark.parametrize("bad", sorted(BAD_ANSWERS))
async def test_one_bad_heartbeat_answer_does_not_end_the_keep_alive(bad: str, caplog) -> None:
    hub = ScriptedHub(BAD_ANSWERS[bad])
    clock = FakeClock()
    events: asyncio.Queue[RegistrationEvent] = asyncio.Queue()
    async with joined(hub, clock, events) as reg:
        beats_before = reg.heartbeats
        for _ in range(3):  # the bad answer, then the loop must still be beating
            await clock.until_sleeping()
            clock.advance(reg.interval())
        await next_event(events, "heartbeat")
        assert reg.heartbeats > beats_before
        await clock.until_sleeping()  # and it sleeps toward the next one
    assert hub.seen[-1][0] == "DELETE"


async def test_a_failed_heartbeat_is_logged_and_retried_sooner_than_the_interval(caplog) -> None:
    hub = ScriptedHub((500, b"boom\n"))
    clock = FakeClock()
    events: asyncio.Queue[RegistrationEvent] = asyncio.Queue()
    async with joined(hub, clock, events) as reg:
        assert reg.interval() == 10.0
        await clock.until_sleeping()
        clock.advance(10)
        failed = await next_event(events, "heartbeat_failed")
        assert "500" in (failed.error or "")
        await clock.until_sleeping()
        clock.advance(1)  # the first retry comes after 1 s, not after the 10 s interval
        await next_event(events, "heartbeat")
        assert hub.registrations == 1  # a 500 is not a reason to register again
    assert any("heartbeat for 'p' failed" in r.getMessage() for r in caplog.records)


async def test_a_404_on_heartbeat_registers_again() -> None:
    hub = ScriptedHub((404, b"unknown registration\n"))
    clock = FakeClock()
    events: asyncio.Queue[RegistrationEvent] = asyncio.Queue()
    async with joined(hub, clock, events):
        await clock.until_sleeping()
        clock.advance(10)
        await next_event(events, "heartbeat_failed")
        await next_event(events, "registered")
    assert hub.registrations == 2


class BrokenClock(FakeClock):
    """A clock whose second sleep raises something no one expects."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps = 0

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if self.sleeps == 2:
            raise RuntimeError("clock broke")
        await super().sleep(seconds)


async def test_leaving_deregisters_and_closes_even_after_the_keep_alive_died(caplog) -> None:
    hub = ScriptedHub()
    clock = BrokenClock()
    reg = PeerRegistration(
        "http://hub.test",
        name="p",
        endpoint="http://p.test",
        ttl=30,
        transport=ASGITransport(hub),
        clock=clock,
    )
    async with reg:
        await clock.until_sleeping()
        clock.advance(10)
        for _ in range(100):  # let the keep-alive reach its broken second sleep
            if clock.sleeps >= 2:
                break
            await asyncio.sleep(0)
        assert clock.sleeps >= 2
    assert hub.seen[-1][0] == "DELETE"
    assert reg.record is None
    assert any("keep-alive" in r.getMessage() for r in caplog.records)


async def test_leaving_survives_a_deregistration_the_hub_refuses() -> None:
    class Refusing(ScriptedHub):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["method"] == "DELETE":
                self.seen.append(("DELETE", scope["path"]))
                await self._send(send, 200, [])  # neither 204 nor a record
                return
            await super().__call__(scope, receive, send)

    hub = Refusing()
    async with joined(hub, FakeClock(), asyncio.Queue()) as reg:
        pass
    assert hub.seen[-1][0] == "DELETE" and reg.record is None
