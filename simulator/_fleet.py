"""`Fleet`: a simulated hub and its peers, in-process or served on loopback sockets."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from coreagent_sdk import (
    ASGITransport,
    CallPeer,
    Clock,
    HubDirectory,
    RoutingTransport,
    SystemClock,
)

from ._agents import Behavior
from ._daemon import Daemon
from ._faults import Faults
from ._registry import Identity, PeerRegistry

__all__ = ["Fleet", "ServedFleet"]

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_HUB = "hub"


def _call_peer(make_directory: Callable[..., HubDirectory], kwargs: dict[str, Any]) -> CallPeer:
    """A CallPeer whose hub directory (unless one is given) reads the same token variable."""
    directory = kwargs.pop("directory", None)
    if directory is None:
        directory = make_directory(token_env=kwargs.get("token_env"), environ=kwargs.get("environ"))
    return CallPeer(directory, **kwargs)


def _identities(tokens: Mapping[str, Identity | str] | None) -> dict[str, Identity] | None:
    if tokens is None:
        return None
    return {t: (i if isinstance(i, Identity) else Identity(i)) for t, i in tokens.items()}


class Fleet:
    """A hub at `http://hub.sim` plus peers at `http://<name>.sim`, all in-process.

    ``tokens`` maps bearer tokens to identities (`Identity` or a name) for a
    protected fleet: every daemon then answers 401 without a valid token, the
    hub records owners and redacts registration ids from non-owners. Without
    it the fleet is open, like a real hub without multi-session auth.
    """

    def __init__(
        self,
        *,
        tokens: Mapping[str, Identity | str] | None = None,
        clock: Clock | None = None,
        domain: str = "sim",
    ) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.tokens = _identities(tokens)
        self.domain = domain
        self.registry = PeerRegistry(self.clock)
        self.transport = RoutingTransport()
        self.daemons: dict[str, Daemon] = {}
        self.hub = Daemon(_HUB, registry=self.registry, tokens=self.tokens, clock=self.clock)
        self._mount(_HUB, self.hub)
        self._served: ServedFleet | None = None

    def __repr__(self) -> str:
        peers = [n for n in self.daemons if n != _HUB]
        return f"Fleet(hub={self.hub_url!r}, peers={peers!r})"

    @property
    def hub_url(self) -> str:
        return self.url(_HUB)

    def url(self, name: str) -> str:
        """The in-process base URL of a daemon of this fleet."""
        return f"http://{name}.{self.domain}"

    def _mount(self, name: str, daemon: Daemon) -> None:
        self.daemons[name] = daemon
        self.transport.mount(f"{name}.{self.domain}", ASGITransport(daemon.app))

    def add_peer(
        self,
        name: str,
        behavior: Behavior | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        multi_session: bool = True,
        token: str | None = None,
        ttl: float = 60,
    ) -> Daemon:
        """Start a peer daemon and register it with the hub under `name`.

        ``token`` is the peer's own credential on a protected fleet: its
        registration is owned by that token's identity.
        """
        if not isinstance(name, str) or not _NAME.match(name) or name == _HUB:
            raise ValueError(
                f"simulator: peer name {name!r} is not usable as a host name; use lower-case "
                "letters, digits and '-' (and not 'hub')"
            )
        if name in self.daemons:
            raise ValueError(f"simulator: the fleet already has a peer named {name!r}")
        owner = None
        if self.tokens is not None and token is not None:
            identity = self.tokens.get(token)
            if identity is None:
                raise ValueError(
                    f"simulator: peer {name!r} was given a token that is not in the fleet's token "
                    "table; add it to Fleet(tokens=...)"
                )
            owner = identity.name
        daemon = Daemon(
            name,
            behavior=behavior,
            multi_session=multi_session,
            tokens=self.tokens,
            clock=self.clock,
        )
        self._mount(name, daemon)
        endpoint = self.url(name)
        if self._served is not None and name in self._served.urls:
            endpoint = self._served.urls[name]
        self.registry.register(name, endpoint, dict(labels or {}), ttl, owner=owner)
        return daemon

    def peer(self, name: str) -> Daemon:
        try:
            return self.daemons[name]
        except KeyError:
            raise KeyError(
                f"simulator: no daemon named {name!r} (have: {', '.join(sorted(self.daemons))})"
            ) from None

    def faults(self, name: str) -> Faults:
        """The mutable `Faults` of one daemon (`"hub"` for the hub)."""
        return self.peer(name).faults

    def expire(self, name: str) -> bool:
        """Let the peer's lease lapse now; False when it was not registered."""
        return self.registry.expire(name)

    def directory(
        self,
        labels: Mapping[str, str] | None = None,
        *,
        token: str | None = None,
        token_env: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> HubDirectory:
        """A `HubDirectory` over this fleet's hub, in-process."""
        return HubDirectory(
            self.hub_url,
            transport=self.transport,
            token=token,
            token_env=token_env,
            labels=labels,
            environ=environ,
        )

    def call_peer(self, **kwargs: Any) -> CallPeer:
        """A `CallPeer` wired to this fleet (its directory uses the same token variable)."""
        kwargs.setdefault("transport", self.transport)
        return _call_peer(self.directory, kwargs)

    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> ServedFleet:
        """Put every daemon on its own loopback socket (hub on `port`, peers after it)."""
        if self._served is not None:
            raise RuntimeError("simulator: this fleet is already served; aclose() it first")
        served = ServedFleet(self)
        await served._start(host, port)
        self._served = served
        return served

    async def aclose(self) -> None:
        """Stop every turn and stream (and the servers, if served)."""
        if self._served is not None:
            await self._served.aclose()
        for daemon in self.daemons.values():
            await daemon.aclose()

    def close(self) -> None:
        """Best-effort synchronous cleanup (for sync fixtures): cancel running turns."""
        for daemon in self.daemons.values():
            daemon.close_streams()
            for task in list(daemon._tasks):
                with contextlib.suppress(RuntimeError):  # its loop may be closed already
                    task.cancel()


def _server_class() -> Any:
    try:
        import uvicorn
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "simulator: serving on sockets needs uvicorn: pip install 'coreagent-sdk[simulator]'"
        ) from exc

    class _Server(uvicorn.Server):  # type: ignore[misc]
        # The fleet owns signal handling: several servers share one process.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return uvicorn, _Server


