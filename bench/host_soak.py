"""Soak the agent host: does its memory level off while idle eviction moves sessions to its store?

The host runs as its users run it, a process of its own
(`python -m coreagent_sdk.host bench.host_soak:HOST`, echo agent, session rate
limit off, idle eviction at `--idle` seconds, a store file in a temporary
folder), served on 127.0.0.1. This process keeps `--concurrency` `CallPeer`
calls in flight against it; every call opens a session, so sessions pile up
unless eviction frees them. Every `--every` seconds it samples the host
process's resident memory (VmRSS), counts the sessions in the store, and
checks that sessions made over a sweep ago (so evicted) answer with their
history: their replay holds the first call's prompt and answer with their
seqs, and a new turn's seqs go on past them.

The loop stops by itself after `--duration` seconds (and `--max-calls`).
Printed: one row per sample, then RSS last sample / second sample (the first
sample is taken before any load). Target: at most 1.2.

    python bench/host_soak.py [--duration 600] [--every 30] [--concurrency 40] [--idle 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from coreagent_sdk import CallPeer, Peer, StaticDirectory
from coreagent_sdk.errors import CallPeerError

ROOT = Path(__file__).resolve().parent.parent
JSON = {"Content-Type": "application/json"}
FRAME = re.compile(rb"event: ([a-z-]+)\ndata: ([^\n]+)\n\n")
SWEEP = 60.0  # the host sweeps every max(idle / 4, 60 s)


def __getattr__(name: str) -> Any:
    # `bench.host_soak:HOST`, built in the host process from the environment this script sets.
    if name != "HOST":
        raise AttributeError(name)
    from coreagent_sdk.host import AgentHost, Turn

    async def echo(turn: Turn) -> None:
        await turn.say(turn.prompt)

    return AgentHost(
        "soak",
        behavior=echo,
        session_rate_limit=None,
        session_idle_timeout=float(os.environ["SOAK_IDLE"]),
        store=os.environ["SOAK_STORE"],
    )


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def stored(store: Path) -> int:
    """Sessions in the host's store (read by this process; WAL lets it read alongside)."""
    with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        return int(db.execute("SELECT count(*) FROM sessions").fetchone()[0])


async def turn_frames(
    http: httpx.AsyncClient, path: str, message: str
) -> list[tuple[str, dict[str, Any]]]:
    """The frames of `path`'s stream from seq 0, then of one turn on it (bounded: 20 s)."""

    async def read() -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        buf = b""
        async with http.stream("GET", f"{path}/events?since=0") as response:
            if response.status_code != 200:
                raise RuntimeError(f"events answered {response.status_code}")
            injected = False
            async for chunk in response.aiter_bytes():
                buf += chunk
                for event, data in FRAME.findall(buf):
                    out.append((event.decode(), json.loads(data)))
                    if not injected:
                        injected = True
                        sent = await http.post(
                            f"{path}/inject", headers=JSON, json={"message": message}
                        )
                        if sent.status_code != 200:
                            raise RuntimeError(f"inject answered {sent.status_code}")
                    if out[-1][0] == "usage-update" and "last_turn" in out[-1][1]:
                        return out
                buf = buf[buf.rfind(b"\n\n") + 2 :]
        return out

    return await asyncio.wait_for(read(), 20)


def said(frames: list[tuple[str, dict[str, Any]]]) -> list[tuple[int, str]]:
    return [
        (p["seq"], p["event"]["Content"]["parts"][0]["text"]) for e, p in frames if e == "agent"
    ]


def exchanged(events: list[tuple[int, str]], prompt: str) -> bool:
    """The user's event then the echo's answer. The user's event holds the ask as the
    daemon's WakeLoop frames even one drained message: an `[Inbox]` bundle."""
    texts = [text for _, text in events]
    return len(texts) == 2 and texts[0].startswith(f"[Inbox]\n- {prompt}\n") and texts[1] == prompt


