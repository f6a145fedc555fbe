"""Load a host for minutes: does its memory level off while busy sessions' logs grow?

A host process (`python -m coreagent_sdk.host bench.host_soak:HOST`: echo agent,
session rate limit off, idle eviction at `--idle` seconds, a store file in a
temporary folder) on 127.0.0.1. This process opens `--sessions` sessions and
`--subscribers` event streams spread over them, reading all along (a stream
that ends is opened again with `?since=` its last seq), and runs one injector
per session: it injects, waits for its turn's `turn-complete` on its own
stream, and injects again. Each session's log grows the whole run: a host that
kept logs in memory grew in a straight line here (42 to 79 MiB in 2 minutes).

Every `--every` seconds the host process's resident memory (VmRSS) is sampled.
Printed: one row per sample (turns so far, frames read, host RSS), then RSS last
sample / second sample and the growth of the second half of the run against
its first (a level run grows little in its second half). Every loop is bounded
by `--duration` and stops by itself; nothing leaves 127.0.0.1.

    python bench/host_load.py [--duration 120] [--sessions 50] [--subscribers 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_soak import rss_mib, start_host, stop_host  # the bench folder is not a package: by path

JSON = {"Content-Type": "application/json"}
FRAME = re.compile(rb"event: ([a-z-]+)\ndata: ([^\n]+)\n\n")


class Load:
    def __init__(self, http: httpx.AsyncClient, stop_at: float) -> None:
        self.http = http
        self.stop_at = stop_at
        self.turns = 0
        self.frames = 0
        self.reopened = 0
        self.errors: dict[str, int] = {}
        self.done: dict[str, asyncio.Queue[None]] = {}  # session -> its turns' ends

    def _error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    async def subscriber(self, path: str, signals: bool) -> None:
        """Read `path`'s events until the run ends, opening the stream again if it ends."""
        since = None
        while time.monotonic() < self.stop_at:
            params = {"since": str(since)} if since is not None else None
            left = self.stop_at - time.monotonic()
            try:
                async with asyncio.timeout(max(left, 0.1)):
                    async with self.http.stream(
                        "GET", f"{path}/events", params=params, timeout=None
                    ) as response:
                        if response.status_code != 200:
                            self._error(f"events {response.status_code}")
                            await asyncio.sleep(0.5)
                            continue
                        buf = b""
                        async for chunk in response.aiter_bytes():
                            buf += chunk
                            for event, data in FRAME.findall(buf):
                                self.frames += 1
                                if event == b"agent":
                                    since = json.loads(data)["seq"]
                                elif event == b"turn-complete" and signals:
                                    self.done[path].put_nowait(None)
                            buf = buf[buf.rfind(b"\n\n") + 2 :]
            except TimeoutError:
                return
            except httpx.HTTPError as exc:
                self._error(type(exc).__name__)
                await asyncio.sleep(0.1)
            self.reopened += 1

    async def injector(self, path: str) -> None:
        done = self.done[path]
        n = 0
        while time.monotonic() < self.stop_at:
            n += 1
            try:
                sent = await self.http.post(
                    f"{path}/inject", headers=JSON, json={"message": f"turn {n} " + "x" * 200}
                )
            except httpx.HTTPError as exc:
                self._error(f"inject {type(exc).__name__}")
                await asyncio.sleep(0.1)
                continue
            if sent.status_code != 200:
                self._error(f"inject {sent.status_code}")
                await asyncio.sleep(0.1)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.get(), max(0.1, self.stop_at - time.monotonic()))
                self.turns += 1


async def main(args: argparse.Namespace) -> None:
    folder = tempfile.mkdtemp(prefix="host-load-")
    store = Path(folder) / "sessions.sqlite3"
    proc = start_host(args.idle, store)
    samples: list[tuple[float, float]] = []
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        url = json.loads(line)["url"]
        limits = httpx.Limits(max_connections=args.subscribers + args.sessions + 10)
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
            paths = []
            for _ in range(args.sessions):
                made = await http.post("/sessions", headers=JSON)
                made.raise_for_status()
                paths.append(f"/sessions/core-agent/{made.json()['sessionID']}")
            started = time.monotonic()
            load = Load(http, started + args.duration)
            for path in paths:
                load.done[path] = asyncio.Queue()
            tasks = [
                asyncio.create_task(load.subscriber(paths[i % len(paths)], i < len(paths)))
                for i in range(args.subscribers)
            ]
            await asyncio.sleep(1)  # the streams are open before the first turn
            tasks += [asyncio.create_task(load.injector(p)) for p in paths]
            print(
                f"host load: {args.sessions} sessions, {args.subscribers} subscribers, one "
                f"injector a session, {args.duration:g} s, idle eviction {args.idle:g} s; "
                f"load average {os.getloadavg()[0]:.1f}"
            )
            print("| elapsed s | turns | frames read | streams reopened | host RSS MiB |")
            print("|---:|---:|---:|---:|---:|")
            for n in range(1, 10_000):  # bounded: the tasks stop at stop_at
                pending = [t for t in tasks if not t.done()]
                if not pending:
                    break
                wait = max(0.0, started + args.every * n - time.monotonic())
                await asyncio.wait(pending, timeout=wait)
                samples.append((time.monotonic() - started, rss_mib(proc.pid)))
                print(
                    f"| {samples[-1][0]:.0f} | {load.turns:,} | {load.frames:,} | "
                    f"{load.reopened} | {samples[-1][1]:.1f} |",
                    flush=True,
                )
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        code = await stop_host(proc)
    print(f"host exited {code}; errors {load.errors or 'none'}; load {os.getloadavg()[0]:.1f}")
    if len(samples) >= 4:
        half = len(samples) // 2
        first = samples[half][1] - samples[1][1]
        second = samples[-1][1] - samples[half][1]
        print(
            f"host RSS last / second sample: x{samples[-1][1] / samples[1][1]:.2f} "
            f"({samples[1][1]:.1f} -> {samples[-1][1]:.1f} MiB); growth "
            f"{first:+.1f} MiB in the first half, {second:+.1f} MiB in the second"
        )
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--idle", type=float, default=2.0)
    asyncio.run(main(parser.parse_args()))
