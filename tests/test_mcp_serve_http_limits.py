"""The MCP bridge over HTTP reads what a caller sends with the host's limits (loopback only).

Its token is checked once a request's headers are in, so what comes before that is
anyone's: with uvicorn's defaults a caller sent it 16 MiB of headers unanswered (httptools
counts none), and headers that never ended held a connection for as long as the caller
liked. It now reads headers as a host does (`uvicorn_options()`), on either parser, and, as a
host's servers, configures no logger of the process. Every socket here is on 127.0.0.1 and
every read is bounded in time.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

pytest.importorskip("mcp")

from coreagent_sdk.host import MAX_HEADER_BYTES, _limits, uvicorn_options
from coreagent_sdk.host._limits import GoHeaderLimits
from coreagent_sdk.host._limits_httptools import GoHeaderLimitsHttpTools
from coreagent_sdk.mcp import AgentMCPServer
from simulator import behaviors

HEADER_TIMEOUT = 0.5  # the daemon's 10 s, shortened for the test
_UVICORN = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


@pytest.fixture(params=[GoHeaderLimits, GoHeaderLimitsHttpTools], ids=["h11", "httptools"])
def protocol(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> type:
    """Each parser uvicorn serves with: httptools where installed, else h11."""
    monkeypatch.setattr(_limits, "_http_protocol", lambda: request.param)
    assert uvicorn_options()["http"] is request.param
    return request.param  # type: ignore[no-any-return]


def _port(url: str) -> int:
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


async def test_headers_past_the_hosts_limit_are_answered_431_before_any_token_is_checked(
    protocol: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_LIMITS_TOKEN", "t" * 32)
    served = AgentMCPServer(behaviors.echo(), name="echo")
    async with served.serve_http(port=0, token_env="MCP_LIMITS_TOKEN") as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(url))
        try:
            writer.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            line = b"X-Pad: " + b"a" * 8000 + b"\r\n"
            sent = 0
            # Four times the limit at most: the refusal comes once the limit is read.
            while sent < 4 * MAX_HEADER_BYTES and not reader.at_eof():
                writer.write(line)
                sent += len(line)
                try:
                    await asyncio.wait_for(writer.drain(), 5)
                except ConnectionError:
                    break  # the server answered and closed while we still sent
            answer = await asyncio.wait_for(reader.read(100), 5)
        finally:
            writer.close()
    assert answer.startswith(b"HTTP/1.") and b" 431 " in answer.split(b"\r\n", 1)[0], answer


async def test_headers_that_never_end_lose_their_connection_at_the_header_timeout(
    protocol: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(protocol, "read_header_timeout", HEADER_TIMEOUT)
    served = AgentMCPServer(behaviors.echo(), name="echo")
    async with served.serve_http(port=0) as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(url))
        try:
            writer.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: a")
            await writer.drain()
            started = time.monotonic()
            data = await asyncio.wait_for(reader.read(100), 10 * HEADER_TIMEOUT)
            held = time.monotonic() - started
        finally:
            writer.close()
    assert data == b"" and reader.at_eof()  # closed unanswered, as net/http closes it
    assert HEADER_TIMEOUT * 0.9 <= held < 10 * HEADER_TIMEOUT


def _state() -> dict[str, tuple[object, ...]]:
    loggers = (logging.getLogger(n) for n in _UVICORN)
    return {lg.name: (lg.level, tuple(lg.handlers), lg.propagate, lg.disabled) for lg in loggers}


async def test_serving_mcp_over_http_leaves_the_processs_uvicorn_loggers_as_they_were() -> None:
    before = _state()
    served = AgentMCPServer(behaviors.echo(), name="echo")
    async with served.serve_http(port=0):
        during = _state()
    assert during == before and _state() == before
