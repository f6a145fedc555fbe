"""A served host writes no access log and leaves the process's logging as its user set it.

uvicorn's defaults configure its own loggers for the whole process (a dictConfig, and the
level `log_level` names) and log every request's URL, query string included, at INFO: a
user who turned logging up to INFO or DEBUG would have had every URL a caller sent written
down. The host's servers log no access line, whatever level is set, and touch no logger.
"""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from coreagent_sdk.host import AgentHost, MultiAgentHost

_UVICORN = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


def _state() -> dict[str, tuple[object, ...]]:
    loggers = (logging.getLogger(n) for n in _UVICORN)
    return {lg.name: (lg.level, tuple(lg.handlers), lg.propagate, lg.disabled) for lg in loggers}


async def _get_twice(url: str) -> None:
    async with httpx.AsyncClient(timeout=5) as client:
        for path in ("/sessions?note=query-5150", "/healthz"):
            await client.get(url + path)


@pytest.mark.parametrize("kind", ["AgentHost", "MultiAgentHost"])
async def test_a_served_host_logs_no_request_line_at_debug_and_leaves_uvicorns_loggers_alone(
    kind: str, caplog
) -> None:
    caplog.set_level(logging.DEBUG)  # the root, and so every logger that sets no level
    before = _state()
    ready: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    if kind == "AgentHost":
        host: AgentHost | MultiAgentHost = AgentHost("echo")
    else:
        host = MultiAgentHost()
        host.add("echo")
    serving = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    try:
        urls = await asyncio.wait_for(ready, 10)
        url = urls if isinstance(urls, str) else urls["echo"]  # type: ignore[index]
        assert _state() == before  # nothing configured for the process
        await _get_twice(str(url))
    finally:
        host.stop()
        await asyncio.wait_for(serving, 15)
    assert _state() == before
    access = [r for r in caplog.records if r.name == "uvicorn.access"]
    assert access == []
    # The test's own client (httpx) logs what it sent; the server side wrote nothing of it.
    ours = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    assert not any("query-5150" in r.getMessage() for r in ours)
