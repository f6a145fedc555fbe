"""A host of many agents: each on the wire as one daemon, runtimes from one shared cache."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from coreagent_sdk import (
    AgentBuilder,
    AgentConfig,
    ASGITransport,
    AttachClient,
    BuilderConfig,
    CallPeer,
    HubDirectory,
    Peer,
    RoutingTransport,
    RuntimeCache,
    RuntimeSpec,
    StaticDirectory,
)
from coreagent_sdk.host import AgentHost, MultiAgentHost, PeerRegistry, Turn
from tests.processes import reap, stop_with_sigterm
from tests.test_host_fidelity import frames, new_session, one_turn, seqs

ROOT = Path(__file__).resolve().parent.parent


class Loader:
    """Every agent id is an agent; its persona names it."""

    def __init__(self) -> None:
        self.loads: list[str] = []

    async def agent_slug(self, agent_id: str) -> str:
        return agent_id

    async def load_config(self, agent_id: str) -> AgentConfig:
        self.loads.append(agent_id)
        await asyncio.sleep(0.01)  # a database's round trip: concurrent callers overlap here
        return AgentConfig(id=agent_id, slug=agent_id, persona=f"You are {agent_id}.")


class Runtime:
    """What the factory builds: the spec, and whether the cache closed it."""

    def __init__(self, spec: RuntimeSpec) -> None:
        self.spec = spec
        self.closes = 0

    async def aclose(self) -> None:
        self.closes += 1


class Secrets:
    """Each agent's own secret, by agent id."""

    async def resolve_secrets(
        self, agent_id: str, skill_names: tuple[str, ...]
    ) -> Mapping[str, str]:
        return {"API_KEY": f"secret-of-{agent_id}"}


def cache(max_instances: int = 64) -> tuple[RuntimeCache, list[Runtime]]:
    built: list[Runtime] = []

    def factory(spec: RuntimeSpec) -> Runtime:
        built.append(Runtime(spec))
        return built[-1]

    builder = AgentBuilder(BuilderConfig(factory=factory, secrets=Secrets()))
    return RuntimeCache(Loader(), builder, max_instances=max_instances), built


async def persona(turn: Turn) -> None:
    """Answer as the runtime's system prompt says who we are."""
    await turn.say(f"{turn.runtime.spec.system_prompt} ({turn.agent}) {turn.prompt}")


def in_process(host: MultiAgentHost) -> tuple[StaticDirectory, RoutingTransport]:
    names = host.names()
    routes = RoutingTransport({f"{n}.test": ASGITransport(host.app(n)) for n in names})
    return StaticDirectory([Peer(n, f"http://{n}.test") for n in names]), routes


async def ask(host: MultiAgentHost, calls: list[tuple[str, str]]) -> list[str]:
    directory, routes = in_process(host)
    async with CallPeer(directory, transport=routes, timeout=10) as tool:
        results = await asyncio.gather(*(tool.acall(peer=p, prompt=q) for p, q in calls))
    return [r.response for r in results]


async def test_many_agents_each_answer_under_their_own_name() -> None:
    async def named(turn: Turn) -> None:
        await turn.say(f"{turn.agent} heard {turn.prompt}")

    host = MultiAgentHost({"triage": named, "billing": named})
    host.add("search")  # the host's behaviour: echo
    assert host.names() == ["triage", "billing", "search"]
    answers = await ask(host, [("triage", "a"), ("billing", "b"), ("search", "c")])
    assert answers == ["triage heard a", "billing heard b", "c"]
    # Each agent is its own daemon: its own capabilities name and its own startup session.
    async with (
        AttachClient("http://billing.test", transport=ASGITransport(host.app("billing"))) as c,
        c.events("/sessions/core-agent/default") as frames,
    ):
        capabilities = await frames.__anext__()
    assert capabilities.agent.name == "billing"
    assert host.host("triage") is not host.host("billing")
    await host.aclose()


