"""`CallPeer` to an A2A agent against the A2A SDK's own client, to the same server, in one run.

The server is the A2A SDK's own JSON-RPC server (`wire_speed.py serve a2a`: an agent
answering with three streamed artifact chunks), pinned to core 0; each caller runs in
a process of its own pinned to core 1, at 1 and 50 calls in flight:

- a2a-sdk: the A2A SDK's client (`ClientFactory.create_from_url` once, then
  `send_message` streamed per call), the baseline
- callpeer: `CallPeer(A2ADirectory([url]))`, the defaults: the card kept as its
  response's caching headers allow (this server sends an `ETag` and no `Cache-Control`,
  so 5 s), then revalidated: a call is one `SendStreamingMessage`, as the SDK's
- callpeer-revalidate: `A2ADirectory([url], max_age=0)`: the card asked again on every
  call with `If-None-Match` (a 304, the parsed card reused), one more round trip

Each cell: calls per second (best / median of the rounds), p50 latency, and the ratio
of a call's time to the SDK client's (at 1 in flight p50 latency; at 50 in flight the
inverse of the rates). Every loop is bounded by a count and a time; nothing leaves
127.0.0.1.

    pip install -e '.[a2a,contenders]'
    python bench/a2a_call.py [--levels 1 50] [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
from typing import Any

import wire_speed  # the same directory: its A2A server, its SDK caller, its loop

CONTENDERS = ("a2a-sdk", "callpeer", "callpeer-revalidate")
EXPECTED = "".join(wire_speed.CHUNKS).strip()


async def callpeer_caller(url: str, level: int, max_age: float | None) -> Any:
    from coreagent_sdk import A2ADirectory, CallPeer

    directory = A2ADirectory([url], max_age=max_age)
    tool = CallPeer(directory, timeout=wire_speed.DEADLINE, max_connections=max(100, 2 * level + 2))

    async def call() -> None:
        result = await tool.acall(peer="bench", prompt=wire_speed.PROMPT)
        if result.response != EXPECTED:
            raise AssertionError(f"callpeer answered {result.response!r}")

    async def close() -> None:
        await tool.aclose()
        await directory.aclose()

    return call, close


async def drive(contender: str, url: str, level: int, seconds: float) -> dict[str, Any]:
    logging.disable(logging.WARNING)
    if contender == "a2a-sdk":
        call, close = await wire_speed.a2a_caller(url, level, True)
    else:
        call, close = await callpeer_caller(url, level, None if contender == "callpeer" else 0.0)
    return await wire_speed.measure(call, close, level, seconds)


def _pinned(core: str, script: str, *args: str) -> list[str]:
    return ["taskset", "-c", core, sys.executable, script, *args]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def compare(args: argparse.Namespace) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    server = subprocess.Popen(
        _pinned(wire_speed.SERVER_CORE, os.path.join(here, "wire_speed.py"), "serve", "a2a"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    url = json.loads(server.stdout.readline())
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    print(f"load average at the start: {_load()}; {args.rounds} rounds of {args.seconds:g} s")
    try:
        for round_ in range(args.rounds):
            for level in args.levels:
                for contender in CONTENDERS:
                    out = subprocess.run(
                        _pinned(
                            wire_speed.CLIENT_CORE,
                            __file__,
                            "drive",
                            contender,
                            url,
                            str(level),
                            str(args.seconds),
                        ),
                        capture_output=True,
                        text=True,
                        timeout=args.seconds + 4 * wire_speed.DEADLINE,
                        check=True,
                    ).stdout
                    got = json.loads(out.strip().splitlines()[-1])
                    results.setdefault((contender, level), []).append(got)
                    print(
                        f"  round {round_ + 1} {contender:>19} @{level:<3} {got['rate']:7.0f}/s "
                        f"p50 {got['p50'] * 1000:6.2f} ms  failed {sum(got['failures'].values())}"
                        f"  load {_load()}",
                        flush=True,
                    )
    finally:
        wire_speed.stop_servers([server])
    print(f"\nload average at the end: {_load()}\n")
    head = " | ".join(f"{n} in flight: calls/s best / median, p50 ms, x SDK" for n in args.levels)
    print(f"| contender | {head} | client CPU ms per call at {args.levels[-1]} | failed |")
    print("|---|" + "---:|" * (len(args.levels) + 2))
    for contender in CONTENDERS:
        cells = []
        for level in args.levels:
            rows = results[contender, level]
            base = results["a2a-sdk", level]
            rate = statistics.median(r["rate"] for r in rows)
            p50 = statistics.median(r["p50"] for r in rows)
            if level == 1:  # one call at a time: the ratio of latencies
                ratio = p50 / statistics.median(r["p50"] for r in base)
            else:  # many at once: a call's share of the time, the inverse of the rates
                ratio = statistics.median(r["rate"] for r in base) / rate
            best = max(r["rate"] for r in rows)
            cells.append(f"{best:.0f} / {rate:.0f}, {p50 * 1000:.2f}, {ratio:.2f}x")
        last = results[contender, args.levels[-1]]
        cpu = 1000 * sum(r["cpu"] for r in last) / (sum(r["done"] for r in last) or 1)
        failed = sum(
            sum(r["failures"].values()) for level in args.levels for r in results[contender, level]
        )
        print(f"| {contender} | " + " | ".join(cells) + f" | {cpu:.2f} | {failed} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    drive_ = sub.add_parser("drive", help="(internal) drive one contender's client")
    drive_.add_argument("contender", choices=CONTENDERS)
    drive_.add_argument("url")
    drive_.add_argument("level", type=int)
    drive_.add_argument("seconds", type=float)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 50])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    if args.command == "drive":
        print(json.dumps(asyncio.run(drive(args.contender, args.url, args.level, args.seconds))))
    else:
        compare(args)


if __name__ == "__main__":
    main()
