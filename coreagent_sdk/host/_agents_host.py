"""`MultiAgentHost`: many named agents in one process, each on the wire exactly as a daemon.

How agents are addressed, and why: in core-agent one daemon is one agent with
one attach server, and a caller reaches it by its registered endpoint's
scheme and host alone (`attachclient.ParseURL` keeps `scheme://host:port`
and drops any path, as the SDK's `dial_base` does). So a path prefix per
agent (`/agents/triage/sessions`) would never be reached by a Go daemon's
`call_peer`, nor by `CallPeer`; and a `Host` header per agent needs a DNS
name per agent. Each agent therefore gets its own port on the host's
address: its own attach server, its own `/sessions`, `default` session,
card and event seqs, registered under its own name with its own endpoint.
What the agents share is the process: one uvicorn server listening on every
agent's socket (a request reaches the agent that owns the socket it came in
on, never one named by the request), one `RuntimeCache`, one registration
task and one event loop.

Memory: an idle agent is a small record and a listening socket. Its attach
server (an `AgentHost`: sessions, routes, limiter) is made on its first
request, and its runtime (persona, skills, secrets, through `AgentBuilder`)
on its first turn, leased from the shared cache for the turn; the cache
closes runtimes it evicts once their turns let go.

Sessions: one store file holds every agent's (`StoreFile`, keyed by agent
name: each agent numbers its own sessions and seqs and has its own
`default`), on one worker thread for the whole host, so a host restarted on
the file serves every agent's sessions again and 10,000 agents do not hold
10,000 files or threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from .._http._endpoint import checked_base_url
from ._agents import Agent, echo
from ._attach_auth import read_attach_token
from ._collector import serving_collector
from ._host import DEFAULT_GRACE, AgentHost
from ._joining import HostRegistrations
from ._prompt_server import PromptServer
from ._replies import _text
from ._runtimes import Runtimes
from ._serve import (
    _CLOSE_TIMEOUT,
    _MAX_GRACE,
    _POLL,
    _SHUTDOWN_WAIT,
    _STARTUP_TIMEOUT,
    HUB_TIMEOUT,
    STOP_BUDGET,
    _in_kernel,
    _listen,
    _signals,
)
from ._session import REPLAY_WINDOW
from ._stop_request import StopRequest
from ._store import SessionStore, StoreFile

__all__ = ["MultiAgentHost"]


class _Agent:
    # One per agent for as long as the host has it: kept small (10,000 of them are idle).
    __slots__ = ("agent_id", "behavior", "description", "host", "labels", "name", "port", "skills")

    def __init__(
        self,
        name: str,
        agent_id: str,
        behavior: Agent | None,
        labels: Mapping[str, str] | None,
        description: str,
        skills: Mapping[str, str] | None,
    ) -> None:
        self.name = name
        self.agent_id = agent_id
        self.behavior = behavior
        self.labels = labels
        self.description = description
        self.skills = skills
        self.port = 0  # while served
        self.host: AgentHost | None = None  # made on its first request


class MultiAgentHost:
    """Serves many named agents in one process, each on its own attach server, as daemons.

    ``agents`` maps names to agents (async functions of a `Turn`); more can
    be added with `add` until the host serves. An agent given none runs
    ``behavior`` (default: echo), the way thousands of agents share one code
    path and differ by their runtime. ``runtimes`` (a `RuntimeCache` built
    with an `AgentBuilder`) gives each turn the agent's runtime as
    `turn.runtime`, built once on first use under the agent's id and leased
    for the turn; the host closes the cache when it stops.

    Served (`serve()`), each agent listens on its own port of the address
    (``port`` and the ports after it, or free ones with 0) and, with
    ``register_to``, registers there under its own name at
    ``endpoint_host`` (default: where it listens) plus its port, with
    ``labels`` and the agent's own; one task heartbeats them all. In-process,
    `app(name)` is the agent's ASGI app. ``store`` names the SQLite file
    holding every agent's sessions, keyed by agent (kept, so a host started
    on it again serves them; None is a private temporary file, made on the
    first use and removed on close); ``store_sync`` is what each commit to
    it survives: "normal" a killed process, "full" a power cut too (see
    `AgentHost`). Every other keyword (``tokens``,
    ``model``, ``session_rate_limit``, ``on_agent_error``, ...) is handed to
    each agent's `AgentHost`.

    Attributes:
        behavior: What an agent added without its own runs.
        runtimes: The shared `RuntimeCache` (or anything with its `lease`), or None.
        register_to: The hub every agent registers with when served, or None.
        token_env: The environment variable holding the host's token (read when used).
        endpoint_host: `scheme://host` callers reach this process at (None: where it
            listens); each agent's endpoint is that and the agent's port.
        labels: Labels every agent registers with (an agent's own win).
        ttl: The lease asked of the hub, in seconds.
        peer_transport: The transport of the host's requests to the hub and to peers
            (None: the network).
        directory: Where `turn.call_peer` looks peers up (the joined hub by default).
        store: The file every agent's sessions are kept in, keyed by agent name.
        host_options: The other `AgentHost` keywords each agent's attach server gets.
        urls: Each agent's base URL while served, by name.
        draining: True while a stopping host refuses new work (503).
    """

    def __init__(
        self,
        agents: Mapping[str, Agent] | None = None,
        *,
        behavior: Agent | None = None,
        runtimes: Runtimes | None = None,
        register_to: str | None = None,
        token_env: str | None = None,
        endpoint_host: str | None = None,
        labels: Mapping[str, str] | None = None,
        ttl: float = 60,
        peer_transport: httpx.AsyncBaseTransport | None = None,
        directory: Any = None,
        store: str | os.PathLike[str] | None = None,
        store_sync: str = "normal",
        **host_options: Any,
    ) -> None:
        self._serving = False
        for taken in ("name", "behavior", "runtimes", "agent_id", "register_to", "endpoint"):
            if taken in host_options:
                raise TypeError(
                    f"MultiAgentHost: {taken}= is per agent or the host's own, not an "
                    "AgentHost option here; use add(name, ...) or the host's own keyword"
                )
        if host_options.get("attach_token_env"):
            # Read now, as an AgentHost reads it: an unset variable fails here, not at the
            # first request to an agent whose attach server is made then.
            read_attach_token(host_options["attach_token_env"])
        self.behavior: Agent = behavior if behavior is not None else echo()
        self.runtimes = runtimes
        self.labels = dict(labels or {})
        self.ttl = ttl
        self.peer_transport = peer_transport
        self.host_options = host_options
        self.store = StoreFile(store, window=REPLAY_WINDOW, shared=True, synchronous=store_sync)
        self.register_to: str | None = None
        self.token_env = token_env
        self.endpoint_host: str | None = None
        self.directory = directory
        self._own_directory: Any = None
        if register_to is not None or endpoint_host is not None:
            self.join(register_to, token_env=token_env, endpoint_host=endpoint_host)
        self._agents: dict[str, _Agent] = {}
        self._by_port: dict[int, _Agent] = {}
        self.urls: dict[str, str] = {}
        self.draining = False
        self._stop = StopRequest()  # what stop() asks of serve()
        for name, agent in (agents or {}).items():
            self.add(name, agent)

    def join(
        self,
        register_to: str | None,
        *,
        token_env: str | None = None,
        endpoint_host: str | None = None,
    ) -> None:
        """Register every agent with hub `register_to` when served (as the constructor's keywords).

        Also makes the joined hub where `turn.call_peer` looks peers up, unless
        the host was given a ``directory``. Called before `serve()`.
        """
        if self._serving:
            raise RuntimeError("MultiAgentHost.join: already serving; join before serve()")
        if endpoint_host is not None:
            parts = urlsplit(checked_base_url(endpoint_host, "MultiAgentHost"))
            if parts.port is not None or parts.path or parts.query:
                raise ValueError(
                    f"MultiAgentHost: endpoint_host {endpoint_host!r} must be scheme://host "
                    "alone: each agent's endpoint adds its own port"
                )
            self.endpoint_host = f"{parts.scheme}://{parts.netloc}"
        if token_env is not None:
            self.token_env = token_env
        if register_to is None:
            return
        self.register_to = checked_base_url(register_to, "MultiAgentHost")
        if self.directory is None or self.directory is self._own_directory:
            from .._peer._directory import HubDirectory

            self.directory = self._own_directory = HubDirectory(
                self.register_to, transport=self.peer_transport, token_env=self.token_env
            )

    def __repr__(self) -> str:
        active = sum(1 for a in self._agents.values() if a.host is not None)
        return f"MultiAgentHost({len(self._agents)} agents, {active} active)"

    def __len__(self) -> int:
        return len(self._agents)

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def names(self) -> list[str]:
        """The agents' names, in the order they were added (the order of their ports)."""
        return list(self._agents)

    def add(
        self,
        name: str,
        behavior: Agent | None = None,
        *,
        agent_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        description: str = "",
        skills: Mapping[str, str] | None = None,
    ) -> None:
        """Host agent `name` (run by `behavior`, or the host's), its runtime keyed `agent_id`.

        ``agent_id`` is the agent's id in the runtime cache and its config
        loader (default: the name). ``labels`` are registered with the host's;
        ``description`` (and ``skills``) serve its A2A card.
        """
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise ValueError(
                f"MultiAgentHost: agent name {name!r} must be a non-empty string without "
                "surrounding blanks (it is the name callers use)"
            )
        if name in self._agents:
            raise ValueError(
                f"MultiAgentHost: agent {name!r} is already hosted; names are unique per host"
            )
        if self._serving:
            raise RuntimeError(
                f"MultiAgentHost: cannot add agent {name!r} while serving; add every agent "
                "before serve() (each gets its socket when serving starts)"
            )
        self._agents[name] = _Agent(
            name,
            agent_id if agent_id is not None else name,
            behavior,
            dict(labels) if labels else None,
            description,
            dict(skills) if skills else None,
        )

    def _agent(self, name: str) -> _Agent:
        agent = self._agents.get(name)
        if agent is None:
            raise KeyError(
                f"MultiAgentHost: no agent {name!r} here ({len(self._agents)} hosted); "
                "add(name, ...) it first"
            )
        return agent

    def host(self, name: str) -> AgentHost:
        """Agent `name`'s attach server (made now if it had none: it is made on first use)."""
        agent = self._agent(name)
        if agent.host is None:
            options = dict(self.host_options)
            if agent.description:
                options["description"] = agent.description
            if agent.skills:
                options["skills"] = agent.skills
            agent.host = AgentHost(
                name,
                behavior=agent.behavior if agent.behavior is not None else self.behavior,
                runtimes=self.runtimes,
                agent_id=agent.agent_id,
                directory=self.directory,
                token_env=self.token_env,
                peer_transport=self.peer_transport,
                **options,
            )
            # The agent's part of the host's one file, under its name (made before its
            # first request, so the host opens it, not a file of its own).
            agent.host.store = SessionStore(self.store, window=REPLAY_WINDOW, agent=agent.name)
            agent.host.draining = self.draining
        return agent.host

    def _use_store(self, store: str | os.PathLike[str]) -> None:
        """Keep the sessions in file `store` (the command line's --store), before any request."""
        if self.store.path is not None:
            raise ValueError(
                f"MultiAgentHost: already keeps its sessions in {self.store.path!r}; "
                "name one store, here or in its module"
            )
        if self._serving or self.active():
            raise RuntimeError(
                "MultiAgentHost: cannot change the store once agents answered requests; "
                "name it before serve()"
            )
        self.store = StoreFile(
            store, window=REPLAY_WINDOW, shared=True, synchronous=self.store.synchronous
        )

    def app(self, name: str) -> ASGIApp:
        """Agent `name`'s ASGI app, to serve yourself or call in-process (`ASGITransport`)."""
        return self.host(name).app

    def active(self) -> list[str]:
        """The agents whose attach server has been made (they had a request)."""
        return [a.name for a in self._agents.values() if a.host is not None]

    def busy(self) -> int:
        """How many sessions, across every agent, run a turn or have one queued."""
        return sum(a.host.busy() for a in self._agents.values() if a.host is not None)

    def close_streams(self) -> None:
        """End every open event stream of every agent."""
        for agent in self._agents.values():
            if agent.host is not None:
                agent.host.close_streams()

    def _set_draining(self, draining: bool) -> None:
        self.draining = draining
        for agent in self._agents.values():
            if agent.host is not None:
                agent.host.draining = draining

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The agent is the one that owns the socket the request came in on: the local
        # port, never anything the request says (a Host header is the caller's to write).
        server = scope.get("server")
        agent = self._by_port.get(server[1]) if server else None
        if agent is None:
            if scope["type"] == "http":
                await _text(404, "no agent listens on this port")(scope, receive, send)
            return
        await self.host(agent.name).app(scope, receive, send)

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        grace: float = DEFAULT_GRACE,
        on_ready: Callable[[dict[str, str]], None] | None = None,
        handle_signals: bool = True,
        tune_gc: bool = True,
    ) -> None:
        """Serve every agent on `host` (each its port) until SIGTERM/SIGINT or `stop()`.

        ``port`` is the first agent's port and the next agents take the ports
        after it (0: free ones). Once every socket listens and every agent is
        registered (with ``register_to``), ``on_ready(urls)`` gets each
        agent's URL by name. On the way out, as `AgentHost.serve`: new writes
        answer 503, running turns get ``grace`` seconds, every agent is
        deregistered (bounded), streams end, runtimes and clients close. The
        garbage collector is tuned while serving as `AgentHost.serve` tunes it
        (``tune_gc=False`` leaves it alone).
        """
        import uvicorn

        from ._limits import uvicorn_options
        from ._server_logs import quiet_server_options

        if not 0 <= grace <= _MAX_GRACE:
            raise ValueError(
                f"MultiAgentHost.serve: grace must be between 0 and {_MAX_GRACE:g} seconds (the "
                f"stop takes at most {STOP_BUDGET:g} s in all), got {grace!r}"
            )
        if not self._agents:
            raise ValueError("MultiAgentHost.serve: no agents to serve; add(name, ...) some")
        if self._serving:
            raise RuntimeError("MultiAgentHost.serve: already serving")
        self._serving = True
        sockets = []
        stop = self._stop.begin()  # before the first wait: a stop from now on is this serve's
        try:
            await self.store.check()  # a store that cannot be read fails here, before listening
            shown = f"[{host}]" if ":" in host else host
            for i, agent in enumerate(self._agents.values()):
                sock = _listen(host, port + i if port else 0)
                sockets.append(sock)
                agent.port = sock.getsockname()[1]
                self._by_port[agent.port] = agent
                self.urls[agent.name] = f"http://{shown}:{agent.port}"
            config = uvicorn.Config(
                self._dispatch,
                interface="asgi3",  # a bound method: uvicorn's guess would be ASGI 2
                lifespan="off",
                timeout_graceful_shutdown=int(_CLOSE_TIMEOUT) or 1,
                # The daemon's header limits; idle connections kept 30 s; no access log, and the
                # process's loggers left as their user set them (see _server_logs).
                **quiet_server_options(uvicorn_options()),
            )
            server = PromptServer(config)
            serving = asyncio.get_running_loop().create_task(server.serve(sockets=sockets))
            with serving_collector(tune_gc, _in_kernel()):
                await self._run(server, serving, stop, host, grace, on_ready, handle_signals)
        finally:
            for sock in sockets:
                sock.close()
            self._by_port.clear()
            self.urls.clear()
            self._serving = False
            self._stop.end()
            self._set_draining(False)

    async def _run(
        self,
        server: PromptServer,
        serving: asyncio.Task[None],
        stop: asyncio.Event,
        host: str,
        grace: float,
        on_ready: Callable[[dict[str, str]], None] | None,
        handle_signals: bool,
    ) -> None:
        registrations: HostRegistrations | None = None
        try:
            with _signals(stop, handle_signals):
                if not await server.started_within(serving, _STARTUP_TIMEOUT):
                    raise RuntimeError(f"MultiAgentHost.serve: {host} did not start listening")
                if self.register_to is not None:
                    registrations = HostRegistrations(
                        self.register_to,
                        [
                            (a.name, self._endpoint(a), self._labels(a))
                            for a in self._agents.values()
                        ],
                        ttl=self.ttl,
                        token_env=self.token_env,
                        transport=self.peer_transport,
                        timeout=HUB_TIMEOUT,
                    )
                    await registrations.start()
                if on_ready is not None:
                    on_ready(dict(self.urls))
                waiter = asyncio.get_running_loop().create_task(stop.wait())
                await asyncio.wait({waiter, serving}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                await self._drain(grace)
        finally:
            if registrations is not None:
                await registrations.aclose()  # bounded by HUB_TIMEOUT
            self.close_streams()
            server.should_exit = True
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(serving), _SHUTDOWN_WAIT)
            if not serving.done():
                serving.cancel()
            await self.aclose()

    def _endpoint(self, agent: _Agent) -> str:
        base = self.endpoint_host or self.urls[agent.name].rpartition(":")[0]
        return f"{base}:{agent.port}"

    def _labels(self, agent: _Agent) -> dict[str, str]:
        return {**self.labels, **(agent.labels or {})}

    async def _drain(self, grace: float) -> None:
        self._set_draining(True)
        deadline = time.monotonic() + grace
        for _ in range(int(grace / _POLL) + 1):  # bounded by grace, and by a count
            if not self.busy() or time.monotonic() >= deadline:
                break
            await asyncio.sleep(_POLL)

    def stop(self) -> None:
        """Ask `serve()` to drain and return (as SIGTERM does), from any thread.

        A stop asked before `serve()` listens is kept: it returns as soon as it has started.
        So is one asked while none serves.
        """
        self._stop.ask()

    async def aclose(self) -> None:
        """Stop every agent's turns and streams, close the store, the runtimes, the directory."""
        hosts = [a.host for a in self._agents.values() if a.host is not None]
        await asyncio.gather(*(h.aclose() for h in hosts))
        await self.store.aclose()  # after every agent wrote its sessions
        closer = getattr(self.runtimes, "aclose", None)
        if closer is not None:
            await closer()
        if self._own_directory is not None:
            await self._own_directory.aclose()