class Soak:
    def __init__(self, url: str, concurrency: int, max_calls: int, timeout: float) -> None:
        self.url = url
        self.concurrency = concurrency
        self.max_calls = max_calls
        self.tool = CallPeer(StaticDirectory([Peer("soak", url)]), timeout=timeout)
        self.outcomes: Counter[str] = Counter()
        self.calls = 0
        # (when, session id, prompt) of answered calls, oldest first; trimmed as checked.
        self.made: list[tuple[float, str, str]] = []
        self.resumed_ok = 0
        self.resumed_bad: list[str] = []
        # Replayed its history, then was evicted again before the new turn (a sweep tick
        # landed between the stream opening and the inject, idle 2 s on a loaded machine).
        self.evicted_again = 0

    async def worker(self, stop_at: float) -> None:
        while time.monotonic() < stop_at and self.calls < self.max_calls:
            self.calls += 1
            prompt = f"call {self.calls}"
            try:
                result = await self.tool.acall(peer="soak", prompt=prompt)
            except CallPeerError as exc:
                self.outcomes[type(exc).__name__] += 1
                continue
            self.outcomes["answered" if result.response == prompt else "wrong answer"] += 1
            if len(self.made) < 10_000:  # bounded: a sample checks a few of the oldest
                self.made.append((time.monotonic(), result.session_id, prompt))

    async def check_resumed(self, http: httpx.AsyncClient, count: int) -> None:
        """Sessions made over a sweep ago (so evicted) answer with their history."""
        old = time.monotonic() - SWEEP - 5
        due = [m for m in self.made if m[0] < old][:count]
        self.made = [m for m in self.made if m not in due]
        for _, sid, prompt in due:
            path = f"/sessions/core-agent/{sid}"
            try:
                got = said(await turn_frames(http, path, "are you back?"))
            except (RuntimeError, httpx.HTTPError, asyncio.TimeoutError) as exc:
                self.resumed_bad.append(f"{sid}: {exc!r}")
                continue
            history, turn = got[:2], got[2:]
            if exchanged(history, prompt) and not turn:
                self.evicted_again += 1
            elif (
                exchanged(history, prompt)
                and exchanged(turn, "are you back?")
                and turn[0][0] > history[-1][0]
            ):
                self.resumed_ok += 1
            else:
                self.resumed_bad.append(f"{sid}: {got!r}")


async def evicted_memory(sessions: int) -> tuple[float, float]:
    """Python memory an in-process host holds for its sessions: (live, after eviction), KiB.

    Each session has had one turn; eviction runs on a fake clock. Measured with
    tracemalloc after a collection (SQLite's own page cache, a few MiB at most,
    is not Python memory and not counted).
    """
    from coreagent_sdk import ASGITransport, FakeClock
    from coreagent_sdk.host import AgentHost, Turn

    async def echo(turn: Turn) -> None:
        await turn.say(turn.prompt)

    clock = FakeClock()
    host = AgentHost(
        "mem", behavior=echo, clock=clock, session_idle_timeout=60, session_rate_limit=None
    )
    transport = ASGITransport(host.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://mem.test") as http:
        await http.get("/sessions")  # opens the host, starts its sweeper
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for n in range(sessions):
            sid = (await http.post("/sessions", headers=JSON)).json()["sessionID"]
            body = {"message": f"message {n} " + "x" * 200}
            await http.post(f"/sessions/{sid}/inject", headers=JSON, json=body)
        for _ in range(10_000):  # bounded: the turns finish within a few loop turns each
            if not host.busy():
                break
            await asyncio.sleep(0)
        gc.collect()
        live = tracemalloc.get_traced_memory()[0] - base
        await clock.until_sleeping()
        clock.advance(120)
        for _ in range(10_000):  # bounded: the sweep evicts them all, then its task ends
            if list(host.sessions) == ["default"]:
                break
            await asyncio.sleep(0)
        assert list(host.sessions) == ["default"], f"{len(host.sessions)} sessions left in memory"
        await host.store.get("-")  # every eviction's write is done once a later read is
        gc.collect()
        after = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
    await host.aclose()
    return live / 1024, after / 1024


def start_host(idle: float, store: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "SOAK_IDLE": str(idle), "SOAK_STORE": str(store)}
    argv = [sys.executable, "-m", "coreagent_sdk.host", "bench.host_soak:HOST", "--port", "0"]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)


