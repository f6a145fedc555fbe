"""MCP tools in a fleet agent: what a call costs against the MCP SDK's own client, and
what 100 agents with a server each do to a bounded RuntimeCache.

calls: the same tool (`add`) of the same server script (tests/mcp_servers/toolbox.py), one
process each side, kept sessions, rounds interleaved:
- mcp-sdk: the SDK's own `stdio_client` + `ClientSession.call_tool`;
- agent-step: the tool step of a `ModelAgent` turn (scripted model) in a `Fleet`, as the
  turn's record times it (gate, our stdio framing, the SDK's session, the result cut and
  scrubbed);
- agent-dispatch: the agent's own dispatch of one call (gate, `McpToolset.call`, the
  result cut and scrubbed), no turn around it;
- turn-sdk-tool: a whole turn whose one tool is a Python function calling the tool through
  the SDK's own session (the baseline for the next row: same turn, same events);
- turn-mcp-tool: the same turn with the server's tool offered as an MCP tool of a skill.

evictions: 100 agents, one stdio server each, in a MultiAgentHost whose RuntimeCache holds
16; one turn at a time walks the agents round robin (CallPeer in process), so every turn
past the first 16 builds (starts a server) and evicts (stops one). The children alive are
counted right after every build and after every turn, and RSS sampled.

    python bench/mcp_tools.py calls [--calls 200] [--rounds 7]
    python bench/mcp_tools.py evictions [--leases 1016] [--budget 3600]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from coreagent_sdk import AgentBuilder, AgentConfig, BuilderConfig, RuntimeCache
from coreagent_sdk.host import ModelAgent
from coreagent_sdk.mcp import StdioServer
from coreagent_sdk.models import ScriptedModel, Skill, ToolCall, when
from simulator import Fleet

TOOLBOX = Path(__file__).resolve().parent.parent / "tests" / "mcp_servers" / "toolbox.py"


def server(name: str = "toolbox") -> StdioServer:
    return StdioServer(name, sys.executable, args=[str(TOOLBOX)], start_timeout=120)


def children() -> int:
    me = str(os.getpid())
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            count += stat.rsplit(")", 1)[1].split()[1] == me
    return count


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def sdk_calls(session: Any, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        result = await session.call_tool("add", {"a": 1, "b": 2})
        if result.structured_content != {"result": 3}:
            raise AssertionError(result)
    return (time.perf_counter() - started) / calls


async def agent_turns(fleet: Fleet, peer: str, calls: int) -> tuple[float, float]:
    """Per turn: the seconds of the whole turn, and of its tool step (0 when it has none)."""
    tool = fleet.call_peer(timeout=60)
    before = len(fleet.calls.records())
    started = time.perf_counter()
    for _ in range(calls):
        await tool.acall(peer=peer, prompt="go")
    took = (time.perf_counter() - started) / calls
    records = fleet.calls.records()[before:]
    steps = [s.duration_ms / 1000 for r in records for s in r.steps if s.kind == "tool"]
    await tool.aclose()
    return took, (sum(steps) / len(steps) if steps else 0.0)


async def calls_bench(calls: int, rounds: int) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    print(f"load average at start: {os.getloadavg()}; cpus: {os.cpu_count()}")
    calling = ModelAgent(
        ScriptedModel(when().call("toolbox_add", a=1, b=2)),
        skills=[Skill("box", mcp_servers=[server()])],
    )
    plain = ModelAgent(ScriptedModel(when().answer("3")), skills=[Skill("box")])
    fleet = Fleet()
    fleet.add_peer("calling", calling)
    fleet.add_peer("plain", plain)
    await calling.astart()
    params = StdioServerParameters(command=sys.executable, args=[str(TOOLBOX)])
    rows: dict[str, list[float]] = {
        "mcp-sdk": [],
        "agent-dispatch": [],
        "agent-step": [],
        "turn-sdk-tool": [],
        "turn-mcp-tool": [],
    }
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()

        async def sdk_add(a: int, b: int) -> Any:
            """Add two integers (through the SDK's own client)."""
            result = await session.call_tool("add", {"a": a, "b": b})
            return result.structured_content

        fleet.add_peer(
            "sdk-tool",
            ModelAgent(ScriptedModel(when().call("sdk_add", a=1, b=2)), tools=[sdk_add]),
        )
        call = ToolCall("c1", "toolbox_add", {"a": 1, "b": 2})

        async def dispatch(n: int) -> float:
            started = time.perf_counter()
            for _ in range(n):
                if await calling._run_tool(call) != {"result": 3}:
                    raise AssertionError("the agent's dispatch answered wrong")
            return (time.perf_counter() - started) / n

        await sdk_calls(session, 10)  # every side warm (jsonschema, first-call paths)
        await dispatch(10)
        for peer in ("calling", "plain", "sdk-tool"):
            await agent_turns(fleet, peer, 10)
        for _ in range(rounds):
            rows["mcp-sdk"].append(await sdk_calls(session, calls))
            rows["agent-dispatch"].append(await dispatch(calls))
            turn, step = await agent_turns(fleet, "calling", calls)
            rows["agent-step"].append(step)
            rows["turn-mcp-tool"].append(turn)
            rows["turn-sdk-tool"].append((await agent_turns(fleet, "sdk-tool", calls))[0])
    await fleet.aclose()
    base = statistics.median(rows["mcp-sdk"])
    turn_base = statistics.median(rows["turn-sdk-tool"])
    print(f"{calls} calls x {rounds} rounds, median of rounds (per call)")
    for name, values in rows.items():
        median = statistics.median(values)
        against = turn_base if name.startswith("turn") else base
        label = "turn-sdk-tool" if name.startswith("turn") else "mcp-sdk"
        print(f"  {name:<15} {median * 1e6:9.0f} us   {median / against:5.2f}x {label}")
    print(f"load average at end: {os.getloadavg()}")


class Loader:
    async def agent_slug(self, agent_id: str) -> str:
        return agent_id

    async def load_config(self, agent_id: str) -> AgentConfig:
        return AgentConfig(agent_id, agent_id, skills=("box",))


async def evictions_bench(leases: int, agents: int, bound: int, budget: float) -> None:
    from coreagent_sdk import ASGITransport, CallPeer, Peer, RoutingTransport, StaticDirectory
    from coreagent_sdk.host import MultiAgentHost, Turn

    print(f"load average at start: {os.getloadavg()}; cpus: {os.cpu_count()}", flush=True)
    skills = {"box": Skill("box", mcp_servers=[server()])}
    builder = AgentBuilder(
        BuilderConfig(
            factory=lambda spec: ModelAgent.from_spec(spec, ScriptedModel(when().answer("ok"))),
            skill_catalog=skills,
        )
    )
    most_at_build = 0

    def on_event(event: Any) -> None:
        # Right after a build is the moment the most servers are alive: count them then.
        nonlocal most_at_build
        if event.kind == "built":
            most_at_build = max(most_at_build, children())

    cache = RuntimeCache(Loader(), builder, max_instances=bound, on_event=on_event)

    async def turn_of(turn: Turn) -> None:
        status = turn.runtime.mcp_status
        await turn.say("ok" if status and status[0].ok else f"not started: {status}")

    names = [f"agent-{i}" for i in range(agents)]
    host = MultiAgentHost(runtimes=cache, behavior=turn_of, session_rate_limit=None)
    for name in names:
        host.add(name)
    routes = RoutingTransport({f"{n}.test": ASGITransport(host.app(n)) for n in names})
    directory = StaticDirectory([Peer(n, f"http://{n}.test") for n in names])
    most = 0
    samples: list[tuple[int, float]] = []
    started = time.perf_counter()
    done = 0
    async with CallPeer(directory, transport=routes, timeout=180) as tool:
        for i in range(leases):
            if time.perf_counter() - started > budget:
                print(f"  stopped at lease {i}: the {budget:.0f} s budget is spent", flush=True)
                break
            answer = await tool.acall(peer=names[i % agents], prompt="go")
            if answer.response != "ok":
                raise AssertionError(answer.response)
            done = i + 1
            most = max(most, children())
            if i % max(1, leases // 20) == 0 or i == leases - 1:
                samples.append((i, rss_mib()))
                # As it goes: a run cut short (a timeout on a loaded machine) still says something.
                print(
                    f"  turn {i}: RSS {samples[-1][1]:.0f} MiB, servers alive now {children()}, "
                    f"most after a build {most_at_build}, after a turn {most}, "
                    f"{time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    took = time.perf_counter() - started
    await host.aclose()  # closes the cache too
    stats = cache.stats
    print(
        f"{done} turns over {agents} agents in a MultiAgentHost, cache bound {bound}: builds "
        f"{stats.builds}, evictions {stats.evictions}, closes {stats.closes}; {took:.0f} s "
        f"({took / max(1, stats.builds) * 1000:.0f} ms a build)"
    )
    print(
        f"  servers alive, most seen: {most_at_build} right after a build, {most} after a "
        f"turn (bound {bound})"
    )
    print("  RSS MiB by turn: " + ", ".join(f"{i}: {mib:.0f}" for i, mib in samples))
    print(f"  children after aclose: {children()}")
    print(f"load average at end: {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    calls = sub.add_parser("calls")
    calls.add_argument("--calls", type=int, default=200)
    calls.add_argument("--rounds", type=int, default=7)
    ev = sub.add_parser("evictions")
    ev.add_argument("--leases", type=int, default=1000)
    ev.add_argument("--agents", type=int, default=100)
    ev.add_argument("--bound", type=int, default=16)
    ev.add_argument("--budget", type=float, default=3600, help="stop after this many seconds")
    args = parser.parse_args()
    if args.kind == "calls":
        asyncio.run(calls_bench(args.calls, args.rounds))
    else:
        asyncio.run(evictions_bench(args.leases, args.agents, args.bound, args.budget))


if __name__ == "__main__":
    main()
