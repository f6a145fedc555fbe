"""A model-driven agent served by the host's command on loopback, called from this process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coreagent_sdk import CallPeer, HubDirectory
from coreagent_sdk.host import AgentHost, Turn
from tests.processes import reap, served_hub

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
async def hub() -> AsyncIterator[str]:
    """A hub served on loopback in this process; yields its URL."""
    async with served_hub() as url:
        yield url


async def storage(turn: Turn) -> None:
    await turn.say(f"disks 80% full (asked: {turn.prompt})")


def spawn(hub: str) -> subprocess.Popen[str]:
    """The router, served by the host's command on a free loopback port, joining `hub`."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coreagent_sdk.host",
            "tests.host_agents:model_router",
            "--port",
            "0",
            "--name",
            "router",
            "--register-to",
            hub,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_a_scripted_model_agent_served_by_the_command_delegates_over_loopback(
    hub: str,
) -> None:
    assert hub.startswith("http://127.0.0.1:")
    specialist = AgentHost("storage", behavior=storage, register_to=hub)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(specialist.serve(on_ready=ready.set_result, handle_signals=False))
    await asyncio.wait_for(ready, 10)
    proc = spawn(hub)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        assert json.loads(line)["url"].startswith("http://127.0.0.1:")
        directory = HubDirectory(hub)
        async with CallPeer(directory, timeout=20) as tool:
            disk = await tool.acall(peer="router", prompt="is the disk full?")
            other = await tool.acall(peer="router", prompt="and the weather?")
        await directory.aclose()
        assert disk.response == (
            "storage: disks 80% full (asked: How full are the disks? is the disk full?)"
        )
        assert other.response == "I route disk questions only."
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(asyncio.to_thread(proc.wait), 10)
        finally:
            reap(proc)
        specialist.stop()
        await asyncio.wait_for(serving, 10)
