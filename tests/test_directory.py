"""Directories: functions, static rosters, and the hub's registry asked on every call."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from coreagent_sdk import DirectoryFunc, HubDirectory, Peer, StaticDirectory, lookup_peer
from coreagent_sdk.errors import DirectoryError, TokenUnsetError
from simulator import FakeClock, Fleet, behaviors


async def test_a_sync_function_directory_is_called_each_time() -> None:
    calls = 0

    def roster():
        nonlocal calls
        calls += 1
        return [Peer("a", "http://a")]

    directory = DirectoryFunc(roster)
    assert await directory.peers() == (Peer("a", "http://a"),)
    await directory.peers()
    assert calls == 2


async def test_an_async_function_directory_is_awaited() -> None:
    async def roster():
        return [Peer("b", "http://b", {"k": "v"})]

    assert [p.labels for p in await DirectoryFunc(roster).peers()] == [{"k": "v"}]


async def test_a_function_returning_none_is_an_empty_roster() -> None:
    assert await DirectoryFunc(lambda: None).peers() == ()


async def test_a_static_directory_returns_its_roster() -> None:
    assert [p.name for p in await StaticDirectory([Peer("x", "http://x")]).peers()] == ["x"]


async def test_the_hub_directory_filters_by_labels_and_sees_changes_at_once() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.echo(), labels={"env": "prod"})
    fleet.add_peer("dev-1", behaviors.echo(), labels={"env": "dev"})
    prod = fleet.directory(labels={"env": "prod"})
    assert [(p.name, p.endpoint) for p in await prod.peers()] == [("prod-1", "http://prod-1.sim")]
    fleet.add_peer("prod-2", behaviors.echo(), labels={"env": "prod"})
    assert [p.name for p in await prod.peers()] == ["prod-1", "prod-2"]
    fleet.expire("prod-1")
    assert [p.name for p in await prod.peers()] == ["prod-2"]
    await prod.aclose()


async def test_a_hub_that_fails_is_a_directory_error_naming_the_hub() -> None:
    fleet = Fleet()
    fleet.faults("hub").error_status = 502
    with pytest.raises(DirectoryError, match=r"could not list peers on the hub http://hub\.sim"):
        await fleet.directory().peers()


async def test_a_protected_hub_reads_the_token_variable_per_call() -> None:
    fleet = Fleet(tokens={"t1": "alice"})
    environ: dict[str, str] = {}
    directory = fleet.directory(token_env="HUB_TOKEN", environ=environ)
    with pytest.raises(TokenUnsetError):
        await directory.peers()
    environ["HUB_TOKEN"] = "t1"
    assert await directory.peers() == ()


def test_token_and_token_env_together_are_refused() -> None:
    with pytest.raises(ValueError, match="either token= or token_env="):
        HubDirectory("http://hub.sim", token="x", token_env="Y")


def test_a_hub_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match=r"directory: URL 'hub\.sim' is refused"):
        HubDirectory("hub.sim")


# --- shared lookups -----------------------------------------------------------------------


class HeldHub(httpx.AsyncBaseTransport):
    """The fleet's transport, with every `GET /peers` answered by the hub and then held.

    Each held request waits (at most 2 s) for its own `release(i)`; `answered[i]` is set
    once the hub has produced the whole body, so a test knows what the hub said and when.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.answered: list[asyncio.Event] = []
        self._gates: list[asyncio.Event] = []

    @property
    def requests(self) -> int:
        return len(self.answered)

    def release(self, i: int) -> None:
        self._gates[i].set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/peers":
            return await self.inner.handle_async_request(request)
        answered, gate = asyncio.Event(), asyncio.Event()
        self.answered.append(answered)
        self._gates.append(gate)
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        answered.set()
        await asyncio.wait_for(gate.wait(), 2)  # bounded: a test that forgets fails, not hangs
        return httpx.Response(response.status_code, headers=response.headers, content=body)


def _names(peers: Any) -> list[str]:
    return [p.name for p in peers]


async def _until(event: asyncio.Event) -> None:
    await asyncio.wait_for(event.wait(), 5)


async def test_concurrent_lookups_share_one_request_and_one_decoded_answer() -> None:
    fleet = Fleet()
    fleet.add_peer("a", behaviors.echo())
    held = HeldHub(fleet.transport)
    directory = HubDirectory(fleet.hub_url, transport=held)
    first = asyncio.ensure_future(directory.peers())
    await _until_requests(held, 1)
    riders = [asyncio.ensure_future(directory.peers()) for _ in range(20)]
    by_name = asyncio.ensure_future(directory.lookup("a"))
    await asyncio.sleep(0.01)
    held.release(0)
    answers = await asyncio.gather(first, *riders)
    assert held.requests == 1
    assert all(a is answers[0] for a in answers), "each caller decoded the rows again"
    assert (await by_name) == Peer("a", "http://a.sim")
    await directory.aclose()


