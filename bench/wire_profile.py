"""Where a contender of bench/wire_speed.py spends its CPU, server and caller, by py-spy.

The same processes as the comparison (server pinned to core 0, caller to
core 1), each sampled by py-spy for the timed part; prints, per side, the
share of samples in each package (inclusive: any frame of it on the stack)
and the functions most often on top of the stack.

    pip install -e '.[contenders]'   # py-spy; root, or ptrace allowed
    python bench/wire_profile.py [coreagent] [--level 200] [--seconds 10]

Every loop is bounded by a count and a time; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from wire_speed import CLIENT_CORE, CONTENDERS, SERVER_CORE, SERVERS

HERE = Path(__file__).resolve().parent
PACKAGES = (
    "coreagent_sdk",
    "httpcore",
    "httpx",
    "h11",
    "uvicorn",
    "starlette",
    "anyio",
    "asyncio",
    "json",
    "opentelemetry",
    "sqlite3",
    "a2a",
    "mcp",
)


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("wire_profile: py-spy is not installed: pip install -e '.[contenders]'")
    return found


def _package(frame: str) -> str | None:
    # A raw py-spy frame: "function (path/to/module.py:line)".
    path = "/" + frame.rsplit("(", 1)[-1]
    for package in PACKAGES:
        if f"/{package}/" in path or f"/{package}.py" in path:
            return package
    return None


def summarize(raw: Path, title: str, top: int) -> None:
    by_package: collections.Counter[str] = collections.Counter()
    on_top: collections.Counter[str] = collections.Counter()
    total = idle = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        if "select (" in frames[-1] and "selectors.py" in frames[-1]:
            idle += n  # the loop waiting for the network: not work
            continue
        if any("<frozen importlib" in frame for frame in frames):
            continue  # importing modules at start-up: not a delegation's work
        total += n
        for package in {p for p in map(_package, frames) if p is not None}:
            by_package[package] += n
        leaf = frames[-1]
        on_top[leaf.split(" (")[0] + " (" + leaf.rsplit("/", 1)[-1].rstrip(")") + ")"] += n
    share = 100 * idle / max(1, idle + total)
    print(f"\n{title}: {total} busy samples ({share:.0f}% more waiting in select)")
    print("  inclusive share by package:")
    for package, n in by_package.most_common():
        print(f"    {package:<14} {100 * n / max(1, total):5.1f}%")
    print(f"  top {top} functions on top of the stack:")
    for name, n in on_top.most_common(top):
        print(f"    {100 * n / max(1, total):5.1f}%  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender", nargs="?", default="coreagent", choices=CONTENDERS)
    parser.add_argument("--level", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    spy = _py_spy()
    out = Path(tempfile.mkdtemp(prefix="wire-profile-"))
    script = str(HERE / "wire_speed.py")
    server = subprocess.Popen(
        ["taskset", "-c", SERVER_CORE, sys.executable, script, "serve", SERVERS[args.contender]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = json.loads(server.stdout.readline())
        record = [
            spy,
            "record",
            "-p",
            str(server.pid),
            "-f",
            "raw",
            "-r",
            "200",
            "--full-filenames",
        ]
        server_spy = subprocess.Popen(
            [*record, "-o", str(out / "server.txt"), "--nonblocking"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        drive = [
            "taskset", "-c", CLIENT_CORE, spy, "record", "-f", "raw", "-r", "200",
            "--full-filenames", "-o",
            str(out / "client.txt"), "--nonblocking", "--", sys.executable, script, "drive",
            args.contender, url, str(args.level), str(args.seconds),
        ]  # fmt: skip
        result = subprocess.run(
            drive, capture_output=True, text=True, timeout=args.seconds + 300, check=True
        )
        # py-spy writes lines of its own around the caller's one line of JSON.
        got = json.loads(next(x for x in result.stdout.splitlines() if x.startswith("{")))
        server_spy.send_signal(2)  # SIGINT: py-spy writes what it has
        server_spy.wait(30)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(15)
    print(
        f"{args.contender} at {args.level} in flight for {args.seconds:g} s: "
        f"{got['rate']:.0f}/s (sampling slows both sides), load average "
        + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    summarize(out / "server.txt", "server", args.top)
    summarize(out / "client.txt", "caller", args.top)
    print(f"\nraw stacks (flamegraph.pl or speedscope read them): {out}")


if __name__ == "__main__":
    main()
