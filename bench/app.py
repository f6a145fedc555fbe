"""CallPeer inside a web service: the guide's ASGI app under 50 and 200 concurrent clients.

Three processes, all on 127.0.0.1: a fleet (`python -m simulator serve`, one
echo peer and its hub), the app (docs/guides/web-service.md's app under
uvicorn, plus one sync route calling the sync form from Starlette's thread
pool), and this one, the clients. For each number of concurrent clients it
measures, one after the other:

- ``awaited``: the baseline, `await tool.acall(...)` from N tasks in this
  process, no app in front;
- ``sync-threads``: the sync form, `tool(...)` from N threads in this process;
- ``app-async``: N clients POSTing to the app's async route (`await acall`);
- ``app-sync``: N clients POSTing to its sync route (`tool(...)` in a thread).

Each prints requests/s, p50 and p99 latency, the peak of open file
descriptors (this process's for the first two, the app's for the others) and
p50 against the awaited call's at the same concurrency. Every mode sends a
fixed number of requests (``--per-client`` each) and stops after
``--mode-timeout`` seconds in any case.

    python bench/app.py [--clients 50 200] [--per-client 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guides" / "web-service.md"
PEER = "peer-1"
LOCAL = {"trust_env": False}  # loopback only: no proxy from the environment

# The app module: the guide's code, and a sync route for the sync form in the thread pool.
SYNC_ROUTE = """

def ask_sync(request_body, tool):
    return tool(peer=request_body.get("peer", ""), prompt=request_body.get("prompt", ""))


async def ask_in_thread(request: Request) -> JSONResponse:
    from starlette.concurrency import run_in_threadpool

    body = await request.json()
    try:
        result = await run_in_threadpool(ask_sync, body, request.state.tool)
    except CallPeerError as exc:
        return failure(exc)
    return JSONResponse(result.to_dict())


app.router.routes.append(Route("/ask-sync", ask_in_thread, methods=["POST"]))
"""


def guide_app_source() -> str:
    found = re.search(r"<!-- web-service-app -->\n```python\n(.*?)```", GUIDE.read_text(), re.S)
    if found is None:
        raise SystemExit(f"bench: no app block in {GUIDE}")
    return found.group(1) + SYNC_ROUTE


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


@contextmanager
def process(args: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def wait_for(url: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1, **LOCAL)  # type: ignore[arg-type]
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"bench: {url} did not come up in {seconds:g} s")


class FdPeak:
    """Samples a process's open file descriptors every 20 ms on a thread, keeps the peak."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = fds(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, fds(self.pid))

    def __enter__(self) -> FdPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


Row = dict[str, Any]


def row(
    mode: str, clients: int, latencies: list[float], errors: int, wall: float, peak: int
) -> Row:
    ordered = sorted(latencies) or [float("nan")]
    return {
        "mode": mode,
        "clients": clients,
        "ok": len(latencies),
        "errors": errors,
        "rps": len(latencies) / wall if wall else 0.0,
        "p50": statistics.median(ordered) * 1000,
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "fds": peak,
    }


async def by_tasks(clients: int, per: int, one: Callable[[int], Awaitable[None]], limit: float):
    latencies: list[float] = []
    errors = 0

    async def worker(i: int) -> None:
        nonlocal errors
        for _ in range(per):
            started = time.perf_counter()
            try:
                await one(i)
            except Exception:
                errors += 1
            else:
                latencies.append(time.perf_counter() - started)

    # One unmeasured call per client first: connections open, the app and the fleet warm up.
    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(clients))), limit)
    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(clients))), limit)
    return latencies, errors, time.perf_counter() - started


