"""What CallPeer costs over the bare protocol, written with raw httpx over the same transport.

Both sides run the same delegation against the same in-process simulated peer
(`fleet.transport`): POST /sessions, open the event stream, inject, read until
the turn ends, collecting text by protocol.md's rules. The bare side has no
directory lookup, typed frames, bounds, checks or events; CallPeer resolves
through a StaticDirectory (the hub lookup is a separate request a bare call
would not make, so it is left out of both).

Runs are interleaved (bare, tool, bare, tool, ...), so drift on a shared
machine hits both sides alike; the fastest round of each side is compared.

    python bench/bench_call_peer.py [--calls 200] [--rounds 21]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx

from coreagent_sdk import CallPeer, Peer, StaticDirectory
from simulator import Fleet, behaviors

JSON = {"Content-Type": "application/json"}
PROMPT = "How is the cluster doing?"


async def bare_delegation(http: httpx.AsyncClient, base: str, prompt: str) -> str:
    """The protocol by hand: the smallest correct delegation."""
    created = (await http.post(f"{base}/sessions", headers=JSON)).json()
    path = f"{base}/sessions/{created['app']}/{created['sessionID']}"
    texts: list[str] = []
    async with http.stream("GET", f"{path}/events") as stream:
        await http.post(f"{path}/inject", headers=JSON, json={"message": prompt})
        event = ""
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                if event == "turn-complete":
                    break
                if event != "agent":
                    continue
                ev = json.loads(line[6:])["event"]
                if ev.get("Partial"):
                    continue
                parts = (ev.get("Content") or {}).get("parts") or []
                text = "".join(p.get("text", "") for p in parts)
                author = ev.get("Author", "")
                if text and author not in ("", "user"):
                    texts.append(text)
                    if not any("functionCall" in p or "functionResponse" in p for p in parts):
                        break
    return "\n\n".join(texts).strip()


async def timed(concurrency: int, calls: int, one: Callable[[], Awaitable[str]]) -> float:
    """Mean wall time per call, in ms, for `calls` calls at `concurrency` at once."""
    started = time.perf_counter()
    for _ in range(calls // concurrency):
        answers = await asyncio.gather(*(one() for _ in range(concurrency)))
        assert all(a == "3 nodes ready" for a in answers), answers[:1]
    return (time.perf_counter() - started) * 1000 / (calls // concurrency * concurrency)


async def main(calls: int, rounds: int) -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.reply("3 nodes ready"))
    base = fleet.url("prod-1")
    http = httpx.AsyncClient(transport=fleet.transport)
    tool = CallPeer(StaticDirectory([Peer("prod-1", base)]), transport=fleet.transport)

    async def bare() -> str:
        return await bare_delegation(http, base, PROMPT)

    async def with_tool() -> str:
        return (await tool.acall(peer="prod-1", prompt=PROMPT)).response

    assert await bare() == await with_tool() == "3 nodes ready"
    # This VM's timings swing by up to 2x between runs: many short interleaved
    # rounds, and the ratio of the fastest round of each side (as timeit
    # advises), with the ratio of medians beside it.
    print(
        f"{rounds} interleaved rounds: {calls} calls at concurrency 1, {5 * 200} at concurrency 200"
    )
    print(
        f"{'concurrency':>11}  {'bare ms/call':>12}  {'CallPeer ms/call':>16}  "
        f"{'ratio (min)':>11}  {'ratio (median)':>14}"
    )
    for concurrency in (1, 200):
        n = max(calls, 5 * concurrency) if concurrency > 1 else calls
        await timed(concurrency, n, bare)  # warm-up
        await timed(concurrency, n, with_tool)
        bare_ms, tool_ms = [], []
        for _ in range(rounds):
            bare_ms.append(await timed(concurrency, n, bare))
            tool_ms.append(await timed(concurrency, n, with_tool))
        b, t = min(bare_ms), min(tool_ms)
        median_ratio = statistics.median(tool_ms) / statistics.median(bare_ms)
        print(f"{concurrency:>11}  {b:>12.3f}  {t:>16.3f}  {t / b:>11.3f}  {median_ratio:>14.3f}")
    await tool.aclose()
    await http.aclose()
    await fleet.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
