"""What a model-driven turn costs over a hand-written one that makes the same call.

Two routers on the agent host, in-process (ASGI transports, no sockets), each
asked by the same `CallPeer`: one runs `ModelAgent` with a `ScriptedModel`
that makes one `call_peer` to a helper and answers with its result; the
other is a hand-written behaviour making the same call and giving the same
answer. Rounds alternate (hand, model, hand, model, ...) so drift on a
shared machine hits both alike; the fastest round of each is compared.

Then 1,000 model-driven turns at once in one process: delegations per
second (each turn is one delegation router -> helper) and the memory a turn
in flight holds (tracemalloc's peak over the baseline, per turn; a separate
run, since tracing slows the timed one).

    python bench/model_agent.py [--turns 200] [--rounds 7] [--concurrent 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc
from typing import Any

from coreagent_sdk import ASGITransport, CallPeer, Peer, RoutingTransport, StaticDirectory
from coreagent_sdk.host import AgentHost, ModelAgent, Turn
from coreagent_sdk.models import ScriptedModel, when


async def helper(turn: Turn) -> None:
    await turn.say(turn.prompt)


async def hand_written(turn: Turn) -> None:
    result = await turn.call_peer("helper", turn.prompt)
    await turn.say(f"{result['peer']}: {result['response']}")


def model_agent() -> ModelAgent:
    return ModelAgent(ScriptedModel(when().ask("helper").answer("{results}")))


def fleet(router: Any) -> tuple[CallPeer, list[AgentHost]]:
    """The router (running `router`) and its helper, in-process; a CallPeer asking the router."""
    help_host = AgentHost("helper", behavior=helper, session_rate_limit=None)
    routes = RoutingTransport({"helper.bench": ASGITransport(help_host.app)})
    host = AgentHost(
        "router",
        behavior=router,
        session_rate_limit=None,
        directory=StaticDirectory([Peer("helper", "http://helper.bench")]),
        peer_transport=routes,
    )
    tool = CallPeer(
        StaticDirectory([Peer("router", "http://router.bench")]),
        transport=ASGITransport(host.app),
        timeout=120,
    )
    return tool, [host, help_host]


async def timed_round(router: Any, turns: int) -> float:
    """Seconds per turn of `turns` sequential calls to a router running `router`."""
    tool, hosts = fleet(router)
    try:
        first = await tool.acall(peer="router", prompt="warm up")
        assert first.response == "helper: warm up", first.response
        started = time.perf_counter()
        for i in range(turns):
            await tool.acall(peer="router", prompt=f"q{i}")
        return (time.perf_counter() - started) / turns
    finally:
        await tool.aclose()
        for host in hosts:
            await host.aclose()


async def concurrent(n: int, trace: bool) -> tuple[float, float]:
    """(delegations per second, bytes held per turn in flight) of `n` turns at once."""
    tool, hosts = fleet(model_agent())
    try:
        await tool.acall(peer="router", prompt="warm up")
        gc.collect()
        if trace:
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
        started = time.perf_counter()
        results = await asyncio.gather(
            *(tool.acall(peer="router", prompt=f"q{i}") for i in range(n))
        )
        took = time.perf_counter() - started
        per_turn = 0.0
        if trace:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            per_turn = (peak - base) / n
        assert all(r.response == f"helper: q{i}" for i, r in enumerate(results))
        return n / took, per_turn
    finally:
        await tool.aclose()
        for host in hosts:
            await host.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--concurrent", type=int, default=1000)
    args = parser.parse_args()

    hand, model = [], []
    for _ in range(args.rounds):
        hand.append(await timed_round(hand_written, args.turns))
        model.append(await timed_round(model_agent(), args.turns))
    best_hand, best_model = min(hand), min(model)
    print(f"one turn, one call_peer ({args.turns} turns x {args.rounds} rounds, best round)")
    print(f"  hand-written behaviour : {best_hand * 1e3:7.2f} ms/turn")
    print(f"  ModelAgent + scripted  : {best_model * 1e3:7.2f} ms/turn")
    print(f"  ratio model / hand     : {best_model / best_hand:7.3f}x  (target <= 1.1x)")

    rate, _ = await concurrent(args.concurrent, trace=False)
    _, per_turn = await concurrent(args.concurrent, trace=True)
    print(f"{args.concurrent} model-driven turns at once, one process")
    print(f"  delegations per second : {rate:9.0f}")
    print(f"  memory per turn        : {per_turn / 1024:9.1f} KiB (tracemalloc peak over baseline)")


if __name__ == "__main__":
    asyncio.run(main())
