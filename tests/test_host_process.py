"""How a host process runs its event loop: uvloop's where installed, asyncio's otherwise."""

from __future__ import annotations

import asyncio
import sys

import pytest

from coreagent_sdk.host import _process


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_a_host_process_runs_on_uvloop_where_it_is_installed() -> None:
    pytest.importorskip("uvloop")
    assert _process.run(loop_module()).startswith("uvloop")


def test_without_uvloop_a_host_process_runs_on_asyncios_own_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert _process.run(loop_module()).startswith("asyncio")


def test_the_command_serves_on_that_loop() -> None:
    from coreagent_sdk.host import __main__ as command

    assert command.run is _process.run
