"""PeerRegistration against the simulated hub, on a fake clock (no sleeping)."""

from __future__ import annotations

import asyncio

import pytest

from coreagent_sdk import FakeClock, PeerRegistration, RegistrationEvent
from coreagent_sdk.errors import RegistrationError, TokenUnsetError
from simulator import Fleet

HUB = "http://hub.sim"


async def next_event(events: asyncio.Queue[RegistrationEvent], kind: str) -> RegistrationEvent:
    """The next event of `kind` (others skipped), within a second of real time."""

    async def wanted() -> RegistrationEvent:
        while True:
            event = await events.get()
            if event.kind == kind:
                return event

    return await asyncio.wait_for(wanted(), 1)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fleet(clock: FakeClock) -> Fleet:
    return Fleet(clock=clock)


def joined(fleet: Fleet, clock: FakeClock, events: asyncio.Queue[RegistrationEvent], **kw):
    kw.setdefault("name", "py-worker")
    kw.setdefault("endpoint", "http://py-worker.internal:9000")
    return PeerRegistration(
        HUB, transport=fleet.transport, clock=clock, on_event=events.put_nowait, **kw
    )


async def test_entering_registers_and_leaving_deregisters(fleet, clock) -> None:
    events: asyncio.Queue[RegistrationEvent] = asyncio.Queue()
    async with joined(fleet, clock, events, labels={"lang": "python"}) as reg:
        record = fleet.registry.get("py-worker")
        assert record is not None and record.labels == {"lang": "python"}
        assert reg.registration_id == record.registration_id
    assert fleet.registry.get("py-worker") is None
    kinds = []
    while not events.empty():
        kinds.append(events.get_nowait().kind)
    assert kinds == ["registered", "deregistered"]


async def test_heartbeats_keep_the_lease_alive_across_several_ttls(fleet, clock) -> None:
    events: asyncio.Queue[RegistrationEvent] = asyncio.Queue()
    async with joined(fleet, clock, events, ttl=30) as reg:
        assert reg.interval() == 10.0  # a third of the lease
        for _ in range(12):  # four whole TTLs
            await clock.until_sleeping()
            clock.advance(10)
            await next_event(events, "heartbeat")
            assert fleet.registry.get("py-worker") is not None
        assert reg.heartbeats == 12 and reg.registrations == 1


async def test_without_heartbeats_the_hub_would_have_pruned_it(fleet, clock) -> None:
    fleet.registry.register("silent", "http://silent:1", ttl=30)
    clock.advance(31)
    assert fleet.registry.get("silent") is None


async def test_a_failed_heartbeat_leads_to_a_fresh_registration(fleet, clock) -> None:
    events: asyncio.Queue[RegistrationEvent] = asyncio.Queue()
    async with joined(fleet, clock, events, ttl=30) as reg:
        first_id = reg.registration_id
        fleet.expire("py-worker")  # the hub forgets it (restart, prune, operator)
        assert fleet.registry.get("py-worker") is None
        await clock.until_sleeping()
        clock.advance(10)
        failed = await next_event(events, "heartbeat_failed")
        assert "register again" in (failed.error or "")
        await next_event(events, "registered")
        again = fleet.registry.get("py-worker")
        assert again is not None and again.registration_id != first_id
        assert reg.registration_id == again.registration_id
        await clock.until_sleeping()
        clock.advance(10)
        await next_event(events, "heartbeat")
    assert fleet.registry.get("py-worker") is None


async def test_the_interval_is_never_faster_than_once_a_second(fleet, clock) -> None:
    events: asyncio.Queue[RegistrationEvent] = asyncio.Queue()
    async with joined(fleet, clock, events, ttl=1.5) as reg:
        assert reg.interval() == 1.0


async def test_a_hub_that_refuses_the_registration_raises_on_entry(fleet, clock) -> None:
    fleet.faults("hub").error_status = 503
    with pytest.raises(
        RegistrationError, match=r"could not register 'py-worker' on http://hub\.sim"
    ):
        async with joined(fleet, clock, asyncio.Queue()):
            pass


async def test_a_protected_hub_gets_the_token_from_the_named_variable(clock) -> None:
    fleet = Fleet(tokens={"worker-token": "worker"}, clock=clock)
    events: asyncio.Queue[RegistrationEvent] = asyncio.Queue()
    async with joined(
        fleet, clock, events, token_env="HUB_TOKEN", environ={"HUB_TOKEN": "worker-token"}
    ):
        entry = fleet.registry.get("py-worker")
        assert entry is not None and entry.owner == "worker"
    with pytest.raises(TokenUnsetError, match=r"\$HUB_TOKEN"):
        async with joined(fleet, clock, events, token_env="HUB_TOKEN", environ={}):
            pass


@pytest.mark.parametrize("endpoint", ["ftp://x", "/relative", "javascript:alert(1)"])
def test_a_bad_endpoint_is_refused_before_anything_is_sent(endpoint) -> None:
    with pytest.raises(ValueError, match=r"registration: endpoint .* is refused"):
        PeerRegistration(HUB, name="x", endpoint=endpoint)


async def test_the_registered_peer_is_reachable_by_name_through_the_directory(fleet, clock) -> None:
    events: asyncio.Queue[RegistrationEvent] = asyncio.Queue()
    async with joined(fleet, clock, events):
        names = [p.name for p in await fleet.directory().peers()]
    assert names == ["py-worker"]


async def test_a_fake_clock_wakes_sleepers_in_deadline_order() -> None:
    clock = FakeClock(start=0)
    woke: list[str] = []

    async def nap(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    tasks = [asyncio.create_task(nap("late", 5)), asyncio.create_task(nap("early", 2))]
    await clock.until_sleeping(2)
    clock.advance(3)
    await asyncio.sleep(0)
    assert woke == ["early"]
    clock.advance(2)
    await asyncio.gather(*tasks)
    assert woke == ["early", "late"] and clock.now() == 5
    with pytest.raises(ValueError, match="must be >= 0"):
        clock.advance(-1)


async def test_a_registration_that_times_out_names_its_own_timeout_option(fleet) -> None:
    # A stalled hub on the system clock; the message used to say AttachClient(timeout=...).
    fleet.faults("hub").latency = 5
    registration = PeerRegistration(
        HUB,
        name="py-worker",
        endpoint="http://py-worker.internal:9000",
        transport=fleet.transport,
        timeout=0.05,
    )
    with pytest.raises(RegistrationError) as failed:
        async with registration:
            pass
    assert "PeerRegistration(timeout=...)" in str(failed.value)
    assert "AttachClient(" not in str(failed.value)
