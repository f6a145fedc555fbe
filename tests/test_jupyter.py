"""`run_sync`: a sync call inside a running loop leaves no trace on the process."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from coreagent_sdk import run_sync

# The sequence from the bug report, in a project of the user's own: an async test makes a
# sync call with the README's fixture example, a later test serves a fleet. Run under
# -W error with the hypothesis plugin loaded, as the [dev] environment does.
SEQUENCE = """
import asyncio

from simulator import Fleet, behaviors


def test_the_hypothesis_plugin_is_loaded(request):
    assert request.config.pluginmanager.hasplugin("hypothesispytest")


async def test_an_async_test_makes_a_sync_call(fleet):
    fleet.add_peer("prod-1", behaviors.reply("3 nodes ready"))
    assert fleet.call_peer()(peer="prod-1", prompt="status?").response == "3 nodes ready"


def test_asyncio_is_not_patched_for_the_rest_of_the_process():
    assert asyncio.run.__module__ == "asyncio.runners"
    assert asyncio.Task.__module__ == "_asyncio"
    assert not hasattr(asyncio, "_nest_patched")
    loop = asyncio.new_event_loop()
    loop.close()
    assert not getattr(type(loop), "_nest_patched", False)


async def test_then_a_test_serves_a_fleet():
    fleet = Fleet()
    fleet.add_peer("p", behaviors.echo())
    async with await fleet.serve() as served:
        async with served.call_peer(timeout=5) as tool:
            assert (await tool.acall(peer="p", prompt="x")).response == "x"
    await fleet.aclose()


async def test_and_another_sync_call_after_serving(fleet):
    fleet.add_peer("prod-2", behaviors.echo())
    assert fleet.call_peer()(peer="prod-2", prompt="again").response == "again"
"""

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


@pytest.mark.slow  # a pytest run in a subprocess, five tests deep
def test_a_sync_call_in_an_async_test_leaves_no_trace_on_later_tests(
    pytester: pytest.Pytester,
) -> None:
    # Before the fix this failed on every run (nest-asyncio's patches are deterministic).
    pytester.makeini(INI)
    pytester.makepyfile(test_sequence=SEQUENCE)
    # Every plugin the [dev] environment loads, hypothesis's above all: not PLAIN_PYTEST.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error")
    assert "Unraisable" not in result.stdout.str() + result.stderr.str()
    assert "SystemError" not in result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=5)


async def coroutine_that_reads(var: contextvars.ContextVar[str]) -> tuple[str, bool]:
    return var.get(), threading.current_thread() is threading.main_thread()


def test_outside_a_loop_it_runs_the_coroutine_here() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    var.set("outside")
    assert run_sync(coroutine_that_reads(var)) == ("outside", True)


async def test_inside_a_loop_it_runs_on_a_loop_of_its_own_with_the_callers_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    var.set("inside")
    mine = asyncio.get_running_loop()

    async def elsewhere() -> bool:
        return asyncio.get_running_loop() is not mine

    assert run_sync(coroutine_that_reads(var)) == ("inside", False)
    assert run_sync(elsewhere()) is True


async def test_an_error_inside_a_loop_is_raised_as_itself_without_chained_noise() -> None:
    async def fails() -> None:
        raise LookupError("the real problem")

    with pytest.raises(LookupError, match="the real problem") as info:
        run_sync(fails())
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_an_error_outside_a_loop_carries_no_no_running_loop_context() -> None:
    async def fails() -> None:
        raise LookupError("the real problem")

    with pytest.raises(LookupError) as info:
        run_sync(fails())
    assert info.value.__context__ is None


def test_enable_nested_sync_outside_a_running_loop_is_refused_and_patches_nothing() -> None:
    import sys

    from coreagent_sdk.jupyter import enable_nested_sync

    with pytest.raises(RuntimeError, match=r"needs a running event loop"):
        enable_nested_sync()
    assert not hasattr(asyncio, "_nest_patched")
    assert not [m for m in sys.modules if m.startswith("nest_asyncio")]


def test_no_import_and_no_sync_call_loads_nest_asyncio() -> None:
    import subprocess
    import sys

    probe = (
        "import asyncio, sys\n"
        "import coreagent_sdk, coreagent_sdk.jupyter, coreagent_sdk.widgets, simulator\n"
        "from simulator import Fleet, behaviors\n"
        "fleet = Fleet()\n"
        "fleet.add_peer('p', behaviors.echo())\n"
        "async def main():\n"
        "    return fleet.call_peer(timeout=5)(peer='p', prompt='hi').response\n"  # in a loop
        "print(asyncio.run(main()))\n"
        "print(sorted(m for m in sys.modules if m.startswith('nest_asyncio')))\n"
        "print(hasattr(asyncio, '_nest_patched'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == ["hi", "[]", "False"]
