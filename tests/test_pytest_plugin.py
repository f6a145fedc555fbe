"""The `fleet` fixture users get by installing the package (pytest11 entry point)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import PLAIN_PYTEST

USER_TESTS = """
from simulator import behaviors

def test_my_agent_delegates(fleet):
    fleet.add_peer("prod-1", behaviors.reply("3 nodes ready"))
    tool = fleet.call_peer(timeout=5)
    assert tool(peer="prod-1", prompt="status?").response == "3 nodes ready"

def test_each_test_gets_a_fresh_fleet(fleet):
    assert [p.name for p in fleet.registry.peers()] == []
"""


def test_a_users_test_gets_a_simulated_fleet_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess(*PLAIN_PYTEST)
    result.assert_outcomes(passed=2)


def test_the_plugin_does_not_import_the_simulator_until_the_fixture_is_used() -> None:
    code = (
        "import sys, coreagent_sdk.pytest_plugin; "
        "print('simulator' in sys.modules, 'starlette' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.split() == ["False", "False"]


THEIR_TESTS = """
import simulator
from coreagent_sdk.simulator import behaviors


def test_without_the_fixture():
    assert simulator.THEIRS


def test_with_the_fixture(fleet):
    fleet.add_peer("p", behaviors.reply("ours"))
    assert fleet.call_peer(timeout=5)(peer="p", prompt="x").response == "ours"
    assert type(fleet).__module__.startswith("coreagent_sdk.simulator.")
    assert simulator.THEIRS
"""


def test_a_project_with_its_own_simulator_package_still_gets_the_fleet_fixture(
    pytester: pytest.Pytester,
) -> None:
    pytester.mkpydir("simulator").joinpath("__init__.py").write_text("THEIRS = True\n")
    pytester.makepyfile(test_theirs=THEIR_TESTS)
    result = pytester.runpytest_subprocess(*PLAIN_PYTEST)
    result.assert_outcomes(passed=2)


CONFIGURED_TESTS = """
import pytest
from coreagent_sdk import FakeClock
from coreagent_sdk.errors import PeerRateLimitedError
from simulator import SessionRateLimit, behaviors

pytestmark = pytest.mark.fleet(tokens={"t-1": "alice"}, clock=FakeClock)


@pytest.mark.fleet(session_rate_limit=SessionRateLimit(per_minute=1, burst=1))
def test_marker_options_reach_the_fleet_and_the_closest_marker_wins(fleet):
    assert isinstance(fleet.clock, FakeClock) and fleet.tokens["t-1"].name == "alice"
    fleet.add_peer("p", behaviors.echo())
    tool = fleet.call_peer(timeout=5, token_env="T", environ={"T": "t-1"})
    assert tool(peer="p", prompt="one").response == "one"
    with pytest.raises(PeerRateLimitedError):
        tool(peer="p", prompt="two")


@pytest.mark.fleet(clock=FakeClock)
def test_a_clock_class_gives_each_test_a_fresh_clock_first(fleet):
    assert fleet.clock.now() == FakeClock().now()
    fleet.clock.advance(3600)


@pytest.mark.fleet(clock=FakeClock)
def test_a_clock_class_gives_each_test_a_fresh_clock_second(fleet):
    assert fleet.clock.now() == FakeClock().now()
    fleet.clock.advance(3600)


def test_the_factory_makes_fleets_with_any_options(fleet_factory):
    one, two = fleet_factory(), fleet_factory(domain="other", clock=FakeClock())
    assert one is not two and two.hub_url == "http://hub.other"
    assert isinstance(two.clock, FakeClock) and one.tokens is None


def test_the_factory_names_an_option_fleet_does_not_take(fleet_factory):
    fleet_factory(clok=FakeClock())


@pytest.mark.fleet(FakeClock())
def test_a_positional_marker_argument_is_refused(fleet):
    pass
"""


def test_the_fleet_fixture_is_configured_by_marker_and_by_factory(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_configured=CONFIGURED_TESTS)
    result = pytester.runpytest_subprocess(*PLAIN_PYTEST, "--strict-markers")
    result.assert_outcomes(passed=4, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.fleet takes keyword options only*",
            "*Fleet() has no option 'clok'; its options are: tokens, clock, *",
        ]
    )


def test_the_plugin_is_registered_from_the_sdk_not_from_the_simulator() -> None:
    from importlib.metadata import entry_points

    (plugin,) = [e for e in entry_points(group="pytest11") if e.name == "coreagent_simulator"]
    assert plugin.value == "coreagent_sdk.pytest_plugin"


# A user's project with pytest-asyncio (and hypothesis, as in [dev]) under -W error: a test
# that calls a served fleet with an inline tool, then one that serves the fixture's fleet and
# forgets to close it, then a plain sync test, which used to fail for the sockets left open.
SERVING_TESTS = """
from simulator import behaviors


async def test_serve_and_call_over_sockets_inline(fleet):
    fleet.add_peer("p", behaviors.echo())
    async with await fleet.serve() as served:
        assert (await served.call_peer(timeout=5).acall(peer="p", prompt="x")).response == "x"
    await fleet.aclose()


