"""Under trio, every async entry point says coreagent-sdk needs asyncio, and how to pin it."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Awaitable, Callable

import pytest

from coreagent_sdk import AttachClient, HubDirectory, PeerRegistration
from coreagent_sdk.errors import AsyncLibraryError, RegistrationError
from simulator import Fleet, behaviors

trio = pytest.importorskip("trio")


def under_trio(make: Callable[[], Awaitable[object]]) -> BaseException:
    """What awaiting `make()` raises inside `trio.run` (it must raise)."""
    caught: list[BaseException] = []

    async def main() -> None:
        try:
            await make()
        except BaseException as exc:  # handed back to the test
            caught.append(exc)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trio.run(main)
        gc.collect()
    assert [str(w.message) for w in seen] == []  # no coroutine left never awaited
    assert caught, "the call succeeded under trio"
    return caught[0]


@pytest.fixture
def fleet() -> Fleet:
    made = Fleet()
    made.add_peer("p", behaviors.echo())
    return made


def test_a_delegation_under_trio_says_the_sdk_needs_asyncio_and_names_the_fix(fleet) -> None:
    error = under_trio(lambda: fleet.call_peer(timeout=5).acall(peer="p", prompt="x"))
    assert isinstance(error, AsyncLibraryError) and isinstance(error, RuntimeError)
    message = str(error)
    assert message.startswith("call_peer: coreagent-sdk needs asyncio, but this code runs under")
    assert "'trio'" in message and "def anyio_backend(): return 'asyncio'" in message


def test_a_directory_and_a_client_under_trio_say_so_too(fleet) -> None:
    error = under_trio(lambda: HubDirectory(fleet.hub_url, transport=fleet.transport).peers())
    assert isinstance(error, AsyncLibraryError) and str(error).startswith("directory: ")
    client = AttachClient(fleet.url("p"), transport=fleet.transport)
    error = under_trio(client.whoami)
    assert isinstance(error, AsyncLibraryError) and str(error).startswith("attach: ")


def test_a_registration_under_trio_fails_typed_with_the_reason(fleet) -> None:
    registration = PeerRegistration(
        fleet.hub_url, name="x", endpoint="http://127.0.0.1:9", transport=fleet.transport
    )
    error = under_trio(registration.__aenter__)
    assert isinstance(error, RegistrationError)
    assert "coreagent-sdk needs asyncio" in str(error)


def test_the_same_calls_on_asyncio_pass_the_check(fleet) -> None:
    import asyncio

    async def main() -> str:
        answer = await fleet.call_peer(timeout=5).acall(peer="p", prompt="fine")
        await fleet.aclose()
        return answer.response

    assert asyncio.run(main()) == "fine"
