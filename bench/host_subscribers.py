"""Stalled event-stream subscribers: what do they cost a host, and does it still answer?

The host runs as its users run it, a process of its own
(`python -m coreagent_sdk.host bench.host_subscribers:HOST`), served on
127.0.0.1. This process opens `--subscribers` event streams on one session over
raw loopback sockets and never reads them (a small receive buffer, so the
kernel holds little for them), then injects a turn that publishes `--frames`
streaming chunks. Printed per row: the host's resident memory (VmRSS) grown
from before the turn to after it, that growth per subscriber, the subscribers
still attached, and how long a well-behaved caller's `CallPeer` took during the
storm against the same call with nobody stalled (the baseline, same run).

Rows: no stalled subscriber (baseline); stalled subscribers with the daemon's
limit (256 frames, `SUBSCRIBER_QUEUE_LIMIT`); and the same with the host's old
limit of 10,000 frames, set in the host process for comparison. Every loop is
bounded; the script stops by itself.

    python bench/host_subscribers.py [--subscribers 1000] [--frames 11000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from coreagent_sdk import CallPeer, Peer, StaticDirectory

ROOT = Path(__file__).resolve().parent.parent
JSON = {"Content-Type": "application/json"}


def __getattr__(name: str) -> Any:
    # `bench.host_subscribers:HOST`, built in the host process from this script's environment.
    if name != "HOST":
        raise AttributeError(name)
    from coreagent_sdk.host import AgentHost, Turn, _session

    limit = os.environ.get("BENCH_SUBSCRIBER_LIMIT")
    if limit:
        _session.SUBSCRIBER_QUEUE_LIMIT = int(limit)  # the old limit, for the comparison row
    frames = int(os.environ["BENCH_FRAMES"])

    async def chatty(turn: Turn) -> None:
        if turn.prompt != "storm":
            await turn.say(turn.prompt)
            return
        for i in range(frames):
            await turn.chunk(f"{i:06d};" + "x" * 300)
        await turn.say("done")

    return AgentHost("chatty", behavior=chatty, session_rate_limit=None)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def stalled(port: int, path: str) -> socket.socket:
    """An event-stream request on a socket that is never read from."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    request = f"GET {path}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    await asyncio.get_running_loop().sock_sendall(sock, request)
    return sock


async def turn_over(http: httpx.AsyncClient, path: str) -> None:
    """Read the session's stream (keeping up) until the storm's turn completes."""
    async with http.stream("GET", f"{path}/events") as stream:
        async for line in stream.aiter_lines():
            if line == "event: turn-complete":
                return


async def one_call(url: str) -> float:
    started = time.perf_counter()
    async with CallPeer(StaticDirectory([Peer("chatty", url)]), timeout=60) as tool:
        reply = await tool.acall(peer="chatty", prompt="still there?")
    assert reply.response == "still there?", reply
    return time.perf_counter() - started


def start_host(frames: int, limit: int | None) -> subprocess.Popen[str]:
    env = {**os.environ, "BENCH_FRAMES": str(frames)}
    if limit is not None:
        env["BENCH_SUBSCRIBER_LIMIT"] = str(limit)
    argv = [sys.executable, "-m", "coreagent_sdk.host", "bench.host_subscribers:HOST"]
    return subprocess.Popen(
        [*argv, "--port", "0"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )


async def row(subscribers: int, frames: int, limit: int | None) -> dict[str, Any]:
    proc = start_host(frames, limit)
    socks: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        url = json.loads(line)["url"]
        port = int(url.rsplit(":", 1)[1])
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            created = (await http.post("/sessions", headers=JSON)).json()
            path = f"/sessions/{created['app']}/{created['sessionID']}"
            for start in range(0, subscribers, 200):  # bounded: in batches of 200
                batch = range(start, min(start + 200, subscribers))
                socks.extend(await asyncio.gather(*(stalled(port, path) for _ in batch)))
            await one_call(url)  # warm: the first call's imports are not the storm's cost
            await asyncio.sleep(1.0)
            before = rss_kib(proc.pid)
            await http.post(f"{path}/inject", headers=JSON, json={"message": "storm"})
            call = await one_call(url)  # during the storm
            await asyncio.wait_for(turn_over(http, path), 300)
            await asyncio.sleep(1.0)
            after = rss_kib(proc.pid)
        return {"grown": after - before, "call": call}
    finally:
        for sock in socks:
            sock.close()
        proc.terminate()
        proc.wait(15)


async def main(subscribers: int, frames: int) -> None:
    print(
        f"stalled subscribers: {subscribers:,} streams never read, one turn of "
        f"{frames:,} chunks (~310 B each), host process on 127.0.0.1"
    )
    base = await row(0, frames, None)
    print("| stalled | host limit | RSS grown KiB | per stalled KiB | call s | call ratio |")
    print("|--------:|-----------:|--------------:|----------------:|-------:|-----------:|")
    print(f"| 0 | 256 | {base['grown']:,} | - | {base['call']:.2f} | 1.00 |", flush=True)
    for limit in (None, 10_000):
        got = await row(subscribers, frames, limit)
        per = (got["grown"] - base["grown"]) / subscribers
        ratio = got["call"] / base["call"]
        shown = "256" if limit is None else f"{limit:,} (old)"
        print(
            f"| {subscribers:,} | {shown} | {got['grown']:,} | {per:.1f} | "
            f"{got['call']:.2f} | {ratio:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=1_000)
    parser.add_argument("--frames", type=int, default=11_000)
    args = parser.parse_args()
    asyncio.run(main(args.subscribers, args.frames))
