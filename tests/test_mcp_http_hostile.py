"""A hostile Streamable HTTP MCP server, on loopback, against a skill's `HttpServer`.

The server (tests/mcp_servers/hostile_http.py) answers JSON-RPC by hand. What held when
these were written: a token it echoes (in a tool's description, an error, a listing of
wrong types) is never shown, and a stall ends at call_timeout. Its `big`, `endless` and
`bomb` modes hold the HTTP transport to the frame bound stdio has (max(1 MiB, 8 x
max_result_bytes)): the SDK's client had read 48 MiB whole, gzipped or not, or until
call_timeout for a body that never ends.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from coreagent_sdk.host import ModelAgent
from coreagent_sdk.mcp import HttpServer
from coreagent_sdk.models import ScriptedModel, Skill, when

from .mcp_servers.hostile_http import CHUNK, SEND_BUFFER, SIZE, hostile
from .test_mcp_tools import Recording, ask, tool_results

pytest.importorskip("mcp")

TOKEN = "hostile-secret-9d1c7e5b22"
FRAME = 1 << 20  # the stdio bound for max_result_bytes=1000: max(1 MiB, 8 x 1000)


def _in_flight() -> int:
    """What loopback can hold between the server's writes and the client's reads, unread.

    The client's receive buffer grows by itself up to the kernel's limit (tcp_rmem's third
    field: 32 MiB on CI's machines, where 10 MiB was once seen in flight), the server's
    send buffer is fixed, and one chunk may sit in the server's transport, written but
    counted as sent."""
    try:
        receive = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    except (OSError, IndexError, ValueError):
        receive = 6 << 20  # Linux's default limit
    return receive + 2 * SEND_BUFFER + CHUNK


async def _call(
    mode: str, caplog: pytest.LogCaptureFixture, call_timeout: float = 5
) -> tuple[dict[str, Any], Any, str]:
    """The model's `hostile_dump` call against a server in `mode`: its result, stats, all said."""
    caplog.set_level("DEBUG")
    async with hostile(mode) as (url, stats):
        model = Recording(ScriptedModel(when().call("hostile_dump")))
        server = HttpServer(
            "hostile",
            url,
            headers={"Authorization": "Bearer ${env:HOSTILE_TOKEN}"},
            max_result_bytes=1000,
            call_timeout=call_timeout,
            start_timeout=10,
        )
        agent = ModelAgent(
            model,
            skills=[Skill("s", mcp_servers=[server], secrets=["HOSTILE_TOKEN"])],
            secrets={"HOSTILE_TOKEN": TOKEN},
        )
        answer, fleet = await ask(agent)
        try:
            results = tool_results(model)
            said = json.dumps(results) + answer + repr(agent.mcp_status)
            said += repr(fleet.calls.records()) + json.dumps([s.description for s in model.offered])
        finally:
            await fleet.aclose()
    assert stats.authorization == f"Bearer {TOKEN}"  # the server did see the token
    return (results[0] if results else {}), stats, said + caplog.text


async def test_a_token_the_server_echoes_in_a_description_and_an_error_is_never_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    result, _, said = await _call("echo", caplog)
    assert "error" in result
    assert TOKEN not in said


async def test_a_listing_of_wrong_types_holding_the_token_is_refused_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    result, stats, said = await _call("types", caplog)
    assert stats.calls == 0 and "not MCP" in result["error"]
    assert TOKEN not in said


async def test_a_call_that_stalls_ends_at_call_timeout(caplog: pytest.LogCaptureFixture) -> None:
    started = time.monotonic()
    result, _, said = await _call("stall", caplog, call_timeout=1)
    assert "did not answer within call_timeout=1s" in result["error"]
    assert time.monotonic() - started < 10 and TOKEN not in said


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["big", "bomb"])
async def test_an_answer_past_the_frame_bound_fails_the_call_instead_of_being_read_whole(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """48 MiB of JSON, plain or gzipped to ~50 KiB: the SDK's client read it all (the
    process grew by ~240 MiB) and the model was shown 1,000 bytes of it."""
    result, _, _ = await _call(mode, caplog)
    assert set(result) == {"error"}, str(result)[:200]
    if mode == "big":
        assert "over 1048576 bytes (the frame bound" in result["error"], result["error"]
    else:  # refused unread: its inflated size is unknown
        assert "came 'gzip'-encoded" in result["error"] and "not read" in result["error"]


@pytest.mark.slow
async def test_a_body_that_never_ends_is_read_no_further_than_the_frame_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client read 48 MiB (the server's own cap) before call_timeout stopped it."""
    slack = _in_flight()
    # Otherwise reading all the server sends could pass for stopping at the bound.
    assert FRAME + slack < SIZE, f"this machine lets {slack} bytes sit in flight: raise SIZE"
    result, stats, _ = await _call("endless", caplog)
    assert set(result) == {"error"}
    # The bound stopped the read, not call_timeout (which had let the server's whole 48 MiB in).
    assert stats.sent <= FRAME + slack, f"read {stats.sent} bytes for a {FRAME}-byte frame"
    assert "over 1048576 bytes" in result["error"], result["error"]


async def test_a_json_rpc_error_answer_is_the_tools_error_not_the_servers_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A live server's JSON-RPC error -32000 (the generic server error, its words holding the
    token) read as the SDK's own CONNECTION_CLOSED: the call said the server 'ended during
    the call' and would be 'started again on the next call'."""
    result, _, said = await _call("echo", caplog)
    assert "ended during the call" not in result["error"], result["error"]
    assert "[redacted]" in result["error"] and TOKEN not in said  # its own words, scrubbed
