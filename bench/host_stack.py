"""The served host's per-delegation cost, one way of serving it against another, in one run.

The wire-speed bench's coreagent contender (bench/wire_speed.py: `CallPeer` ->
`AgentHost.serve()`, three streamed chunks and an answer, the host pinned to
core 0 and the caller to core 1), with the host served several ways side by
side, so a change to the host's stack is measured against a baseline in the
same run:

- before: the host from another checkout (``--code DIR``, e.g. main before
  the change, extracted with ``git archive``)
- h11: this checkout on uvicorn's h11 parser (what a host without httptools gets)
- httptools: this checkout as `AgentHost.serve()` serves it where httptools is
  installed (the `host` extra)
- uvloop: the same on uvloop's event loop
- frozen, uvloop-frozen: what the process loaded before serving frozen out of the
  garbage collector (`gc.freeze()`), on asyncio's loop or uvloop's

Rounds are interleaved (every variant at one level, then the next level, then
the next round); each cell is best and median of the rounds, the ratio is the
median of each round's rate over the first variant's rate in that round, and
CPU is each process's own (user + system) per delegation over the timed part.

    pip install -e '.[host]' uvloop
    python bench/host_stack.py [--variants h11 httptools uvloop] [--code DIR] \\
        [--levels 10 200] [--rounds 3] [--seconds 5]

Every loop is bounded by a count and a time; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from wire_speed import (
    CLIENT_CORE,
    DEADLINE,
    SERVER_CORE,
    _cpu_of,
    _load,
    _rss_mib,
    serve_coreagent,
    stop_servers,
)

VARIANTS = ("before", "h11", "httptools", "uvloop", "frozen", "uvloop-frozen")
WIRE_SPEED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire_speed.py")


def serve(variant: str) -> None:
    """The wire-speed host, served as `variant` says (in this process, until stdin closes)."""
    if variant == "h11":
        from coreagent_sdk.host import _limits

        _limits._http_protocol = lambda: _limits.GoHeaderLimits  # type: ignore[assignment]
    if variant.endswith("frozen"):
        import coreagent_sdk.host  # noqa: F401 (what a host process has loaded before serving)

        gc.collect()
        gc.freeze()
    if variant.startswith("uvloop"):
        import uvloop

        uvloop.run(serve_coreagent())
        return
    asyncio.run(serve_coreagent())


def compare(args: argparse.Namespace) -> None:
    variants = list(args.variants)
    if args.code and "before" not in variants:
        variants.insert(0, "before")
    if "before" in variants and not args.code:
        raise SystemExit("host_stack: the 'before' variant needs --code DIR (another checkout)")
    servers: dict[str, tuple[subprocess.Popen[str], str, float]] = {}
    try:
        for variant in variants:
            env = dict(os.environ)
            if variant == "before":
                env["PYTHONPATH"] = os.path.abspath(args.code)
            proc = subprocess.Popen(
                ["taskset", "-c", SERVER_CORE, sys.executable, __file__, "--serve", variant],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            servers[variant] = (proc, "", 0.0)
            assert proc.stdout is not None
            servers[variant] = (proc, json.loads(proc.stdout.readline()), _rss_mib(proc.pid))
        print(f"load average at the start: {_load()}; {args.rounds} rounds of {args.seconds:g} s")
        results: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for round_ in range(args.rounds):
            for level in args.levels:
                for variant in variants:
                    proc, url, _ = servers[variant]
                    before = _cpu_of(proc.pid)
                    out = subprocess.run(
                        ["taskset", "-c", CLIENT_CORE, sys.executable, WIRE_SPEED,
                         "drive", "coreagent", url, str(level), str(args.seconds)],
                        capture_output=True, text=True, check=True,
                        timeout=args.seconds + 4 * DEADLINE,
                    ).stdout  # fmt: skip
                    got = json.loads(out.strip().splitlines()[-1])
                    got["server_cpu"] = _cpu_of(proc.pid) - before
                    results.setdefault((variant, level), []).append(got)
                    print(
                        f"  round {round_ + 1} {variant:>10} @{level:<4} {got['rate']:7.0f}/s  "
                        f"server {1000 * got['server_cpu'] / max(1, got['done']):.2f} ms  "
                        f"failed {sum(got['failures'].values())}  load {_load()}",
                        flush=True,
                    )
        rss = {v: (start, _rss_mib(proc.pid)) for v, (proc, _, start) in servers.items()}
    finally:
        stop_servers(proc for proc, _, _ in servers.values())
    print(f"\nload average at the end: {_load()}")
    _table(variants, args.levels, results, rss)


def _per(row: dict[str, Any]) -> float:
    """The server's CPU seconds per delegation of one drive."""
    return float(row["server_cpu"]) / max(1, row["done"])


def _table(
    variants: list[str],
    levels: list[int],
    results: dict[tuple[str, int], list[dict[str, Any]]],
    rss: dict[str, tuple[float, float]],
) -> None:
    base = variants[0]
    print(f"\nratios: the median over rounds of each round's rate (or CPU) over {base}'s\n")
    print("| host | in flight | rate best / median | x rate | server CPU ms/deleg | x server CPU "
          "| caller CPU ms/deleg | p99 ms (best round) | server RSS MiB | failed |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for level in levels:
        for variant in variants:
            rows = results[variant, level]
            rates = [r["rate"] for r in rows]
            server = [1000 * r["server_cpu"] / max(1, r["done"]) for r in rows]
            caller = [1000 * r["cpu"] / max(1, r["done"]) for r in rows]
            basis = results[base, level]
            x_rate = statistics.median(
                r["rate"] / max(1e-9, b["rate"]) for r, b in zip(rows, basis, strict=True)
            )
            x_cpu = statistics.median(
                _per(r) / max(1e-12, _per(b)) for r, b in zip(rows, basis, strict=True)
            )
            best = max(rows, key=lambda r: r["rate"])
            failed = sum(sum(r["failures"].values()) for r in rows)
            start, end = rss[variant]
            print(
                f"| {variant} | {level} | {max(rates):.0f} / {statistics.median(rates):.0f} | "
                f"{x_rate:.2f} | {statistics.median(server):.2f} | {x_cpu:.2f} | "
                f"{statistics.median(caller):.2f} | {best['p99'] * 1000:.0f} | "
                f"{start:.0f} -> {end:.0f} | {failed} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["h11", "httptools"])
    parser.add_argument("--code", help="a checkout to serve the 'before' variant from")
    parser.add_argument("--levels", type=int, nargs="+", default=[10, 200])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
    else:
        compare(args)


if __name__ == "__main__":
    main()