async def test_a_lookup_after_a_request_finished_sends_a_new_one_and_sees_later_changes() -> None:
    fleet = Fleet()
    fleet.add_peer("a", behaviors.echo())
    held = HeldHub(fleet.transport)
    directory = HubDirectory(fleet.hub_url, transport=held)
    early = asyncio.ensure_future(directory.peers())
    await _until_requests(held, 1)
    await _until(held.answered[0])  # the hub has answered [a]...
    fleet.add_peer("b", behaviors.echo())  # ...and the roster changes before the answer lands
    rider = asyncio.ensure_future(directory.peers())  # started while the request is in flight
    await asyncio.sleep(0)
    held.release(0)
    assert _names(await early) == ["a"]
    # It rode on a request in flight when it started: the documented bound (one round trip).
    assert _names(await rider) == ["a"]
    late = asyncio.ensure_future(directory.peers())  # started after that request finished
    await _until_requests(held, 2)
    held.release(1)
    assert _names(await late) == ["a", "b"]
    await directory.aclose()


async def _until_requests(held: HeldHub, n: int) -> None:
    for _ in range(1000):
        if held.requests >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"expected {n} GET /peers, saw {held.requests}")


async def test_a_lookup_started_as_the_shared_request_completes_does_not_ride_on_it() -> None:
    # The narrowest window: a caller that starts from the very callback that wakes the
    # first caller, after the request finished but before anyone has read its answer.
    fleet = Fleet()
    fleet.add_peer("a", behaviors.echo())
    held = HeldHub(fleet.transport)
    directory = HubDirectory(fleet.hub_url, transport=held)
    first = asyncio.ensure_future(directory.peers())
    await _until_requests(held, 1)
    await _until(held.answered[0])
    fleet.add_peer("b", behaviors.echo())
    late: list[asyncio.Future[Any]] = []
    first.add_done_callback(lambda _: late.append(asyncio.ensure_future(directory.peers())))
    held.release(0)
    assert _names(await first) == ["a"]
    await _until_requests(held, 2)
    held.release(1)
    assert _names(await late[0]) == ["a", "b"]
    assert held.requests == 2
    await directory.aclose()


async def test_sequential_lookups_each_ask_the_hub() -> None:
    fleet = Fleet()
    fleet.add_peer("a", behaviors.echo())
    directory = fleet.directory()
    assert _names(await directory.peers()) == ["a"]
    fleet.expire("a")
    assert await directory.lookup("a") is None
    fleet.add_peer("c", behaviors.echo())
    assert await directory.lookup("c") == Peer("c", "http://c.sim")
    await directory.aclose()


async def test_cancelling_one_caller_leaves_the_shared_request_to_the_others() -> None:
    fleet = Fleet()
    fleet.add_peer("a", behaviors.echo())
    held = HeldHub(fleet.transport)
    directory = HubDirectory(fleet.hub_url, transport=held)
    quitter = asyncio.ensure_future(directory.peers())
    stayer = asyncio.ensure_future(directory.peers())
    await _until_requests(held, 1)
    quitter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await quitter
    held.release(0)
    assert _names(await stayer) == ["a"]
    assert held.requests == 1
    await directory.aclose()


async def test_when_every_caller_gives_up_the_request_stops_and_the_next_caller_starts_anew() -> (
    None
):
    fleet = Fleet()
    fleet.add_peer("a", behaviors.echo())
    held = HeldHub(fleet.transport)
    directory = HubDirectory(fleet.hub_url, transport=held)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(directory.peers(), 0.05)
    assert held.requests == 1
    again = asyncio.ensure_future(directory.peers())
    await _until_requests(held, 2)
    held.release(1)
    assert _names(await again) == ["a"]
    await directory.aclose()


async def test_a_failed_shared_request_fails_every_caller_that_rode_on_it() -> None:
    fleet = Fleet()
    fleet.add_peer("a", behaviors.echo())
    fleet.faults("hub").error_status = 503
    held = HeldHub(fleet.transport)
    directory = HubDirectory(fleet.hub_url, transport=held)
    callers = [asyncio.ensure_future(directory.peers()) for _ in range(3)]
    await _until_requests(held, 1)
    held.release(0)
    outcomes = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(o, DirectoryError) and "503" in str(o) for o in outcomes), outcomes
    assert held.requests == 1
    await directory.aclose()


async def test_callers_with_different_tokens_never_share_an_answer() -> None:
    fleet = Fleet(tokens={"t-alice": "alice", "t-bob": "bob"})
    fleet.add_peer("a", behaviors.echo(), token="t-alice")
    held = HeldHub(fleet.transport)
    environ = {"HUB_TOKEN": "t-alice"}
    directory = HubDirectory(fleet.hub_url, transport=held, token_env="HUB_TOKEN", environ=environ)
    as_alice = asyncio.ensure_future(directory.peers())
    await _until_requests(held, 1)
    environ["HUB_TOKEN"] = "t-bob"
    as_bob = asyncio.ensure_future(directory.peers())
    await _until_requests(held, 2)
    held.release(0)
    held.release(1)
    assert _names(await as_alice) == _names(await as_bob) == ["a"]
    assert held.requests == 2
    await directory.aclose()


async def test_a_function_directory_of_none_is_an_empty_roster() -> None:
    directory = DirectoryFunc(None)
    assert await directory.peers() == ()
    assert await directory.lookup("anyone") is None


