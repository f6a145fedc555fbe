"""The shared HTTP plumbing: what every client this package makes has in common."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest

from coreagent_sdk import CallPeer, HubDirectory
from simulator import Fleet, behaviors


async def test_sync_calls_over_the_network_build_the_ssl_context_at_most_once_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Loading the CA bundle costs ~40-300 ms of CPU; each sync call makes new httpx
    # clients (a loop of its own), so building a context per client made every sync
    # call to a loopback peer pay it twice (tool and directory).
    made: list[ssl.SSLContext] = []
    real = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        context = real(*args, **kwargs)
        made.append(context)
        return context

    monkeypatch.setattr(ssl, "create_default_context", counting)
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    async with await fleet.serve() as served:
        tool = CallPeer(HubDirectory(served.urls["hub"]), timeout=10)
        for _ in range(3):
            # A thread of its own: the sync call must not block the loop serving the fleet.
            result = await asyncio.to_thread(tool, peer="echo", prompt="ping")
            assert "ping" in result.response
        await tool.aclose()
    await fleet.aclose()
    assert len(made) <= 1, f"{len(made)} SSL contexts were built for 3 sync calls"
