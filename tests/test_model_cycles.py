"""Model-driven agents that ask themselves, or each other: the cycle ends, and says so.

A model that asks `call_peer` of its own agent (or two that ask each other)
used to open turn after turn, each hop holding a connection slot of its
agent's own tool under a fresh two-minute deadline, until no slot was left
for any other delegation. Inside one process a callee's calls now get half
of the time its caller left (the rule the simulator's delegating behaviours
follow), so the chain ends within the first caller's deadline with an answer
naming the cycle, and the agents can delegate elsewhere during and after.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import pytest

from coreagent_sdk.host import ModelAgent
from coreagent_sdk.models import Message, ModelReply, ToolCall, ToolSpec
from simulator import Fleet, behaviors


class Delegating:
    """A model that hands every prompt to `target` and answers with what came back.

    Asked about "helper", it asks the helper instead. With `hold`, the turn that first
    reads a refused call (the deepest hop of a cycle) waits for `hold` before answering.
    """

    def __init__(self, target: str, hold: asyncio.Event | None = None) -> None:
        self.target = target
        self.hold = hold
        self.deepest = asyncio.Event()
        self.turns = 0

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Any:
        last = messages[-1]
        if last.role == "tool":
            result = json.loads(last.text)
            said = result.get("response", result.get("error", ""))
            if "error" in result and self.hold is not None and not self.deepest.is_set():
                self.deepest.set()
                await self.hold.wait()
            return ModelReply(text=f"{last.tool_name} said: {said}")
        self.turns += 1
        peer = "helper" if "helper" in messages[1].text else self.target
        return ModelReply(
            tool_calls=[ToolCall(f"c{self.turns}", "call_peer", {"peer": peer, "prompt": "go"})]
        )


def fleet_of(models: dict[str, Delegating]) -> Fleet:
    fleet = Fleet()
    for name, model in models.items():
        fleet.add_peer(name, ModelAgent(model))
    fleet.add_peer("helper", behaviors.reply("helped"))
    return fleet


@pytest.mark.parametrize("pair", [False, True], ids=["asks itself", "two ask each other"])
async def test_a_delegation_cycle_of_model_agents_ends_within_the_callers_deadline_naming_it(
    pair: bool,
) -> None:
    models = {"a": Delegating("b"), "b": Delegating("a")} if pair else {"a": Delegating("a")}
    fleet = fleet_of(models)
    async with fleet.call_peer(timeout=10) as tool:
        started = time.monotonic()
        result = await tool.acall(peer="a", prompt="go round")
        took = time.monotonic() - started
        # After: the agents delegate elsewhere at once.
        after = await tool.acall(peer="a", prompt="ask the helper")
    await fleet.aclose()

    assert took < 10
    cycle = '"a" -> "b" -> "a"' if pair else '"a" -> "a"'
    assert f"the delegation is a cycle, {cycle}" in result.response
    # Each hop hands on half the time it has: 10 s halves below 1 ms within 14 hops
    # (it was 51 nested turns for one agent, 101 for two, then a deadlock).
    turns = sum(m.turns for m in models.values())
    assert 3 <= turns <= 15
    assert after.response == "call_peer said: helped"


@pytest.mark.parametrize("pair", [False, True], ids=["asks itself", "two ask each other"])
async def test_agents_in_a_cycle_stay_free_to_delegate_elsewhere_while_it_runs(pair: bool) -> None:
    hold = asyncio.Event()
    first = Delegating("b" if pair else "a", hold)
    models = {"a": first, "b": Delegating("a", hold)} if pair else {"a": first}
    fleet = fleet_of(models)
    async with fleet.call_peer(timeout=30) as tool:
        cycling = asyncio.ensure_future(tool.acall(peer="a", prompt="go round"))
        deepest = [m.deepest for m in models.values()]
        waits = [asyncio.ensure_future(d.wait()) for d in deepest]
        await asyncio.wait_for(asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED), 20)
        for w in waits:
            w.cancel()
        # The cycle is as deep as it goes, every hop of it waiting: both agents still
        # delegate to a third at once.
        for name in models:
            during = await asyncio.wait_for(tool.acall(peer=name, prompt="ask the helper"), 5)
            assert during.response == "call_peer said: helped"
        hold.set()
        result = await asyncio.wait_for(cycling, 20)
    await fleet.aclose()
    assert "the delegation is a cycle" in result.response


def test_a_turn_that_starts_after_its_caller_gave_up_has_no_time_to_delegate() -> None:
    # On a loaded machine a turn can start after the call that asked for it timed out. It
    # inherited nothing, so it delegated with a whole deadline of its own, and a cycle ran a
    # second chain of hops (CI's rehearsal counted 22 turns where 15 is the bound).
    from coreagent_sdk._peer import _hops

    _hops.note("s-late", time.perf_counter() + 10, ("a",))
    _hops.forget("s-late")  # the caller gave up before the turn began
    with _hops.entering("s-late", "a"):
        late = _hops.budget(120.0)
    assert late.seconds <= 0 and not late.whole and late.path == ("a", "a")


def test_a_note_for_a_peers_default_session_reaches_no_hosts_default_turn() -> None:
    # Every host has a session called `default` and no call opens one: a server that
    # answered a new session with that id (a fake in a test) left an expired note, and the
    # next host's `default` turn in the process was refused its delegation ("left 0.0 ms
    # for this hop"). Such a note is not taken.
    from coreagent_sdk._peer import _hops
    from coreagent_sdk.host._session import STARTUP_SESSION

    _hops.note(STARTUP_SESSION, time.perf_counter() + 10, ("asker",))
    _hops.forget(STARTUP_SESSION)
    with _hops.entering(STARTUP_SESSION, "asker"):
        mine = _hops.budget(120.0)
    assert mine.seconds == 120.0 and mine.whole and mine.path == ("asker",)