async def test_an_agent_has_no_attach_server_until_its_first_request() -> None:
    host = MultiAgentHost({f"agent-{i}": persona for i in range(100)})
    assert host.active() == []
    host.app("agent-7")
    assert host.active() == ["agent-7"]
    with pytest.raises(KeyError, match="no agent 'nobody' here"):
        host.app("nobody")
    with pytest.raises(ValueError, match="already hosted"):
        host.add("agent-7")


async def test_runtimes_are_built_once_per_agent_under_concurrency() -> None:
    runtimes, built = cache()
    host = MultiAgentHost(
        {n: persona for n in ("a", "b", "c")}, runtimes=runtimes, session_rate_limit=None
    )
    calls = [(name, f"q{i}") for i in range(8) for name in ("a", "b", "c")]
    answers = await ask(host, calls)
    assert answers == [f"You are {p}. ({p}) {q}" for p, q in calls]
    assert sorted(r.spec.agent_id for r in built) == ["a", "b", "c"]
    assert runtimes.stats.builds == 3 and runtimes.stats.misses + runtimes.stats.hits == 24
    await host.aclose()
    assert [r.closes for r in built] == [1, 1, 1]  # the host closes its runtimes when it stops


async def test_an_agent_id_other_than_its_name_keys_its_runtime() -> None:
    runtimes, _built = cache()
    host = MultiAgentHost(runtimes=runtimes, behavior=persona)
    host.add("triage", agent_id="agent-0042")
    assert await ask(host, [("triage", "hi")]) == ["You are agent-0042. (triage) hi"]
    assert runtimes.resident() == ["agent-0042"]
    await host.aclose()


async def test_an_idle_runtime_is_closed_on_eviction_and_rebuilt_on_the_next_turn() -> None:
    runtimes, built = cache(max_instances=1)
    host = MultiAgentHost({n: persona for n in ("a", "b")}, runtimes=runtimes)
    await ask(host, [("a", "1")])
    first_a = built[0]
    await ask(host, [("b", "2")])  # builds b: a is evicted and, idle, closed
    for _ in range(100):  # bounded: the cache closes in a task of its own
        if first_a.closes:
            break
        await asyncio.sleep(0.01)
    assert first_a.closes == 1 and runtimes.resident() == ["b"]
    assert await ask(host, [("a", "3")]) == ["You are a. (a) 3"]
    assert [r.spec.agent_id for r in built] == ["a", "b", "a"] and built[2] is not first_a
    assert first_a.closes == 1  # closed once, never again
    await host.aclose()


async def test_a_runtime_is_not_closed_while_its_turn_runs() -> None:
    runtimes, built = cache(max_instances=1)
    release = asyncio.Event()
    running = asyncio.Event()

    async def slow(turn: Turn) -> None:
        runtime = turn.runtime
        running.set()
        await release.wait()
        await turn.say(f"closed mid-turn: {runtime.closes}")

    host = MultiAgentHost({"slow": slow, "other": persona}, runtimes=runtimes)
    directory, routes = in_process(host)
    async with CallPeer(directory, transport=routes, timeout=10) as tool:
        call = asyncio.create_task(tool.acall(peer="slow", prompt="go"))
        await asyncio.wait_for(running.wait(), 10)
        await tool.acall(peer="other", prompt="evict slow's runtime")  # max_instances=1
        assert runtimes.resident() == ["other"] and built[0].closes == 0
        release.set()
        assert (await call).response == "closed mid-turn: 0"
    for _ in range(100):  # bounded: closed once the turn let go of its lease
        if built[0].closes:
            break
        await asyncio.sleep(0.01)
    assert built[0].closes == 1
    await host.aclose()


async def test_secrets_of_one_agent_are_never_visible_in_another_agents_turn() -> None:
    runtimes, _ = cache()
    seen: dict[str, Any] = {}

    async def reveal(turn: Turn) -> None:
        seen[turn.agent] = dict(turn.runtime.spec.secrets)
        await turn.say(" ".join(sorted(turn.runtime.spec.secrets.values())))

    host = MultiAgentHost({"a": reveal, "b": reveal}, runtimes=runtimes)
    answers = await ask(host, [("a", "x"), ("b", "y"), ("a", "z")])
    assert answers == ["secret-of-a", "secret-of-b", "secret-of-a"]
    assert seen == {"a": {"API_KEY": "secret-of-a"}, "b": {"API_KEY": "secret-of-b"}}
    await host.aclose()


