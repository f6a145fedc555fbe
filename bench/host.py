"""What the agent host costs: per call against a bare app, per idle agent, per cold agent.

Every table is measured in this run against a baseline from the same run:

1. `CallPeer` against an `AgentHost` served by uvicorn on 127.0.0.1 against a
   bare ASGI app answering the same frames (`POST /sessions`, event stream,
   inject, read until the turn ends; a StaticDirectory, so no hub lookup).
   The bare app is the least a server can do and still be correct for that
   call: one dict of sessions, frames pre-encoded, no auth, limits, ACL, log
   or Go-fidelity decoding; the host runs echo with its rate limit off.
   Rounds alternate (bare, host, ...) so drift on a shared machine hits both
   alike; the fastest round of each side is compared, wall and CPU time.
2. 10,000 agents in one `MultiAgentHost`, served (a socket each), idle:
   memory per agent (tracemalloc, this process) against the cost of one
   agent's attach server once it has had a request (the baseline: what every
   agent would cost if the host made them all up front); then 1,000 agents
   registered with a hub in another process (time to register, memory with
   the leases, deregistered on stop).
3. A call to a cold agent (its attach server made and its runtime built
   through `AgentBuilder` on the way) against a call to a warm one, one at a
   time over loopback.
4. Delegations per second over loopback at 1, 10, 200 and 1,000 calls in
   flight: 10 echo agents of one `MultiAgentHost` registered with a hub,
   against the simulator's `fleet.serve()` of 10 echo peers (bench/fleet_scale.py
   table 3), both called through `HubDirectory` over the network. A call's
   deadline is 60 s, or 0.3 s per call in flight past 200 (300 s at 1,000):
   the calls queue in the caller (50 at once), and at 1,000 in flight on a
   loaded machine the queue alone took longer than 60 s, on either side. Failed
   calls are counted per side and by kind, deadline or other.

    python bench/host.py [--calls 200] [--rounds 7] [--agents 10000] [--only N]

Every loop is bounded by a count and a time; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from fleet_scale import build as build_fleet
from fleet_scale import rate

from coreagent_sdk import (
    AgentBuilder,
    AgentConfig,
    BuilderConfig,
    CallPeer,
    HubDirectory,
    Peer,
    RuntimeCache,
    RuntimeSpec,
    StaticDirectory,
)
from coreagent_sdk.host import AgentHost, MultiAgentHost, PeerRegistry, Turn

PROMPT = "How is the cluster doing?"
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _frame(event: str, payload: Any) -> bytes:
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event}\ndata: {data}\n\n".encode()


def _agent(seq: int, author: str, role: str, text: str) -> bytes:
    event = {
        "Content": {"role": role, "parts": [{"text": text}]},
        "Partial": False,
        "TurnComplete": False,
        "Interrupted": False,
        "ErrorCode": "",
        "ErrorMessage": "",
        "FinishReason": "",
        "ID": f"e-{seq}",
        "Timestamp": "2026-01-01T00:00:00Z",
        "InvocationID": "inv-1",
        "Branch": "",
        "Author": author,
        "Actions": {"StateDelta": None},
        "LongRunningToolIDs": None,
    }
    return _frame("agent", {"seq": seq, "event": event})


class BareApp:
    """The least ASGI app that answers a delegation with the host's frames."""

    def __init__(self) -> None:
        self.sessions: dict[str, asyncio.Queue[bytes | None]] = {}
        self.opening = _frame(
            "capabilities", {"protocol_version": "1.10.0", "event_types": ["agent"]}
        ) + _frame("status-update", {"model": "m", "turn_state": "idle"})

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if method == "POST" and path == "/sessions":
            sid = uuid.uuid4().hex[:10]
            self.sessions[sid] = asyncio.Queue()
            body = {"app": "core-agent", "user": "anonymous", "sessionID": sid, "url": ""}
            await self._json(send, 201, body)
        elif method == "GET" and path.endswith("/events"):
            await self._events(path.split("/")[3], send)
        elif method == "POST" and path.endswith("/inject"):
            sid = path.split("/")[3]
            chunks = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            text = json.loads(b"".join(chunks))["message"]
            queue = self.sessions[sid]
            for frame in (
                _frame("inbox", {"state": "queued", "prompt_id": "p"}),
                _frame("inbox", {"state": "dequeued", "prompt_id": "p"}),
                _frame("status-update", {"model": "m", "turn_state": "streaming"}),
                _agent(1, "user", "user", text),
                _agent(2, "agent", "model", text),
                _frame("turn-complete", {"prompt_id": "t", "model": "m", "tokens_in": 1}),
                _frame("status-update", {"turn_state": "idle"}),
                None,
            ):
                queue.put_nowait(frame)
            await self._json(send, 200, {"injected": text, "session": sid, "woke": True})
        else:
            await self._json(send, 404, {})

    async def _events(self, sid: str, send: Send) -> None:
        queue = self.sessions[sid]
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": self.opening, "more_body": True})
        while (frame := await queue.get()) is not None:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        del self.sessions[sid]

    @staticmethod
    async def _json(send: Send, status: int, body: Any) -> None:
        data = json.dumps(body).encode() + b"\n"
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


