"""What durability costs: `CallPeer` against a host whose store is its event log.

Two hosts serve the same echo agent on 127.0.0.1, each in a process of its own
with a store file of its own: this checkout's (every event written, and a
session's row, before a frame or a 201 leaves) and the host as it was before
that change (`--baseline`, a git revision of this repository, extracted to a
temporary folder with `git archive`; it wrote each session's events after its
turn). One `CallPeer` in this process calls both, at 1 and at 200 calls in
flight, rounds alternating (and which host goes first alternating too), so
drift on a shared machine hits both alike. Printed per side: the fastest
round's ms per call and the median round's, their ratios (the change against
the baseline), and the median of each round's ratio (the two sides of a round
ran back to back, so that one shares the moment's load).

    python bench/host_store.py [--baseline REV] [--calls 200] [--rounds 5]

A third side, `--sync full`, runs this checkout with `store_sync="full"` (a
disk sync per commit) as well. Every loop is bounded by a count and a time;
nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from coreagent_sdk import CallPeer, Peer, StaticDirectory

REPO = Path(__file__).resolve().parent.parent
BASELINE = "37bc7d6"  # main just before the store became the event log landed
PROMPT = "How is the cluster doing?"
# Served by each side's own coreagent_sdk (what PYTHONPATH names), its store from the env.
PEER = """
import asyncio, json, os, sys
import coreagent_sdk.host
from coreagent_sdk.host import AgentHost

async def echo(turn):
    await turn.say(turn.prompt)

options = {"store_sync": os.environ["SYNC"]} if os.environ.get("SYNC") else {}
host = AgentHost("peer", behavior=echo, store=os.environ["STORE"], session_rate_limit=None,
                 **options)
code = coreagent_sdk.host.__file__

def ready(url):
    print(json.dumps({"url": url, "code": code}), flush=True)

asyncio.run(host.serve(on_ready=ready))
"""


def extract(rev: str, into: Path) -> Path:
    """The package as it was at `rev`, in a folder of its own."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, "coreagent_sdk"],
        check=True,
        capture_output=True,
    ).stdout
    tar = into / "old.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into / "old", filter="data")
    return into / "old"


async def start(code_root: Path, store: Path, sync: str = "") -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(code_root), "STORE": str(store), "SYNC": sync}
    proc = subprocess.Popen(  # noqa: ASYNC220 - once per side, before anything is timed
        [sys.executable, "-c", PEER],
        env=env,
        cwd=code_root,  # `-c` puts the working directory first on sys.path: this side's code
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        ready = json.loads(line)
        assert ready["code"].startswith(str(code_root)), f"{code_root} served {ready['code']}"
    except BaseException:  # not left running when it cannot be used
        proc.kill()
        proc.wait(5)
        proc.stdout.close()
        raise
    return proc, ready["url"]


async def per_call(tool: CallPeer, peer: str, calls: int, in_flight: int) -> float:
    """Seconds per call of `calls` calls, at most `in_flight` at once."""
    gate = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with gate:
            result = await tool.acall(peer=peer, prompt=PROMPT)
            assert result.response == PROMPT, result.response

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(calls)))
    return (time.perf_counter() - started) / calls


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the old host")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sync", choices=["normal", "full"], default="normal")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        old_root = extract(args.baseline, tmp)
        sides = {"before": (old_root, "")}
        sides["store"] = (REPO, "")
        if args.sync == "full":
            sides["store, full"] = (REPO, "full")
        procs, peers = [], []
        try:
            for name, (root, sync) in sides.items():
                proc, url = await start(root, tmp / f"{name}.sqlite3".replace(" ", ""), sync)
                procs.append(proc)
                peers.append(Peer(name, url))
            tool = CallPeer(StaticDirectory(peers), timeout=120)
            load = os.getloadavg()[0]
            print(f"baseline {args.baseline}; {args.calls} calls a round, {args.rounds} rounds")
            print(
                "| in flight | side | ms/call (fastest) | ms/call (median) | vs before "
                "(fastest; medians) | vs before, paired rounds (median) |"
            )
            print("|---:|---|---:|---:|---:|---:|")
            for in_flight in (1, 200):
                times: dict[str, list[float]] = {p.name: [] for p in peers}
                await per_call(tool, peers[0].name, 20, min(in_flight, 20))  # warm both up
                await per_call(tool, peers[1].name, 20, min(in_flight, 20))
                for r in range(args.rounds):
                    order = peers if r % 2 == 0 else peers[::-1]
                    for peer in order:
                        times[peer.name].append(
                            await per_call(tool, peer.name, args.calls, in_flight)
                        )
                base = times["before"]
                for name, got in times.items():
                    fast = min(got) / min(base)
                    median = statistics.median(got) / statistics.median(base)
                    # Each round's two sides ran back to back: their ratio shares the load of
                    # that moment, steadier on a shared machine than ratios of extremes.
                    paired = statistics.median(g / b for g, b in zip(got, base, strict=True))
                    print(
                        f"| {in_flight} | {name} | {min(got) * 1000:.2f} | "
                        f"{statistics.median(got) * 1000:.2f} | {fast:.2f}x; {median:.2f}x | "
                        f"{paired:.2f}x |"
                    )
            print(f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
            await tool.aclose()
        finally:
            for proc in procs:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
                if proc.stdout is not None:
                    proc.stdout.close()


if __name__ == "__main__":
    asyncio.run(main())