async def test_a_runtime_that_cannot_be_built_is_a_turn_error_that_does_not_echo_the_builder() -> (
    None
):
    class Failing:
        async def build(self, cfg: AgentConfig) -> Any:
            raise RuntimeError("vault at 10.1.2.3 refused token s3cr3t")

    errors: list[Exception] = []
    host = MultiAgentHost(
        {"a": persona}, runtimes=RuntimeCache(Loader(), Failing()), on_agent_error=errors.append
    )
    transport = ASGITransport(host.app("a"))
    async with AttachClient("http://a.test", transport=transport) as client:
        session = await client.new_session()
        async with client.events(session) as frames:
            await client.inject(session, "hi")
            async for frame in frames:
                if type(frame).__name__ == "TurnError":
                    break
    assert "could not be built (RuntimeError)" in frame.message
    assert "s3cr3t" not in frame.message and "10.1.2.3" not in frame.message
    assert "s3cr3t" in str(errors[0].__cause__)  # the host's own log sees why
    await host.aclose()


@pytest.fixture
async def hub() -> AsyncIterator[tuple[str, PeerRegistry]]:
    """A hub served on loopback in this process; yields its URL and registry."""
    registry = PeerRegistry()
    hub = AgentHost("hub", registry=registry, session_rate_limit=None)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(hub.serve(on_ready=ready.set_result, handle_signals=False))
    url = await asyncio.wait_for(ready, 10)
    yield url, registry
    hub.stop()
    await asyncio.wait_for(task, 10)


async def test_a_joined_multi_agent_host_registers_every_agent_and_deregisters_all_on_shutdown(
    hub: tuple[str, PeerRegistry],
) -> None:
    hub_url, registry = hub
    runtimes, built = cache()
    host = MultiAgentHost(
        {"triage": persona, "billing": persona, "search": persona},
        runtimes=runtimes,
        register_to=hub_url,
        labels={"team": "ops"},
    )
    host.add("quiet", persona, labels={"team": "none"})
    ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    urls = await asyncio.wait_for(ready, 10)
    assert sorted(urls) == ["billing", "quiet", "search", "triage"]
    assert len(set(urls.values())) == 4  # one attach server (port) per agent
    records = {e.name: e for e in registry.peers({})}
    assert {n: e.endpoint for n, e in records.items()} == urls
    assert records["triage"].labels == {"team": "ops"}
    assert records["quiet"].labels == {"team": "none"}
    directory = HubDirectory(hub_url)
    async with CallPeer(directory, timeout=10) as tool:
        assert (
            await tool.acall(peer="triage", prompt="p1")
        ).response == "You are triage. (triage) p1"
        assert (
            await tool.acall(peer="billing", prompt="p2")
        ).response == "You are billing. (billing) p2"
    # A request reaches the agent whose socket it came in on, whatever its Host header says.
    async with httpx.AsyncClient() as http:
        created = await http.post(
            urls["billing"] + "/sessions",
            headers={"Host": urls["triage"].split("//")[1], "Content-Type": "application/json"},
        )
    sid = created.json()["sessionID"]
    assert sid in host.host("billing").sessions and sid not in host.host("triage").sessions
    assert host.active() == ["triage", "billing"]  # search and quiet were never asked
    host.stop()
    started = time.monotonic()
    await asyncio.wait_for(serving, 10)
    assert time.monotonic() - started < 10
    assert list(registry.peers({})) == []  # every agent deregistered
    assert list(await directory.peers()) == []
    assert [r.closes for r in built] == [1, 1]  # and the runtimes closed
    await directory.aclose()