def by_threads(clients: int, per: int, one: Callable[[int], None], limit: float):
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    gate = threading.Barrier(clients + 1)  # the workers, and this thread to start the clock

    def worker(i: int) -> None:
        one(i)  # unmeasured: as by_tasks does
        gate.wait(timeout=limit)
        for _ in range(per):
            started = time.perf_counter()
            try:
                one(i)
            except Exception:
                with lock:
                    errors[0] += 1
            else:
                with lock:
                    latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    gate.wait(timeout=limit)
    started = time.perf_counter()
    for t in threads:
        t.join(timeout=limit)
    return latencies, errors[0], time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--per-client", type=int, default=5)
    parser.add_argument("--mode-timeout", type=float, default=120.0)
    args = parser.parse_args()
    # Stopped with SIGTERM, it still stops the fleet and the app it started (see process()).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    python = sys.executable
    rows: list[Row] = []
    with process([python, "-m", "simulator", "serve", "--peers", "1"]) as fleet:
        assert fleet.stdout is not None
        hub = json.loads(fleet.stdout.readline())["urls"]["hub"]
        env = {
            **os.environ,
            "COREAGENT_HUB_URL": hub,
            "COREAGENT_TIMEOUT": "60",
            "COREAGENT_DELETE_SESSIONS": "1",
            # The app must take every client at once: 200 calls need 400 connections.
            "COREAGENT_MAX_CONNECTIONS": str(2 * max(args.clients)),
        }
        os.environ.update({k: env[k] for k in env if k.startswith("COREAGENT_")})
        with tempfile.TemporaryDirectory() as where:
            Path(where, "webapp.py").write_text(guide_app_source())
            namespace: dict[str, Any] = {"__name__": "bench_webapp"}
            exec(compile(Path(where, "webapp.py").read_text(), "webapp.py", "exec"), namespace)
            tool = namespace["make_tool"]()
            port = free_port()
            app_cmd = [python, "-m", "uvicorn", "webapp:app", "--app-dir", where]
            app_cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
            with process(app_cmd, env=env) as app:
                base = f"http://127.0.0.1:{port}"
                wait_for(base + "/")
                for clients in args.clients:
                    rows += run_modes(tool, base, app.pid, clients, args)
            tool.close()
    print_rows(rows)
    return 0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_modes(tool: Any, base: str, app_pid: int, clients: int, args: Any) -> list[Row]:
    per, limit = args.per_client, args.mode_timeout
    body = {"peer": PEER, "prompt": "How is the cluster doing?"}
    out: list[Row] = []

    async def awaited() -> Row:
        async def one(i: int) -> None:
            await tool.acall(peer=PEER, prompt=body["prompt"])

        with FdPeak(os.getpid()) as peak:
            got = await by_tasks(clients, per, one, limit)
        await tool.aclose()
        return row("awaited", clients, *got, peak.peak)

    out.append(asyncio.run(awaited()))

    def sync_one(i: int) -> None:
        tool(peer=PEER, prompt=body["prompt"])

    with FdPeak(os.getpid()) as peak:
        got = by_threads(clients, per, sync_one, limit)
    out.append(row("sync-threads", clients, *got, peak.peak))

    for mode, path in (("app-async", "/ask"), ("app-sync", "/ask-sync")):

        async def through_app(path: str = path) -> tuple[list[float], int, float]:
            limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
            async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60, **LOCAL) as c:

                async def one(i: int) -> None:
                    got = await c.post(path, json=body)
                    if got.status_code != 200:
                        raise RuntimeError(got.status_code)

                return await by_tasks(clients, per, one, limit)

        with FdPeak(app_pid) as peak:
            got = asyncio.run(through_app())
        out.append(row(mode, clients, *got, peak.peak))
    return out


def print_rows(rows: list[Row]) -> None:
    baseline = {r["clients"]: r["p50"] for r in rows if r["mode"] == "awaited"}
    print(
        f"{'mode':<13} {'clients':>7} {'ok':>5} {'err':>4} {'req/s':>8} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'fds':>5} {'p50 vs awaited':>15}"
    )
    for r in rows:
        ratio = r["p50"] / baseline[r["clients"]] if baseline.get(r["clients"]) else float("nan")
        print(
            f"{r['mode']:<13} {r['clients']:>7} {r['ok']:>5} {r['errors']:>4} {r['rps']:>8.1f} "
            f"{r['p50']:>8.1f} {r['p99']:>8.1f} {r['fds']:>5} {ratio:>14.2f}x"
        )


if __name__ == "__main__":
    sys.exit(main())
