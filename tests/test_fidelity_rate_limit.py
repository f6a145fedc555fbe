"""The session rate limit: the daemon's 429 on `POST /sessions`, the SDK's typed error,
and CallPeer waiting out a `Retry-After` only when asked and only within its deadline.

Pins core-agent `pkg/attach/rate_limit.go` (`costRateLimiter.Allow`, `allowCost`)
and `pkg/attach/handlers.go` `register` (the limit runs before the 501).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from coreagent_sdk import AttachClient, FakeClock
from coreagent_sdk._http._rate_limit import retry_after_seconds
from coreagent_sdk.errors import PeerRateLimitedError, RateLimitedError
from simulator import Fleet, SessionRateLimit, behaviors

from .conftest import ReachFactory

JSON = {"Content-Type": "application/json"}
ALICE, BOB = "tok-alice", "tok-bob"


def bearer(token: str) -> dict[str, str]:
    return {**JSON, "Authorization": f"Bearer {token}"}


async def statuses(http: httpx.AsyncClient, url: str, n: int, **kw: object) -> list[int]:
    return [(await http.post(f"{url}/sessions", **kw)).status_code for _ in range(n)]  # type: ignore[arg-type]


async def test_the_daemons_defaults_allow_a_burst_of_5_then_10_a_minute(
    make_reach: ReachFactory,
) -> None:
    clock = FakeClock()
    fleet = Fleet(clock=clock, session_rate_limit=SessionRateLimit())
    fleet.add_peer("prod-1")
    reach = await make_reach(fleet)
    base = reach.url("prod-1")
    async with httpx.AsyncClient(transport=reach.transport) as http:
        assert await statuses(http, base, 5, headers=JSON) == [201] * 5
        refused = await http.post(f"{base}/sessions", headers=JSON)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "6"  # one token at 10 a minute
        assert refused.json() == {"error": "rate limited", "retry_after_seconds": 6}
        clock.advance(6)
        assert await statuses(http, base, 2, headers=JSON) == [201, 429]
        clock.advance(3)  # half a token: still refused, and told to wait the other half
        half = await http.post(f"{base}/sessions", headers=JSON)
        assert half.status_code == 429 and half.headers["retry-after"] == "3"
        clock.advance(60)  # a minute refills the burst, never more
        assert await statuses(http, base, 6, headers=JSON) == [201] * 5 + [429]


async def test_each_identity_has_its_own_bucket_and_anonymous_callers_share_one() -> None:
    clock = FakeClock()
    fleet = Fleet(
        clock=clock,
        tokens={ALICE: "alice", BOB: "bob"},
        session_rate_limit=SessionRateLimit(burst=2),
    )
    fleet.add_peer("locked", token=ALICE)
    open_fleet = Fleet(clock=clock, session_rate_limit=SessionRateLimit(burst=2))
    open_fleet.add_peer("open")
    transport = httpx.AsyncClient(transport=fleet.transport)
    async with transport as http, httpx.AsyncClient(transport=open_fleet.transport) as anon:
        locked = fleet.url("locked")
        assert await statuses(http, locked, 3, headers=bearer(ALICE)) == [201, 201, 429]
        assert await statuses(http, locked, 3, headers=bearer(BOB)) == [201, 201, 429]
        # Two anonymous clients, one bucket between them.
        assert await statuses(anon, open_fleet.url("open"), 2, headers=JSON) == [201, 201]
        async with httpx.AsyncClient(transport=open_fleet.transport) as other:
            assert await statuses(other, open_fleet.url("open"), 1, headers=JSON) == [429]
    await fleet.aclose()
    await open_fleet.aclose()


async def test_the_limit_is_checked_before_the_multi_session_501() -> None:
    fleet = Fleet(clock=FakeClock(), session_rate_limit=SessionRateLimit(burst=1))
    fleet.add_peer("solo", multi_session=False)
    async with httpx.AsyncClient(transport=fleet.transport) as http:
        assert await statuses(http, fleet.url("solo"), 2, headers=JSON) == [501, 429]
    await fleet.aclose()


async def test_the_limit_is_off_by_default_and_set_per_peer() -> None:
    fleet = Fleet(clock=FakeClock())
    fleet.add_peer("free")
    fleet.add_peer("strict", session_rate_limit=SessionRateLimit(burst=1, per_minute=1))
    limited = Fleet(clock=FakeClock(), session_rate_limit=SessionRateLimit(burst=1))
    limited.add_peer("exempt", session_rate_limit=None)
    async with httpx.AsyncClient(transport=fleet.transport) as http:
        assert await statuses(http, fleet.url("free"), 20, headers=JSON) == [201] * 20
        assert await statuses(http, fleet.url("strict"), 2, headers=JSON) == [201, 429]
    async with httpx.AsyncClient(transport=limited.transport) as http:
        assert await statuses(http, limited.url("exempt"), 8, headers=JSON) == [201] * 8
    await fleet.aclose()
    await limited.aclose()


def test_a_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"SessionRateLimit\.burst must be a positive number"):
        SessionRateLimit(burst=0)
    with pytest.raises(ValueError, match="per_minute"):
        SessionRateLimit(per_minute=float("nan"))


# --- the SDK ----------------------------------------------------------------------------


async def test_attach_client_raises_a_typed_429_with_retry_after() -> None:
    fleet = Fleet(clock=FakeClock(), session_rate_limit=SessionRateLimit(burst=1))
    fleet.add_peer("prod-1")
    async with AttachClient(fleet.url("prod-1"), transport=fleet.transport) as client:
        await client.new_session()
        with pytest.raises(RateLimitedError, match="429") as info:
            await client.new_session()
    assert info.value.status_code == 429 and info.value.retry_after == 6
    await fleet.aclose()


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        (" 0 ", 0.0),
        ("-1", None),
        ("1.5", None),
        ("abc", None),
        ("", None),
        (None, None),
        ("9" * 40, None),
        ("\u0661\u0662", None),  # Arabic-Indic digits are digits to Python, not to HTTP
        ("Thu, 01 Jan 2026 00:00:30 GMT", 30.0),
        ("Thu, 01 Jan 2026 00:00:00", None),
        ("Wed, 31 Dec 2025 23:00:00 GMT", 0.0),  # in the past: no wait
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(header, seconds) -> None:
    assert retry_after_seconds(header, now=1_767_225_600.0) == seconds


async def test_call_peer_surfaces_a_429_typed_without_waiting() -> None:
    clock = FakeClock()
    fleet = Fleet(clock=clock, session_rate_limit=SessionRateLimit(burst=1))
    fleet.add_peer("prod-1", behaviors.reply("ok"))
    tool = fleet.call_peer(timeout=30, clock=clock)
    assert (await tool.acall(peer="prod-1", prompt="one")).response == "ok"
    with pytest.raises(PeerRateLimitedError, match=r"429, retry after 6 s.*wait_on_rate_limit"):
        await tool.acall(peer="prod-1", prompt="two")
    await fleet.aclose()


async def test_call_peer_can_wait_out_a_retry_after_that_fits_in_its_deadline() -> None:
    clock = FakeClock()
    fleet = Fleet(clock=clock, session_rate_limit=SessionRateLimit(burst=1))
    fleet.add_peer("prod-1", behaviors.reply("ok"))
    tool = fleet.call_peer(timeout=30, clock=clock, wait_on_rate_limit=True)
    await tool.acall(peer="prod-1", prompt="one")
    asleep = clock.sleepers  # the peer's idle sweep, now that it holds a session
    second = asyncio.create_task(tool.acall(peer="prod-1", prompt="two"))
    await clock.until_sleeping(asleep + 1)
    assert not second.done()
    clock.advance(6)
    assert (await asyncio.wait_for(second, 5)).response == "ok"
    await fleet.aclose()


async def test_call_peer_does_not_wait_for_a_retry_after_past_its_deadline() -> None:
    clock = FakeClock()
    fleet = Fleet(clock=clock, session_rate_limit=SessionRateLimit(burst=1))
    fleet.add_peer("prod-1", behaviors.reply("ok"))
    tool = fleet.call_peer(timeout=5, clock=clock, wait_on_rate_limit=True)
    await tool.acall(peer="prod-1", prompt="one")
    asleep = clock.sleepers  # the peer's idle sweep, now that it holds a session
    with pytest.raises(PeerRateLimitedError, match="pass the deadline") as info:
        await asyncio.wait_for(tool.acall(peer="prod-1", prompt="two"), 5)
    assert info.value.retry_after == 6 and info.value.status_code == 429
    assert clock.sleepers == asleep  # the call did not wait
    await fleet.aclose()


@pytest.mark.parametrize("spent", [0.0, 1.0])
async def test_a_retry_after_is_measured_against_what_is_left_of_the_deadline(
    spent: float,
) -> None:
    # 6.5 s in all, a Retry-After of 6 s: it fits a fresh deadline, but not once a slow
    # gate (any step before the 429) has spent a second of it. Real seconds are spent,
    # since the deadline is wall-clock; the wait itself is on the FakeClock.
    clock = FakeClock()
    fleet = Fleet(clock=clock, session_rate_limit=SessionRateLimit(burst=1))
    fleet.add_peer("prod-1", behaviors.reply("ok"))

    async def slow_gate(tool: str, peer: str) -> None:
        await asyncio.sleep(spent)

    tool = fleet.call_peer(timeout=6.5, clock=clock, wait_on_rate_limit=True, gate=slow_gate)
    await fleet.call_peer(clock=clock).acall(peer="prod-1", prompt="spend the burst")
    asleep = clock.sleepers  # the peer's idle sweep, now that it holds a session
    second = asyncio.create_task(tool.acall(peer="prod-1", prompt="two"))
    if spent:
        with pytest.raises(PeerRateLimitedError, match="pass the deadline") as info:
            await asyncio.wait_for(second, 5)
        assert info.value.retry_after == 6 and clock.sleepers == asleep
    else:
        await asyncio.wait_for(clock.until_sleeping(asleep + 1), 5)
        clock.advance(6)
        assert (await asyncio.wait_for(second, 5)).response == "ok"
    await fleet.aclose()
