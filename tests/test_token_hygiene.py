"""A canary token never appears in results, reprs, exceptions, log records or events.

One test drives every path a token travels (success, refusal, a server that
echoes it back, turn errors, timeouts, truncation, registration) and scans
everything those paths produced.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from typing import Any

import pytest
import respx

from coreagent_sdk import AttachClient, FakeClock, PeerRegistration
from coreagent_sdk.errors import CoreAgentError
from simulator import Fleet, behaviors

from .conftest import CANARY

ENV = {"FLEET_TOKEN": CANARY}


def everything_about(error: BaseException) -> str:
    """The error, its repr, args, attributes, chain and formatted traceback."""
    parts = ["".join(traceback.format_exception(error))]
    seen: BaseException | None = error
    while seen is not None:
        parts += [str(seen), repr(seen), repr(seen.args), repr(vars(seen))]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


async def test_the_canary_token_never_leaks_anywhere(caplog) -> None:
    produced: list[str] = []
    caplog.set_level(logging.DEBUG)
    clock = FakeClock()
    fleet = Fleet(tokens={CANARY: "alice"}, clock=clock)
    fleet.add_peer("ok", behaviors.narrate(["step"], "fine"), token=CANARY)
    fleet.add_peer("fails", behaviors.fail("auth_error", "upstream rejected"), token=CANARY)
    fleet.add_peer("slow", behaviors.slow(30), token=CANARY)
    fleet.add_peer("long", behaviors.stream(5000, 500), token=CANARY)
    fleet.add_peer("solo", multi_session=False, token=CANARY)
    events: list[Any] = []
    tool = fleet.call_peer(
        token_env="FLEET_TOKEN",
        environ=ENV,
        timeout=0.5,
        max_response_bytes=100,
        on_event=events.append,
    )
    produced += [
        repr(tool),
        repr(tool.directory),
        repr(tool.schema),
        repr(tool.openai_tool()),
        repr(tool.anthropic_tool()),
    ]

    for peer in ("ok", "long"):
        result = await tool.acall(peer=peer, prompt="go")
        produced += [repr(result), repr(result.to_dict())]
    for peer in ("fails", "slow", "solo", "missing", ""):
        with pytest.raises(CoreAgentError) as info:
            await tool.acall(peer=peer, prompt="go")
        produced.append(everything_about(info.value))

    wrong = fleet.call_peer(
        token_env="FLEET_TOKEN",
        environ={"FLEET_TOKEN": "nope"},
        directory=fleet.directory(token=CANARY),
    )
    with pytest.raises(CoreAgentError) as info:
        await wrong.acall(peer="ok", prompt="go")
    produced.append(everything_about(info.value))

    # A server that echoes the token back in its error body.
    with respx.mock(base_url="http://echoer.test") as mock:
        mock.post("/sessions").respond(401, text=f"bad token: Bearer {CANARY}")
        async with AttachClient("http://echoer.test", token=CANARY) as client:
            produced.append(repr(client))
            with pytest.raises(CoreAgentError) as info:
                await client.new_session()
            produced.append(everything_about(info.value))

    registration = PeerRegistration(
        "http://hub.sim",
        name="py",
        endpoint="http://py:1",
        transport=fleet.transport,
        token_env="FLEET_TOKEN",
        environ=ENV,
        clock=clock,
        on_event=events.append,
    )
    asleep = clock.sleepers  # the peers' idle sweeps: the calls above left sessions
    async with registration as reg:
        produced.append(repr(reg))
        fleet.expire("py")
        await clock.until_sleeping(asleep + 1)
        clock.advance(20)
        for _ in range(200):
            if reg.registrations == 2:
                break
            await asyncio.sleep(0)
        assert reg.registrations == 2  # the failure path ran too

    produced += [repr(e) for e in events]
    produced += [r.getMessage() for r in caplog.records]
    produced += [logging.Formatter().format(r) for r in caplog.records]
    assert len(events) > 10 and caplog.records

    leaks = [text for text in produced if CANARY in text]
    assert leaks == []
    assert any("[redacted]" in text for text in produced)  # the echoed one was scrubbed