async def stop_host(proc: subprocess.Popen[str]) -> int:
    """SIGTERM the host (if it still runs) and wait up to 15 s for its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    code = await asyncio.wait_for(asyncio.to_thread(proc.wait), 15)
    if proc.stdout is not None:
        proc.stdout.close()
    return code


async def main(
    duration: float, every: float, concurrency: int, idle: float, max_calls: int, timeout: float
) -> None:
    for sessions in (500, 2_000):  # what eviction leaves must not grow with the sessions
        live, after = await evicted_memory(sessions)
        print(
            f"in-process, {sessions:,} sessions of one turn each: Python memory held "
            f"{live:,.0f} KiB in memory, {after:,.0f} KiB once evicted to the store"
        )
    folder = tempfile.mkdtemp(prefix="host-soak-")
    store = Path(folder) / "sessions.sqlite3"
    proc = start_host(idle, store)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        url = json.loads(line)["url"]
        soak = Soak(url, concurrency, max_calls, timeout)
        print(
            f"host soak: {concurrency} calls in flight for {duration:g} s against a host "
            f"process (echo agent, idle eviction {idle:g} s, sweep every "
            f"{max(idle / 4, SWEEP):g} s, store {store.name})"
        )
        print(
            "| elapsed s |    calls | timed out | host RSS MiB | stored sessions "
            "| resumed ok / bad | new session ms |"
        )
        print(
            "|----------:|---------:|----------:|-------------:|----------------:"
            "|-----------------:|---------------:|"
        )
        started = time.monotonic()
        stop_at = started + duration
        samples: list[float] = []
        # Idle 30 s between samples: no kept-alive connection the server has closed meanwhile.
        limits = httpx.Limits(keepalive_expiry=1)
        async with httpx.AsyncClient(base_url=url, timeout=20, limits=limits) as http:

            async def sample() -> None:
                await soak.check_resumed(http, 3)
                samples.append(rss_mib(proc.pid))
                # Does the host still open sessions quickly, whatever the calls see?
                probe = time.monotonic()
                try:
                    made = await http.post("/sessions", headers=JSON)
                    ms = (time.monotonic() - probe) * 1000
                    took = f"{ms:.0f}" if made.status_code == 201 else str(made.status_code)
                except httpx.HTTPError as exc:
                    took = type(exc).__name__
                print(
                    f"| {time.monotonic() - started:9.0f} | {soak.calls:8d} | "
                    f"{soak.outcomes['PeerTimeoutError']:9d} | "
                    f"{samples[-1]:12.1f} | {stored(store):15d} | "
                    f"{soak.resumed_ok:7d} / {len(soak.resumed_bad):<6d} | {took:>14} |",
                    flush=True,
                )

            await sample()
            workers = [asyncio.create_task(soak.worker(stop_at)) for _ in range(concurrency)]
            try:
                for n in itertools.count(1):  # bounded: the workers stop at stop_at
                    pending = [w for w in workers if not w.done()]
                    if not pending:
                        break
                    wait = max(0.0, started + every * n - time.monotonic())
                    await asyncio.wait(pending, timeout=wait)
                    await sample()
            finally:
                for worker in workers:
                    worker.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
                await soak.tool.aclose()
    finally:
        code = await stop_host(proc)
    calls_per_s = soak.calls / max(duration, 1e-9)
    print(f"outcomes: {dict(sorted(soak.outcomes.items()))} ({calls_per_s:.0f} calls/s)")
    print(f"host exited {code}; store {store.stat().st_size / 2**20:.1f} MiB on disk")
    for bad in soak.resumed_bad[:5]:
        print(f"resumed without its history: {bad[:300]}")
    if len(samples) >= 3:
        print(
            f"host RSS last / second sample: x{samples[-1] / samples[1]:.2f} "
            f"({samples[1]:.1f} -> {samples[-1]:.1f} MiB; target at most 1.2); "
            f"resumed sessions that answered with their history: {soak.resumed_ok} of "
            f"{soak.resumed_ok + len(soak.resumed_bad) + soak.evicted_again} "
            f"({soak.evicted_again} replayed it and were evicted again before the new turn)"
        )
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    os.rmdir(folder)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--concurrency", type=int, default=40, help="calls in flight")
    parser.add_argument("--idle", type=float, default=2.0, help="session idle timeout, seconds")
    parser.add_argument("--max-calls", type=int, default=10_000_000, help="stop after this many")
    parser.add_argument("--timeout", type=float, default=10.0, help="CallPeer's, seconds")
    args = parser.parse_args()
    asyncio.run(
        main(args.duration, args.every, args.concurrency, args.idle, args.max_calls, args.timeout)
    )
