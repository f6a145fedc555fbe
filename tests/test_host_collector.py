"""The garbage collector while a host serves: tuned for serving, put back as found."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from coreagent_sdk import CallPeer, Peer, StaticDirectory
from coreagent_sdk.host import AgentHost, MultiAgentHost, Turn

ROOT = Path(__file__).resolve().parent.parent

DEFAULTS = (700, 10, 10)  # CPython's, on every version the project supports


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    # Whatever a test (or a failing serve) leaves, the next test meets the collector as this
    # one did: the thresholds, and a frozen heap (tests/leftovers.py freezes it per test).
    found = gc.get_threshold()
    yield
    gc.set_threshold(*found)


async def echo(turn: Turn) -> None:
    await turn.say(turn.prompt)


@asynccontextmanager
async def serving(host: AgentHost, **options: Any) -> AsyncIterator[str]:
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        host.serve(on_ready=ready.set_result, handle_signals=False, grace=0, **options)
    )
    try:
        yield await asyncio.wait_for(ready, 10)
    finally:
        host.stop()
        await asyncio.wait_for(task, 10)


async def test_a_served_host_raises_the_young_threshold_and_puts_it_back_when_it_stops() -> None:
    gc.set_threshold(*DEFAULTS)
    async with serving(AgentHost("alpha", behavior=echo)) as url:
        young, *rest = gc.get_threshold()
        assert young > DEFAULTS[0] and tuple(rest) == DEFAULTS[1:]
        async with httpx.AsyncClient() as client:  # it answers as always meanwhile
            assert (await client.get(url + "/sessions")).status_code == 200
    assert gc.get_threshold() == DEFAULTS


async def test_serve_with_tune_gc_false_leaves_the_collector_alone() -> None:
    gc.set_threshold(*DEFAULTS)
    frozen = gc.get_freeze_count()
    async with serving(AgentHost("alpha", behavior=echo), tune_gc=False):
        assert gc.get_threshold() == DEFAULTS
        assert gc.get_freeze_count() <= frozen  # not frozen again (a frozen object may be freed)


async def test_thresholds_a_user_set_are_theirs_while_serving_and_after() -> None:
    gc.set_threshold(1234, 5, 6)
    async with serving(AgentHost("alpha", behavior=echo)):
        assert gc.get_threshold() == (1234, 5, 6)
    assert gc.get_threshold() == (1234, 5, 6)


async def test_a_heap_frozen_before_serving_stays_frozen_after_it() -> None:
    # tests/leftovers.py froze this process's heap, as a pre-forking server freezes its own:
    # serving neither freezes it again nor unfreezes what it did not freeze.
    gc.set_threshold(*DEFAULTS)
    frozen = gc.get_freeze_count()
    assert frozen > 0
    async with serving(AgentHost("alpha", behavior=echo)):
        # Frozen again, it would hold the host and everything else made since, as well.
        assert gc.get_freeze_count() <= frozen  # (a frozen object may be freed meanwhile)
    assert 0 < gc.get_freeze_count() <= frozen


async def test_the_collector_is_put_back_only_when_the_last_of_two_servers_stops() -> None:
    gc.set_threshold(*DEFAULTS)
    first, second = AgentHost("alpha", behavior=echo), AgentHost("beta", behavior=echo)
    async with serving(first):
        async with serving(second):
            assert gc.get_threshold()[0] > DEFAULTS[0]
        assert gc.get_threshold()[0] > DEFAULTS[0]  # the first still serves
    assert gc.get_threshold() == DEFAULTS


async def test_a_multi_agent_host_tunes_the_collector_while_it_serves() -> None:
    gc.set_threshold(*DEFAULTS)
    host = MultiAgentHost()
    host.add("alpha", behavior=echo)
    ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    try:
        await asyncio.wait_for(ready, 10)
        assert gc.get_threshold()[0] > DEFAULTS[0]
    finally:
        host.stop()
        await asyncio.wait_for(task, 10)
    assert gc.get_threshold() == DEFAULTS


async def test_a_collector_turned_off_stays_off_and_untuned() -> None:
    gc.set_threshold(*DEFAULTS)
    gc.disable()
    try:
        async with serving(AgentHost("alpha", behavior=echo)):
            assert not gc.isenabled() and gc.get_threshold() == DEFAULTS
    finally:
        gc.enable()


# A process of its own, as `python -m coreagent_sdk.host` runs one: nothing frozen before.
FRESH_PROCESS = """
import asyncio, gc, json
from coreagent_sdk.host import AgentHost

async def echo(turn):
    await turn.say(turn.prompt)

async def main():
    host = AgentHost("alpha", behavior=echo)
    seen = {"before": [gc.get_threshold(), gc.get_freeze_count()]}
    def ready(url):
        seen["serving"] = [gc.get_threshold(), gc.get_freeze_count()]
        host.stop()
    await host.serve(on_ready=ready, handle_signals=False, grace=0)
    seen["after"] = [gc.get_threshold(), gc.get_freeze_count()]
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_a_fresh_process_serves_with_its_heap_frozen_and_unfreezes_it_after() -> None:
    out = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["before"] == [list(DEFAULTS), 0]
    (young, *rest), frozen = seen["serving"]
    assert young > DEFAULTS[0] and rest == list(DEFAULTS[1:])
    assert frozen > 1000  # the modules and the app, not a handful of objects
    assert seen["after"] == [list(DEFAULTS), 0]


def _spawn(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize(
    ("flags", "tuned"), [([], True), (["--no-tune-gc"], False)], ids=["default", "no-tune-gc"]
)
async def test_the_command_tunes_the_collector_unless_told_not_to(
    flags: list[str], tuned: bool
) -> None:
    argv = [sys.executable, "-m", "coreagent_sdk.host", "tests.host_agents:collector", *flags]
    proc = _spawn(argv)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
        url = json.loads(line)["url"]
        async with CallPeer(StaticDirectory([Peer("collector", url)]), timeout=15) as tool:
            (young, *rest), frozen = json.loads(
                (await tool.acall(peer="collector", prompt="gc?")).response
            )
        assert rest == list(DEFAULTS[1:])
        if tuned:
            assert young > DEFAULTS[0] and frozen > 1000
        else:
            assert (young, frozen) == (DEFAULTS[0], 0)
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.communicate, timeout=15)