async def serve_bare(app: BareApp) -> tuple[str, Any]:
    import socket

    import uvicorn

    # A TCP listener, as the host's: asyncio sets TCP_NODELAY on what it accepts only then.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    for _ in range(500):  # bounded wait for startup
        if server.started:
            break
        await asyncio.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", (server, task)


async def echo(turn: Turn) -> None:
    await turn.say(turn.prompt)


async def per_call(tool: CallPeer, peer: str, calls: int, in_flight: int) -> tuple[float, float]:
    """Seconds per call, wall and this process's CPU, `calls` calls, at most `in_flight` at once.

    Client and server share the process, so CPU per call is both sides' work; the client's is
    the same against either server, and CPU time is less at the mercy of a shared machine's
    other load than wall time is.
    """
    gate = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with gate:
            result = await tool.acall(peer=peer, prompt=PROMPT)
            assert result.response == PROMPT, result.response

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(calls)))
    return (time.perf_counter() - started) / calls, (time.process_time() - cpu) / calls


async def per_call_table(calls: int, rounds: int) -> None:
    host = AgentHost("host", behavior=echo, session_rate_limit=None)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.get_running_loop().create_task(
        host.serve(on_ready=ready.set_result, handle_signals=False)
    )
    host_url = await ready
    bare_url, (bare_server, bare_task) = await serve_bare(BareApp())
    directory = StaticDirectory([Peer("host", host_url), Peer("bare", bare_url)])
    print(f"1. per call, {calls} calls a round, {rounds} rounds, fastest round of each side")
    print(
        f"   {'in flight':>9}  {'bare ms/call':>12}  {'host ms/call':>12}  {'host/bare':>9}"
        f"  {'bare CPU ms':>11}  {'host CPU ms':>11}  {'CPU ratio':>9}"
    )
    async with CallPeer(directory, timeout=120) as tool:
        for in_flight in (1, 200):
            n = calls if in_flight > 1 else max(20, calls // 5)
            bare, hosted = [], []
            for _ in range(rounds):
                bare.append(await per_call(tool, "bare", n, in_flight))
                hosted.append(await per_call(tool, "host", n, in_flight))
            b, h = min(w for w, _ in bare) * 1000, min(w for w, _ in hosted) * 1000
            bc, hc = min(c for _, c in bare) * 1000, min(c for _, c in hosted) * 1000
            print(
                f"   {in_flight:>9}  {b:>12.2f}  {h:>12.2f}  {h / b:>8.2f}x"
                f"  {bc:>11.2f}  {hc:>11.2f}  {hc / bc:>8.2f}x"
            )
    host.stop()
    await serving
    bare_server.should_exit = True
    await bare_task


HUB_SCRIPT = """
import asyncio, json
from coreagent_sdk.host import AgentHost, PeerRegistry
async def main():
    hub = AgentHost("hub", registry=PeerRegistry(), session_rate_limit=None)
    await hub.serve(on_ready=lambda url: print(json.dumps(url), flush=True))
asyncio.run(main())
"""


def hub_process() -> tuple[subprocess.Popen[str], str]:
    """A hub served on 127.0.0.1 by another process (its memory is not this one's)."""
    proc = subprocess.Popen([sys.executable, "-c", HUB_SCRIPT], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


class Loader:
    """Agents whose persona names them."""

    async def agent_slug(self, agent_id: str) -> str:
        return agent_id

    async def load_config(self, agent_id: str) -> AgentConfig:
        return AgentConfig(id=agent_id, slug=agent_id, persona=f"You are {agent_id}.")


class Secrets:
    async def resolve_secrets(self, agent_id: str, skills: tuple[str, ...]) -> dict[str, str]:
        return {"API_KEY": f"key-of-{agent_id}"}


class Runtime:
    """A runtime as a model-backed one starts: its prompt, tools and secrets put together."""

    def __init__(self, spec: RuntimeSpec) -> None:
        self.prompt = spec.system_prompt + "\n" + "\n".join(spec.skills)
        self.secrets = dict(spec.secrets)

    async def aclose(self) -> None:
        self.secrets.clear()


def runtimes(max_instances: int) -> RuntimeCache:
    builder = AgentBuilder(BuilderConfig(factory=Runtime, secrets=Secrets()))
    return RuntimeCache(Loader(), builder, max_instances=max_instances)


async def persona(turn: Turn) -> None:
    await turn.say(turn.runtime.prompt.split("\n")[0])


async def serve_many(host: MultiAgentHost) -> tuple[dict[str, str], asyncio.Task[None]]:
    ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    serving = asyncio.get_running_loop().create_task(
        host.serve(on_ready=ready.set_result, handle_signals=False)
    )
    done, _ = await asyncio.wait({ready, serving}, return_when=asyncio.FIRST_COMPLETED)
    if serving in done:
        serving.result()  # raises what stopped it
    return ready.result(), serving


async def idle_agents(agents: int, hub_url: str | None) -> None:
    """Serve `agents` idle agents (joined to `hub_url` when given) and print what each costs."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    host = MultiAgentHost(behavior=persona, runtimes=runtimes(64), register_to=hub_url, ttl=600)
    for i in range(agents):
        host.add(f"agent-{i}")
    started = time.perf_counter()
    _, serving = await serve_many(host)
    took = time.perf_counter() - started
    gc.collect()
    per_idle = (tracemalloc.get_traced_memory()[0] - before) / agents
    # The baseline: an agent's attach server once it has had a request.
    sample = min(500, agents)
    middle = tracemalloc.get_traced_memory()[0]
    for i in range(sample):
        host.host(f"agent-{i}")
    gc.collect()
    per_active = (tracemalloc.get_traced_memory()[0] - middle) / sample
    tracemalloc.stop()
    what = "served and registered with the hub" if hub_url else "served"
    print(f"   {agents:,} agents {what} in {took:.1f} s (tracemalloc on)")
    if hub_url is not None:
        print(f"   the hub lists {len(await HubDirectory(hub_url).peers()):,} of them")
    made = per_idle + per_active
    print(f"   {'idle agent':<34} {per_idle / 1024:>7.1f} KiB (target <= 50)")
    print(f"   {'attach server made (baseline)':<34} {made / 1024:>7.1f} KiB")
    print(f"   {'idle / made up front':<34} {per_idle / made:>7.2f}x")
    started = time.perf_counter()
    host.stop()
    await serving
    print(f"   stopped in {time.perf_counter() - started:.1f} s", end="")
    if hub_url is not None:
        print(f"; the hub lists {len(await HubDirectory(hub_url).peers()):,} afterwards")
    else:
        print()


async def idle_table(agents: int, registered: int) -> None:
    print(f"\n2a. {agents:,} agents idle in one host, each on its own socket")
    await idle_agents(agents, None)
    print(f"\n2b. {registered:,} agents idle in one host, registered with a hub in another process")
    hub, hub_url = hub_process()
    try:
        await idle_agents(registered, hub_url)
    finally:
        hub.terminate()
        hub.wait(10)


async def cold_table(calls: int) -> None:
    print(f"\n3. cold agent (attach server made, runtime built) against warm, {calls} calls each")
    host = MultiAgentHost(behavior=persona, runtimes=runtimes(calls * 2), session_rate_limit=None)
    for i in range(calls):
        host.add(f"agent-{i}")
    urls, serving = await serve_many(host)
    directory = StaticDirectory([Peer(name, url) for name, url in urls.items()])
    async with CallPeer(directory, timeout=60) as tool:
        await tool.acall(peer="agent-0", prompt="warm the client's pool")
        timings: dict[str, list[float]] = {"cold": [], "warm": []}
        for kind in ("cold", "warm"):
            for i in range(1, calls):  # agent-0 is warm already
                t0 = time.perf_counter()
                result = await tool.acall(peer=f"agent-{i}", prompt="hi")
                timings[kind].append(time.perf_counter() - t0)
                assert result.response == f"You are agent-{i}.", result.response
    cold = sorted(timings["cold"])[len(timings["cold"]) // 2] * 1000
    warm = sorted(timings["warm"])[len(timings["warm"]) // 2] * 1000
    print(
        f"   {'median ms/call':>22}  cold {cold:.2f}  warm {warm:.2f}  cold/warm {cold / warm:.2f}x"
    )
    host.stop()
    await serving


async def delegations_table(
    seconds: float, rounds: int, levels: tuple[int, ...] = (1, 10, 200, 1000)
) -> None:
    peers = 10
    print(
        f"\n4. delegations/s over loopback, {peers} echo agents, HubDirectory over the network,"
        f" {rounds} rounds alternating, best of each"
    )
    fleet = build_fleet(peers)
    hub = AgentHost("hub", registry=PeerRegistry(), session_rate_limit=None)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    hub_serving = asyncio.get_running_loop().create_task(
        hub.serve(on_ready=ready.set_result, handle_signals=False)
    )
    hub_url = await ready
    host = MultiAgentHost(
        {f"p-{i}": echo for i in range(peers)}, register_to=hub_url, session_rate_limit=None
    )
    _, serving = await serve_many(host)
    print(
        f"   {'in flight':>9} {'simulator/s':>12} {'host/s':>8}"
        f" {'host/simulator':>15} {'errors s/h':>9}"
    )
    async with await fleet.serve() as served:
        for level in levels:
            best = {"simulator": 0.0, "host": 0.0}
            errors = {"simulator": 0, "host": 0}
            kinds: dict[str, Counter[str]] = {"simulator": Counter(), "host": Counter()}
            deadline = max(60.0, 0.3 * level)
            for _ in range(rounds):
                for side in ("simulator", "host"):
                    if side == "simulator":
                        tool = served.call_peer(timeout=deadline)
                    else:
                        tool = CallPeer(HubDirectory(hub_url), timeout=deadline)
                    await rate(tool, peers, 0.2, min(level, 10))  # warm the pool
                    got, failed = await rate(
                        tool, peers, max(seconds, level / 100), level, failures=kinds[side]
                    )
                    best[side] = max(best[side], got)
                    errors[side] += failed
                    await tool.aclose()
            sim, got = best["simulator"], best["host"]
            failed = f"{errors['simulator']}/{errors['host']}"
            print(f"   {level:>9,} {sim:>12.0f} {got:>8.0f} {got / sim:>14.2f}x {failed:>9}")
            for side, counted in kinds.items():
                for kind, n in counted.most_common():
                    print(f"   {'':>9} {side} failed {n}: {kind}")
    await fleet.aclose()
    host.stop()
    await serving
    hub.stop()
    await hub_serving


async def main(args: argparse.Namespace) -> None:
    tables: list[Callable[[], Awaitable[None]]] = [
        lambda: per_call_table(args.calls, args.rounds),
        lambda: idle_table(args.agents, args.registered),
        lambda: cold_table(args.cold),
        lambda: delegations_table(args.seconds, min(args.rounds, 3), tuple(args.levels)),
    ]
    for i, table in enumerate(tables, 1):
        if args.only in (None, i):
            await table()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--registered", type=int, default=1_000, help="agents joined to a hub")
    parser.add_argument("--cold", type=int, default=200, help="agents called cold, then warm")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--only", type=int, choices=[1, 2, 3, 4])
    parser.add_argument(
        "--levels", type=int, nargs="+", default=[1, 10, 200, 1000], help="table 4's in flight"
    )
    asyncio.run(main(parser.parse_args()))