async def test_the_command_serves_a_multi_agent_host_whose_agents_a_hub_resolves_by_name(
    hub: tuple[str, PeerRegistry],
) -> None:
    hub_url, registry = hub
    argv = [sys.executable, "-m", "coreagent_sdk.host", "tests.host_agents:many"]
    proc = subprocess.Popen(  # noqa: ASYNC220 - a short start, as test_host_serve spawns
        [*argv, "--port", "0", "--register-to", hub_url],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
        urls = json.loads(line)["agents"]
        assert sorted(urls) == ["billing", "search", "triage"]
        assert {e.name: e.endpoint for e in registry.peers({})} == urls
        directory = HubDirectory(hub_url)
        async with CallPeer(directory, timeout=15) as tool:
            assert (await tool.acall(peer="triage", prompt="a")).response == "triage: a"
            assert (await tool.acall(peer="billing", prompt="b")).response == "billing: b"
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(asyncio.to_thread(proc.wait), 10)
        assert code == 0, proc.stderr.read() if proc.stderr else ""
        assert list(registry.peers({})) == []  # all three deregistered on the way out
        await directory.aclose()
    finally:
        reap(proc)


async def test_an_agent_the_hub_forgot_registers_again_at_its_next_heartbeat(
    hub: tuple[str, PeerRegistry],
) -> None:
    hub_url, registry = hub
    host = MultiAgentHost({"a": persona, "b": persona}, register_to=hub_url, ttl=3)
    ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    urls = await asyncio.wait_for(ready, 10)
    forgotten = registry.get("a")
    assert forgotten is not None
    registry.deregister(forgotten.registration_id, None)  # a hub restart, for agent a
    assert registry.get("a") is None
    for _ in range(100):  # bounded: heartbeats go out every ttl/3 = 1 s
        again = registry.get("a")
        if again is not None:
            break
        await asyncio.sleep(0.05)
    assert again is not None and again.endpoint == urls["a"]
    assert again.registration_id != forgotten.registration_id
    host.stop()
    await asyncio.wait_for(serving, 10)
    assert list(registry.peers({})) == []


class _HeldRegistration(httpx.AsyncBaseTransport):
    """The hub in-process; one re-registration's answer is held until a deregistration comes.

    The hub has taken the registration by then, but the host has not read its id:
    the moment a stop must not cut (held at most `hold` seconds, so nothing hangs).
    """

    def __init__(self, hub: AgentHost, *, hold: float) -> None:
        self._inner = ASGITransport(hub.app)
        self._hold = hold
        self.armed = False
        self.held = asyncio.Event()
        self._leaving = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            self._leaving.set()
        response = await self._inner.handle_async_request(request)
        if self.armed and request.method == "POST" and request.url.path == "/peers":
            self.armed = False
            self.held.set()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._leaving.wait(), self._hold)
        return response


async def test_a_stop_during_a_re_registration_still_deregisters_the_agent_it_registered() -> None:
    registry = PeerRegistry()
    hub = AgentHost("hub", registry=registry, session_rate_limit=None)
    transport = _HeldRegistration(hub, hold=1.0)
    host = MultiAgentHost(
        {"a": persona}, register_to="http://hub.test", ttl=3, peer_transport=transport
    )
    ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    await asyncio.wait_for(ready, 10)
    forgotten = registry.get("a")
    assert forgotten is not None
    transport.armed = True
    registry.deregister(forgotten.registration_id, None)  # the hub forgets it: 404 at next beat
    await asyncio.wait_for(transport.held.wait(), 5)  # beats every ttl/3 = 1 s
    again = registry.get("a")
    assert again is not None and again.registration_id != forgotten.registration_id
    host.stop()  # while the host has not yet read the new registration's id
    await asyncio.wait_for(serving, 10)
    assert list(registry.peers({})) == [], "a lease the host could not reach was left behind"