class ServedFleet:
    """A fleet on loopback sockets: `urls[name]` is each daemon's base URL."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.urls: dict[str, str] = {}
        self._servers: list[tuple[Any, asyncio.Task[None]]] = []

    def __repr__(self) -> str:
        return f"ServedFleet({self.urls!r})"

    async def _start(self, host: str, port: int) -> None:
        if host not in _LOOPBACK:
            raise ValueError(
                f"simulator: serve() binds loopback only, got host {host!r}; use '127.0.0.1'"
            )
        uvicorn, server_class = _server_class()
        try:
            for i, (name, daemon) in enumerate(self.fleet.daemons.items()):
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                # proto=IPPROTO_TCP matters: asyncio turns Nagle off (TCP_NODELAY) only for
                # sockets that say they are TCP, and with Nagle on every small SSE frame
                # waits out the client's delayed ACK (~40 ms a turn).
                sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.bind((host, port + i if port else 0))
                config = uvicorn.Config(
                    daemon.app,
                    interface="asgi3",
                    lifespan="off",
                    log_config=None,
                    access_log=False,
                    timeout_graceful_shutdown=2,
                    timeout_keep_alive=30,
                )
                server = server_class(config)
                task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
                self._servers.append((server, task))
                for _ in range(500):  # up to 5 s for the socket to accept
                    if server.started or task.done():
                        break
                    await asyncio.sleep(0.01)
                if not server.started:
                    sock.close()
                    raise RuntimeError(f"simulator: the server for {name!r} did not start")
                bound = sock.getsockname()[1]
                shown = f"[{host}]" if ":" in host else host
                self.urls[name] = f"http://{shown}:{bound}"
        except BaseException:
            await self.aclose()
            raise
        for name, url in self.urls.items():
            if name != _HUB:
                self.fleet.registry.set_endpoint(name, url)

    @property
    def hub_url(self) -> str:
        return self.urls[_HUB]

    def directory(self, labels: Mapping[str, str] | None = None, **kwargs: Any) -> HubDirectory:
        """A `HubDirectory` over the served hub, through the real network stack."""
        return HubDirectory(self.hub_url, labels=labels, **kwargs)

    def call_peer(self, **kwargs: Any) -> CallPeer:
        """A `CallPeer` over loopback sockets (transport=None)."""
        return _call_peer(self.directory, kwargs)

    async def aclose(self) -> None:
        """Stop the servers and point the registry back at the in-process URLs."""
        for daemon in self.fleet.daemons.values():
            daemon.close_streams()
        for server, _ in self._servers:
            server.should_exit = True
        for server, task in self._servers:
            try:
                await asyncio.wait_for(task, 10)
            except (asyncio.TimeoutError, Exception):
                server.force_exit = True
        self._servers.clear()
        for name in self.urls:
            if name != _HUB:
                self.fleet.registry.set_endpoint(name, self.fleet.url(name))
        self.urls.clear()
        if self.fleet._served is self:
            self.fleet._served = None

    async def __aenter__(self) -> ServedFleet:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
