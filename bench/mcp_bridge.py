"""A fleet agent called through our MCP server, against CallPeer calling it directly.

The fleet (a hub and one echo peer) is served on loopback sockets in this process. The
direct side is a `CallPeer` over the hub (`HubDirectory`), as an app delegates. The MCP
side is what an MCP host does: `python -m coreagent_sdk.mcp --hub URL` started as a
process of its own and called by the official MCP SDK's stdio client (`tools/call` on the
peer's tool), which makes the same `CallPeer` call inside that process. Both sides make the
same number of calls at 1 and at 50 in flight; the sides alternate round by round, so drift
on a shared machine hits both alike, and the best round of each is compared. Besides wall
time, each side's CPU per call is counted (this process's, plus the server process's for
the MCP side, from /proc), which a busy machine's waits do not inflate.

    python bench/mcp_bridge.py [--calls 200] [--rounds 3] [--in-process]

Every loop is bounded by its count; the server process is ended (stdin closed) at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

from mcp import Client, StdioServerParameters

from coreagent_sdk import CallPeer, HubDirectory
from simulator import Fleet, behaviors

PROMPT = "How is the cluster doing?"


def cpu_of(pid: int | None) -> float:
    """CPU seconds (user + system) of process `pid` so far; 0 for None."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_named(mark: str) -> int:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if mark.encode() in cmdline.read() and int(entry) != os.getpid():
                        return int(entry)
            except OSError:
                continue
    raise RuntimeError(f"mcp_bridge: no process named {mark}")


async def timed(
    call: Callable[[], Awaitable[object]], calls: int, in_flight: int, server: int | None
) -> tuple[float, float]:
    """(wall seconds, CPU seconds) for `calls` calls, `in_flight` at a time."""
    left = iter(range(calls))

    async def worker() -> None:
        for _ in left:
            await call()

    cpu = time.process_time() + cpu_of(server)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    wall = time.perf_counter() - started
    return wall, time.process_time() + cpu_of(server) - cpu


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def main(calls: int, rounds: int) -> None:
    mark = f"mcp-bridge-{uuid.uuid4().hex[:12]}"
    fleet = Fleet(session_idle_timeout=30)
    fleet.add_peer("ops", behaviors.echo(), session_rate_limit=None)
    served = await fleet.serve()
    # As the served side's CallPeer (the command line's): sessions kept, not deleted.
    direct = CallPeer(HubDirectory(served.hub_url))
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "coreagent_sdk.mcp",
            "--hub",
            served.hub_url,
            "--poll-interval",
            "3600",
            "--name",
            mark,
        ],
    )
    try:
        async with Client(params, mode="legacy") as client:
            (tool,) = (await client.list_tools()).tools
            server = pid_named(mark)

            async def via_mcp() -> None:
                result = await client.call_tool(tool.name, {"request": PROMPT})
                if result.is_error or result.content[0].text != PROMPT:
                    raise RuntimeError(f"mcp_bridge: the MCP side answered {result!r}")

            async def via_call_peer() -> None:
                result = await direct.acall("ops", PROMPT)
                if result.response != PROMPT:
                    raise RuntimeError(f"mcp_bridge: CallPeer answered {result!r}")

            for side, pid in ((via_call_peer, None), (via_mcp, server)):  # warm both
                await timed(side, 20, 5, pid)
            print(f"load before: {load()}  ({calls} calls a round, best of {rounds} rounds)")
            print(
                "| in flight | CallPeer ms/call | MCP ms/call | wall MCP / CallPeer "
                "| CPU ms/call CallPeer | CPU ms/call MCP | CPU MCP / CallPeer |"
            )
            print("|---|---|---|---|---|---|---|")
            for in_flight in (1, 50):
                wall = {"direct": float("inf"), "mcp": float("inf")}
                cpu = dict(wall)
                for _ in range(rounds):
                    for key, side, pid in (
                        ("direct", via_call_peer, None),
                        ("mcp", via_mcp, server),
                    ):
                        took, used = await timed(side, calls, in_flight, pid)
                        wall[key], cpu[key] = min(wall[key], took), min(cpu[key], used)
                d, m = (wall[k] / calls * 1000 for k in ("direct", "mcp"))
                cd, cm = (cpu[k] / calls * 1000 for k in ("direct", "mcp"))
                print(
                    f"| {in_flight} | {d:.2f} | {m:.2f} | {m / d:.2f}x "
                    f"| {cd:.2f} | {cm:.2f} | {cm / cd:.2f}x |"
                )
            print(f"load after: {load()}")
    finally:
        await direct.aclose()
        await served.aclose()
        await fleet.aclose()


async def in_process(calls: int, rounds: int) -> None:
    """The MCP SDK's `Client` on our server in memory (no pipes, no JSON on a wire), against
    the same server's `CallPeer` called directly: what the SDK's client and server layers cost
    per call by themselves, in CPU (one process, so `process_time` counts both sides)."""
    from coreagent_sdk.mcp import AgentMCPServer

    async with (
        AgentMCPServer(behaviors.echo(), name="ops") as served,
        Client(served.server, mode="legacy") as client,
    ):
        direct = served.call_peer
        for _ in range(20):  # warm both
            await client.call_tool("ops", {"request": PROMPT})
            await direct.acall("ops", PROMPT)
        best = {"mcp": float("inf"), "direct": float("inf")}
        for _ in range(rounds):
            for key in ("direct", "mcp"):
                started = time.process_time()
                for _ in range(calls):
                    if key == "mcp":
                        await client.call_tool("ops", {"request": PROMPT})
                    else:
                        await direct.acall("ops", PROMPT)
                best[key] = min(best[key], (time.process_time() - started) / calls)
    print(
        f"in process, load {load()}: CPU us/call CallPeer {best['direct'] * 1e6:.0f}, "
        f"MCP SDK client on our server {best['mcp'] * 1e6:.0f}, "
        f"ratio {best['mcp'] / best['direct']:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--in-process", action="store_true", help="also the SDK's client on our server in memory"
    )
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
    if args.in_process:
        asyncio.run(in_process(args.calls, args.rounds))