@pytest.mark.slow  # 5.5 s of real idle time: uvicorn's timer takes no clock
async def test_an_agent_keeps_an_idle_pooled_connection_open_longer_than_uvicorns_5_s() -> None:
    # A caller's pool reuses a connection idle between calls; closed at uvicorn's default 5 s,
    # calls at 1,000 in flight failed on connections the server had just dropped.
    host = MultiAgentHost({"a": persona})
    ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    urls = await asyncio.wait_for(ready, 10)
    hostport = urls["a"].removeprefix("http://")
    ip, port = hostport.split(":")
    reader, writer = await asyncio.open_connection(ip, int(port))
    request = f"GET /sessions HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode()
    try:
        for _ in range(2):
            writer.write(request)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(
                next(
                    line.split(b":")[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
            )
            await asyncio.wait_for(reader.readexactly(length), 5)
            await asyncio.sleep(5.5)  # past uvicorn's default keep-alive, well within 30 s
    finally:
        writer.close()
        host.stop()
        await asyncio.wait_for(serving, 10)


async def serve_many(store: Path, *flags: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """`python -m coreagent_sdk.host tests.host_agents:many --store FILE` as a process."""
    proc = subprocess.Popen(  # noqa: ASYNC220 - a short start, as test_host_serve spawns
        [
            sys.executable,
            "-m",
            "coreagent_sdk.host",
            "tests.host_agents:many",
            "--port",
            "0",
            "--store",
            str(store),
            *flags,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
    if not line:
        proc.wait(5)
        raise AssertionError(proc.stderr.read() if proc.stderr else "no output")
    return proc, json.loads(line)["agents"]


async def test_the_command_restarts_a_multi_agent_host_on_its_store_with_every_agents_sessions(
    tmp_path: Path,
) -> None:
    store = tmp_path / "agents.sqlite3"
    proc, urls = await serve_many(store)
    try:
        async with httpx.AsyncClient(base_url=urls["triage"]) as http:
            path = await new_session(http)
            before = seqs(await one_turn(http, path, "route me"))
    finally:
        await stop_with_sigterm(proc)

    proc, urls = await serve_many(store)  # the same file, a new process
    try:
        async with httpx.AsyncClient(base_url=urls["triage"]) as http:
            rows = (await http.get("/sessions")).json()["sessions"]
            assert [(r["sessionID"], r["status"]) for r in rows] == [
                ("default", "active"),
                (path.rsplit("/", 1)[1], "idle"),
            ]
            replay = await frames(
                http, f"{path}/events", lambda e, p: e == "agent" and p["seq"] == before[-1]
            )
            said = [p["event"]["Content"]["parts"][0]["text"] for e, p in replay if e == "agent"]
            assert said[-1] == "triage: route me"
        async with httpx.AsyncClient(base_url=urls["billing"]) as http:
            rows = (await http.get("/sessions")).json()["sessions"]
            assert [r["sessionID"] for r in rows] == ["default"]  # triage's are its own
    finally:
        await stop_with_sigterm(proc)


def test_the_command_refuses_a_second_store_or_idle_timeout_for_a_multi_agent_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coreagent_sdk.host import __main__ as command

    host = MultiAgentHost({"a": persona}, store=tmp_path / "mine.sqlite3", session_idle_timeout=5)
    monkeypatch.setattr(command, "_load", lambda target: host)
    with pytest.raises(SystemExit, match=r"already keeps its sessions in .*mine.sqlite3"):
        command.main(["m:host", "--store", str(tmp_path / "other.sqlite3")])
    with pytest.raises(SystemExit, match="already sets session_idle_timeout=5"):
        command.main(["m:host", "--session-idle-timeout", "9"])
    fresh = MultiAgentHost({"a": persona})
    monkeypatch.setattr(command, "_load", lambda target: fresh)
    args = argparse.Namespace(
        target="m:host",
        store=str(tmp_path / "given.sqlite3"),
        session_idle_timeout=30.0,
        register_to=None,
        token_env=None,
        endpoint=None,
        attach_token_env=None,
        store_sync="normal",
        a2a=False,
        agent_card_external_url=None,
    )
    assert command.build(args) is fresh
    assert fresh.store.path == str(tmp_path / "given.sqlite3")
    assert fresh.host("a").session_idle_timeout == 30.0
    assert fresh.host("a").store.path == fresh.store.path