async def test_serve_and_forget_to_close(fleet):
    fleet.add_peer("p", behaviors.echo())
    served = await fleet.serve()
    assert served.urls["p"].startswith("http://127.0.0.1:")


async def test_serve_call_over_sockets_and_forget_to_close(fleet):
    fleet.add_peer("p", behaviors.echo())
    served = await fleet.serve()
    assert (await served.call_peer(timeout=5).acall(peer="p", prompt="y")).response == "y"


def test_next_one_sync(fleet):
    fleet.add_peer("p", behaviors.reply("ok"))
    assert fleet.call_peer()(peer="p", prompt="s").response == "ok"
"""


def test_a_fixture_fleet_served_and_left_open_is_closed_at_teardown(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_serving=SERVING_TESTS)
    result = pytester.runpytest_subprocess(*PLAIN_PYTEST, "-W", "error")
    output = result.stdout.str() + result.stderr.str()
    assert "unclosed" not in output
    assert "SystemError" not in output
    result.assert_outcomes(passed=4)
    assert result.ret == 0


ANYIO_TESTS = """
import pytest
from simulator import behaviors


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


@pytest.mark.anyio
async def test_delegates(fleet):
    fleet.add_peer("p", behaviors.echo())
    assert (await fleet.call_peer(timeout=5).acall(peer="p", prompt="x")).response == "x"
"""


def test_under_anyios_trio_backend_a_call_says_the_sdk_needs_asyncio_with_the_fix(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("trio")
    pytester.makepyfile(test_anyio=ANYIO_TESTS)
    result = pytester.runpytest_subprocess(*PLAIN_PYTEST, "-p", "no:asyncio")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_delegates?trio?*",
            "*AsyncLibraryError: call_peer: coreagent-sdk needs asyncio, but this code runs under"
            " 'trio'*def anyio_backend(): return 'asyncio'*",
        ]
    )
    assert "no running event loop" not in result.stdout.str()


# The testing guide's recipe: one fleet for a module, reset before each test. The tests
# break it in a fixed order, and the last one finds it whole.
SHARED_TESTS = """
import pytest
from coreagent_sdk import FakeClock
from coreagent_sdk.errors import PeerRequestError
from simulator import Fleet, behaviors

built = []


@pytest.fixture(scope="module")
def shared_fleet():
    fleet = Fleet(clock=FakeClock())
    fleet.add_peer("a", behaviors.reply("a ok"))
    fleet.add_peer("b", behaviors.reply("b ok"))
    built.append(fleet)
    yield fleet
    fleet.close()


@pytest.fixture
def fleet(shared_fleet):
    shared_fleet.reset()
    return shared_fleet


def test_breaks_a(fleet):
    fleet.faults("a").error_status = 503
    with pytest.raises(PeerRequestError):
        fleet.call_peer(timeout=5)(peer="a", prompt="x")


def test_expires_b(fleet):
    assert fleet.expire("b") is True


def test_finds_the_fleet_whole(fleet):
    tool = fleet.call_peer(timeout=5)
    assert [tool(peer=p, prompt="x").response for p in ("a", "b")] == ["a ok", "b ok"]
    assert len(built) == 1
"""


def test_the_guides_module_scoped_fleet_is_whole_again_in_every_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_shared=SHARED_TESTS)
    result = pytester.runpytest_subprocess(*PLAIN_PYTEST)
    result.assert_outcomes(passed=3)


# A buggy helper inside a behaviour: without the option the "escalates" test passes for the
# wrong reason; with it, the test errors at teardown with the helper's traceback.
BUGGY_BEHAVIOUR_TESTS = """
import pytest
from coreagent_sdk.errors import PeerTurnError


def parse_load(text):
    return float(text.split("=")[1]) / 0  # the bug


async def escalates_on_high_load(turn):
    if parse_load("load=0.95") > 0.9:
        await turn.error("rate_limited", "too busy")
    await turn.say("fine")


def test_quietly_passes(fleet):
    fleet.add_peer("p", escalates_on_high_load)
    with pytest.raises(PeerTurnError):
        fleet.call_peer(timeout=5)(peer="p", prompt="load?")


@pytest.mark.fleet(raise_behavior_errors=True)
def test_caught(fleet):
    fleet.add_peer("p", escalates_on_high_load)
    with pytest.raises(PeerTurnError):
        fleet.call_peer(timeout=5)(peer="p", prompt="load?")
"""


def test_raise_behavior_errors_turns_a_quiet_pass_into_an_error_with_the_traceback(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_buggy=BUGGY_BEHAVIOUR_TESTS)
    result = pytester.runpytest_subprocess(*PLAIN_PYTEST)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_caught*",
            "*async def escalates_on_high_load(turn):*",
            "*def parse_load(text):*",
            "E*ZeroDivisionError: float division by zero",
        ]
    )
    assert "teardown of test_quietly_passes" not in result.stdout.str()