def test_a_function_directory_of_something_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="for a fixed list use StaticDirectory"):
        DirectoryFunc([Peer("a", "http://a")])  # type: ignore[arg-type]


async def test_the_built_in_directories_look_a_name_up() -> None:
    static = StaticDirectory(
        [Peer("a", "http://a1"), Peer("a", "http://a2"), Peer("b", "http://b")]
    )
    assert await static.lookup("a") == Peer("a", "http://a1")  # the first, as a scan finds
    assert await static.lookup("c") is None
    func = DirectoryFunc(lambda: [Peer("b", "http://b")])
    assert await func.lookup("b") == Peer("b", "http://b")
    assert await lookup_peer(func, "x") is None


async def test_lookup_peer_falls_back_to_the_roster_for_a_directory_without_lookup() -> None:
    class OnlyPeers:
        async def peers(self) -> list[Peer]:
            return [Peer("a", "http://a"), Peer("b", "http://b")]

    assert await lookup_peer(OnlyPeers(), "b") == Peer("b", "http://b")
    assert await lookup_peer(OnlyPeers(), "c") is None


def test_a_static_directory_of_ten_thousand_peers_shows_twenty_names_and_counts_the_rest() -> None:
    directory = StaticDirectory([Peer(f"p{i:05d}", "http://p.sim") for i in range(10_000)])
    shown = repr(directory)
    assert shown.startswith('StaticDirectory(["p00000", "p00001", ')
    assert shown.endswith('"p00019", +9980 more])')
    assert len(shown) < 300
    assert repr(StaticDirectory([Peer(f"p{i}", "http://p.sim") for i in range(20)])).endswith(
        '"p19"])'
    )


# --- max_age: a roster at most that old, refreshed in the background -----------------------


class CountedHub(httpx.AsyncBaseTransport):
    """The fleet's transport, counting each `GET /peers` it passes on."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/peers":
            self.requests += 1
        return await self.inner.handle_async_request(request)


def _aged(max_age: float = 1.0) -> tuple[FakeClock, Fleet, CountedHub, HubDirectory]:
    clock = FakeClock()
    fleet = Fleet(clock=clock)
    fleet.add_peer("a", behaviors.echo())
    hub = CountedHub(fleet.transport)
    directory = HubDirectory(fleet.hub_url, transport=hub, max_age=max_age, clock=clock)
    return clock, fleet, hub, directory


async def _refreshed(directory: HubDirectory) -> None:
    for _ in range(1000):  # bounded: loop turns, not real time
        if not directory._flights:
            return
        await asyncio.sleep(0)
    raise AssertionError("the background refresh did not finish")


async def test_with_max_age_a_young_roster_answers_without_asking_the_hub() -> None:
    clock, fleet, hub, directory = _aged(max_age=1.0)
    assert _names(await directory.peers()) == ["a"]
    fleet.add_peer("b", behaviors.echo())
    clock.advance(0.49)  # under half the age: served as is, no refresh
    assert _names(await directory.peers()) == ["a"]
    assert await directory.lookup("b") is None
    assert hub.requests == 1
    await directory.aclose()


async def test_with_max_age_a_roster_past_half_its_age_is_served_and_refreshed_behind() -> None:
    clock, fleet, hub, directory = _aged(max_age=1.0)
    await directory.peers()
    fleet.add_peer("b", behaviors.echo())
    clock.advance(0.5)  # half the age, exactly: still served, and a refresh starts
    assert _names(await directory.peers()) == ["a"]
    assert _names(await directory.peers()) == ["a"]  # the refresh is shared, not repeated
    await _refreshed(directory)
    assert hub.requests == 2
    assert _names(await directory.peers()) == ["a", "b"]
    assert hub.requests == 2
    await directory.aclose()


async def test_with_max_age_a_roster_exactly_that_old_is_used_and_an_older_one_never() -> None:
    clock, fleet, hub, directory = _aged(max_age=1.0)
    await directory.peers()
    fleet.expire("a")
    clock.advance(1.0)  # exactly max_age old: still answered from it (a refresh starts)
    assert _names(await directory.peers()) == ["a"]
    await _refreshed(directory)
    assert hub.requests == 2
    fleet.add_peer("b", behaviors.echo())
    clock.advance(1.001)  # just older than max_age: the caller waits for a new roster
    assert _names(await directory.peers()) == ["b"]
    assert hub.requests == 3
    await directory.aclose()


async def test_the_default_asks_the_hub_on_every_lookup_however_little_time_passed() -> None:
    clock = FakeClock()
    fleet = Fleet(clock=clock)
    fleet.add_peer("a", behaviors.echo())
    hub = CountedHub(fleet.transport)
    directory = HubDirectory(fleet.hub_url, transport=hub, clock=clock)
    assert directory.max_age is None
    await directory.peers()
    fleet.expire("a")
    assert await directory.lookup("a") is None
    assert hub.requests == 2
    await directory.aclose()


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "1"])
def test_a_max_age_that_is_not_a_positive_number_of_seconds_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"directory: max_age must be a positive number"):
        HubDirectory("http://hub.test", max_age=bad)
