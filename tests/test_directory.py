"""Directories: functions, static rosters, and the hub's registry asked on every call."""

from __future__ import annotations

import pytest

from coreagent_sdk import DirectoryFunc, HubDirectory, Peer, StaticDirectory
from coreagent_sdk.errors import DirectoryError, TokenUnsetError
from simulator import Fleet, behaviors


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
