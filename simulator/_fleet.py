"""`Fleet`: a simulated hub and its peers, in-process or served on loopback sockets."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import math
import re
import socket
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx

from coreagent_sdk import (
    A2A_LABEL,
    ASGITransport,
    CallLog,
    CallPeer,
    Clock,
    HubDirectory,
    RoutingTransport,
    SystemClock,
    quote_name,
)
from coreagent_sdk.errors import LoopBlockedError, NoRouteError
from coreagent_sdk.host import (
    DEFAULT_SESSION_IDLE_TIMEOUT,
    DEFAULT_TTL,
    MAX_TTL,
    Agent,
    Identity,
    PeerRegistry,
    PromptServer,
    SessionRateLimit,
    SharedStore,
    checked_base_url,
    checked_token,
    http_transport,
    shown_url,
    uvicorn_options,
)
from coreagent_sdk.host import AgentHost as Daemon
from coreagent_sdk.jupyter import is_waiting

from ._a2a_peer import A2ABehavior, A2APeer
from ._calls import CallRecorder
from ._faults import Faults
from ._fleet_directory import FleetDirectory
from ._join import HubMembership
from ._roster import RosterEntry, fleet_html, fleet_roster
from .behaviors import echo

__all__ = ["Fleet", "PortInUseError", "ServedFleet"]

_SHOWN_NAMES = 20  # names a repr shows (each at most 63 characters: a host label)
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_HUB = "hub"
_log = logging.getLogger("simulator.fleet")


def _call_peer(make_directory: Callable[..., HubDirectory], kwargs: dict[str, Any]) -> CallPeer:
    """A CallPeer whose hub directory (unless one is given) reads the same token variable."""
    directory = kwargs.pop("directory", None)
    if directory is None:
        directory = make_directory(token_env=kwargs.get("token_env"), environ=kwargs.get("environ"))
    return CallPeer(directory, **kwargs)


class PortInUseError(OSError):
    """`Fleet.serve(port=N)`: a port the fleet needs is taken (`port` says which).

    Attributes:
        errno: `errno.EADDRINUSE`, as the socket's own error has it.
        port: The port that was taken.
    """

    def __init__(self, message: str, port: int) -> None:
        super().__init__(message)
        self.errno = errno.EADDRINUSE
        self.port = port


def _identities(tokens: Mapping[str, Identity | str] | None) -> dict[str, Identity] | None:
    if tokens is None:
        return None
    return {t: (i if isinstance(i, Identity) else Identity(i)) for t, i in tokens.items()}


def _rate_limit(
    value: object, where: str, default: SessionRateLimit | None
) -> SessionRateLimit | None:
    """A `session_rate_limit` argument as the daemon takes it; True is ``default``."""
    if isinstance(value, SessionRateLimit):
        return value
    if value is True:
        return default
    if value is None or value is False:
        return None
    raise ValueError(
        f"simulator: {where} session_rate_limit must be a SessionRateLimit(...), True or "
        f"None/False (off), got {value!r}; pass SessionRateLimit(per_minute=..., burst=...) "
        f"(SessionRateLimit() is the daemon's burst 5, then 10 a minute)"
    )


@attrs.frozen
class _Member:
    """How a fleet peer registers, so that `revive` can do it again."""

    labels: dict[str, str]
    ttl: float
    owner: str | None
    heartbeat: bool
    token: str | None = attrs.field(default=None, repr=False)  # presented to a joined hub


class Fleet:
    """A hub at `http://hub.sim` plus peers at `http://<name>.sim`, all in-process.

    ``tokens`` maps bearer tokens to identities (`Identity` or a name) for a
    protected fleet: every daemon then answers 401 without a valid token, the
    hub records owners and redacts registration ids from non-owners. Without
    it the fleet is open, like a real hub without multi-session auth.

    Peers stay registered for as long as they are part of the fleet: each
    heartbeats at a third of its lease on the fleet's ``clock``, as a real
    daemon does (lazily: no task or request runs while the fleet idles), until
    `expire`, `remove_peer` or `aclose`. Tools from `call_peer` close with the
    fleet.

    ``calls`` is a `CallLog` of every call the fleet carries, each record with
    the ``parent`` call whose turn made it (`delegate` and `fan_out` sub-calls
    included): ``fleet.calls.tree()`` draws the delegation trees,
    `CallTreeView(fleet.calls)` shows them live.

    Fidelity options (see docs/differences.md, "Where we differ from the daemon"):
    ``session_rate_limit`` limits `POST /sessions` per caller on every peer
    (None or False, the default, is off; True or `SessionRateLimit()` is the
    daemon's burst 5, then 10 a minute; anything else is a ValueError);
    ``session_idle_timeout`` evicts sessions idle that long (the daemon's 24 h
    by default; short values keep long experiments small);
    ``refuse_foreign_reregistration`` makes the hub refuse a registration of a
    name another identity owns (a real hub accepts it).

    ``hub`` joins an existing hub (a real one, or another process's
    simulator) instead of using the fleet's own: once `serve()` puts the peers
    on loopback sockets, each registers there at its loopback URL with a lease
    and heartbeats over HTTP, as a daemon does, and deregisters when the
    fleet stops. A fleet bigger than one process is several processes joining
    one hub. Add the peers before `serve()`.

    An exception raised inside a behaviour becomes the peer's turn error
    (kind "unknown"), as on a daemon, and its traceback stays in the peer.
    ``raise_behavior_errors=True`` (for tests) also keeps each such exception
    in `behavior_errors` and re-raises the first, with its traceback, from
    `check_behaviors()`, which `close()` and `aclose()` call (the `fleet`
    fixture's teardown, so a buggy behaviour cannot pass a test quietly).

    Attributes:
        joined: The URL of the hub this fleet joined (``hub=``), else None.
        tokens: Bearer tokens by identity for a protected fleet (empty: open).
        domain: The in-process domain of its URLs (``http://<name>.<domain>``).
        session_rate_limit: The `SessionRateLimit` every peer applies (None: off).
        session_idle_timeout: Seconds before an idle session is evicted.
        registry: The hub's `PeerRegistry`: names, endpoints, labels and leases.
        transport: The in-process `RoutingTransport` that reaches every daemon.
        daemons: Every simulated daemon by name, the hub included.
        a2a_peers: The fleet's A2A agents (`add_a2a_peer`) by name: each one's card,
            executor and app, built with the A2A SDK's own server classes.
        hub: The hub's daemon.
        raise_behavior_errors: Whether `check_behaviors()` re-raises a behaviour's exception.
        behavior_errors: The exceptions behaviours raised, kept while
            ``raise_behavior_errors`` is on.
        calls: A `CallLog` of every call the fleet carries, each record with the
            ``parent`` call whose turn made it (``fleet.calls.tree()``).
        store: The one `SharedStore` (a private temporary file) every daemon of the
            fleet keeps its sessions in, each under its own key; closed by `aclose()`.
    """

    def __init__(
        self,
        *,
        tokens: Mapping[str, Identity | str] | None = None,
        clock: Clock | None = None,
        domain: str = "sim",
        session_rate_limit: SessionRateLimit | bool | None = None,
        session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
        refuse_foreign_reregistration: bool = False,
        hub: str | None = None,
        raise_behavior_errors: bool = False,
    ) -> None:
        # Checked first: a value the daemons cannot use made every peer answer 500.
        limit = _rate_limit(session_rate_limit, "Fleet()", SessionRateLimit())
        self._clock: Clock = clock if clock is not None else SystemClock()
        # Another hub this fleet joins (its peers register there when served), or None.
        self.joined = checked_base_url(hub, "simulator") if hub is not None else None
        if self.joined is not None and not self.joined.startswith("http://"):
            raise ValueError(
                f"simulator: a fleet joins a hub over plain http (its peers are served on "
                f"loopback), got hub={hub!r}; pass the hub's http://host:port URL"
            )
        self.tokens = _identities(tokens)
        self.domain = domain
        self.session_rate_limit: SessionRateLimit | None = limit
        self.session_idle_timeout = session_idle_timeout
        self.registry = PeerRegistry(self._clock)
        self.transport = RoutingTransport()
        # One file, connection and worker thread for every daemon, made on the fleet's first
        # request: a file and a thread per daemon, made on each one's first request, cost a
        # 10,000-peer fleet most of its rate.
        self.store = SharedStore()
        self._store_keys: dict[str, int] = {}  # daemons made under each name so far
        self._retiring: set[asyncio.Task[None]] = set()  # removed daemons being closed
        self.daemons: dict[str, Daemon] = {}
        self._faults: dict[str, Faults] = {}
        self.raise_behavior_errors = bool(raise_behavior_errors)
        # What behaviours raised since the last check_behaviors() (kept only when asked to).
        self.behavior_errors: list[Exception] = []
        self.hub = self._daemon(
            _HUB,
            registry=self.registry,
            tokens=self.tokens,
            clock=self.clock,
            session_idle_timeout=session_idle_timeout,
            refuse_foreign_reregistration=refuse_foreign_reregistration,
        )
        self._mount(_HUB, self.hub)
        self._served: ServedFleet | None = None
        self._members: dict[str, _Member] = {}
        # The fleet's A2A agents (add_a2a_peer), by name; not daemons: no sessions, no faults.
        self.a2a_peers: dict[str, A2APeer] = {}
        self._tools: weakref.WeakSet[CallPeer] = weakref.WeakSet()
        # Each peer's behaviour as given: one that can be closed (a ModelAgent, whose model
        # holds an HTTP client) is closed with the fleet.
        self._behaviors: dict[str, Agent] = {}
        self._recorder = CallRecorder()
        # Every call the fleet carries, each with the call whose turn made it (see _calls).
        self.calls: CallLog = self._recorder.log

    def __repr__(self) -> str:
        # Bounded: a 10,000-peer fleet printed whole was 140 KB on one line.
        names = [n for n in self.daemons if n != _HUB]
        shown = [quote_name(n) for n in names[:_SHOWN_NAMES]]
        peers = ", ".join(
            shown + ([f"+{len(names) - len(shown)} more"] if names[len(shown) :] else [])
        )
        return f"Fleet(hub={shown_url(self.hub_url)!r}, peers=[{peers}])"

    @property
    def clock(self) -> Clock:
        """The clock the hub's leases, every daemon and the heartbeats run on (read-only).

        Everything of the fleet took it at construction, so it cannot be swapped
        afterwards: pass it then, `Fleet(clock=FakeClock())` (with the pytest
        plugin, ``@pytest.mark.fleet(clock=...)`` or ``fleet_factory(clock=...)``).
        """
        return self._clock

    @clock.setter
    def clock(self, value: object) -> None:
        raise AttributeError(
            f"simulator: Fleet.clock is read-only, got an assignment of {value!r}: the hub's "
            "leases, the daemons and the heartbeats took the fleet's clock when it was made; "
            "pass it then: Fleet(clock=FakeClock()), or in a test @pytest.mark.fleet(clock=...) "
            "or fleet_factory(clock=...)"
        )

    @property
    def hub_url(self) -> str:
        """The fleet's hub: its own in-process one, or the hub it joined."""
        return self.joined if self.joined is not None else self.url(_HUB)

    def url(self, name: str) -> str:
        """The in-process base URL of a daemon of this fleet."""
        return f"http://{name}.{self.domain}"

    def _daemon(self, name: str, **options: Any) -> Daemon:
        """A daemon on the agent host, with its own mutable `Faults` in front of it."""
        faults = self._faults[name] = Faults()
        # `turn.call_peer` (a model-driven peer's delegations) goes through the fleet's own
        # tool, made when first used, so the fleet records each call under its turn.
        options.setdefault("peer_tool", self.call_peer)
        if self.raise_behavior_errors:
            options["on_agent_error"] = functools.partial(self._behavior_failed, name)
        # A real daemon's call_peer sends no traceparent; a simulated one behaves so.
        options.setdefault("propagate_trace", False)
        # A peer removed and added again is a new daemon: it starts with no sessions, as one
        # with a store of its own did, so each daemon made under a name has a key of its own.
        self._store_keys[name] = self._store_keys.get(name, 0) + 1
        return Daemon(
            name,
            stream_hook=faults,
            middleware=faults.wrap,
            store=self.store,
            store_key=self._store_key(name),
            **options,
        )

    def _store_key(self, name: str) -> str:
        """The store key of the newest daemon made under `name`."""
        made = self._store_keys[name]
        return name if made == 1 else f"{name}#{made}"

    def _forget(self, key: str) -> None:
        """Delete a removed daemon's rows from the fleet's store (a failure is only logged)."""
        try:
            self.store.forget(key)
        except Exception as exc:  # a disk that fails here fails the next write too, loudly
            _log.warning("simulator: the removed daemon's sessions stay in the store: %s", exc)

    async def _retire(self, daemon: Daemon, key: str) -> None:
        await daemon.aclose()
        self._forget(key)  # what its turns wrote while it closed

    def _behavior_failed(self, name: str, exc: Exception) -> None:
        if hasattr(exc, "add_note"):  # Python 3.11+: say where it happened, under the traceback
            exc.add_note(
                f"simulator: raised by the behaviour of peer {name!r}; its caller got a "
                "turn error of kind 'unknown' (Fleet(raise_behavior_errors=True) re-raised it)"
            )
        self.behavior_errors.append(exc)

    def check_behaviors(self) -> None:
        """Re-raise the first exception a behaviour raised since the last check, and forget them.

        Only with ``raise_behavior_errors=True`` is anything kept. `close()`
        and `aclose()` call this once the fleet is closed.
        """
        errors, self.behavior_errors = self.behavior_errors, []
        if errors:
            raise errors[0]

    def _mount(self, name: str, daemon: Daemon) -> None:
        self.daemons[name] = daemon
        self.transport.mount(f"{name}.{self.domain}", ASGITransport(daemon.app))

    def _own_endpoints(self, name: str) -> tuple[str, ...]:
        """The endpoints under which the fleet itself registers daemon `name`."""
        if self._served is not None and name in self._served.urls:
            return (self.url(name), self._served.urls[name])
        return (self.url(name),)

    def add_peer(
        self,
        name: str,
        behavior: Agent | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        multi_session: bool = True,
        token: str | None = None,
        ttl: float = DEFAULT_TTL,
        heartbeat: bool = True,
        session_rate_limit: SessionRateLimit | bool | None = True,
        a2a: bool = False,
    ) -> Daemon:
        """Start a peer daemon and register it with the hub under `name`.

        ``ttl`` is the lease in seconds; above the hub's maximum
        (`MAX_TTL`, 5 minutes) it is clamped, as the real hub does, and the
        record's `lease_expires_at` shows the clamped lease. The peer
        heartbeats at a third of its lease on the fleet's clock, so it stays
        registered until `expire(name)` or `remove_peer(name)`;
        ``heartbeat=False`` adds one that never heartbeats, whose lease lapses
        after ``ttl`` (for lease experiments). ``token`` is the peer's own
        credential on a protected fleet: its registration is owned by that
        token's identity; on a joined hub the peer registers (and heartbeats)
        with it, as a daemon does with its attach token, so the hub records
        that identity as the owner. ``session_rate_limit`` overrides the fleet's for this
        peer (True: the fleet's; None or False: off; or a `SessionRateLimit`).
        ``a2a=True`` makes the peer answer A2A clients too (`AgentHost(a2a=True)`: the A2A
        SDK's JSON-RPC at its URL, declared on its card), beside the attach wire.
        """
        if not isinstance(name, str) or not _NAME.match(name) or name == _HUB:
            raise ValueError(
                f"simulator: peer name {name!r} is not usable as a host name; use lower-case "
                "letters, digits and '-' (and not 'hub')"
            )
        if name in self.daemons:
            raise ValueError(f"simulator: the fleet already has a peer named {name!r}")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf:
            raise ValueError(
                f"simulator: ttl must be a positive number of seconds, got {ttl!r}; "
                f"the default is {DEFAULT_TTL:g} and the hub clamps it to {MAX_TTL:g}"
            )
        limit = _rate_limit(session_rate_limit, "add_peer()", self.session_rate_limit)
        owner = None
        if self.tokens is not None and token is not None:
            identity = self.tokens.get(token)
            if identity is None:
                raise ValueError(
                    f"simulator: peer {name!r} was given a token that is not in the fleet's token "
                    "table; add it to Fleet(tokens=...)"
                )
            owner = identity.name
        if behavior is not None:
            self._behaviors[name] = behavior
        daemon = self._daemon(
            name,
            behavior=self._recorder.observe(name, behavior if behavior is not None else echo()),
            multi_session=multi_session,
            tokens=self.tokens,
            clock=self.clock,
            session_rate_limit=limit,
            session_idle_timeout=self.session_idle_timeout,
            a2a=a2a,
        )
        self._mount(name, daemon)
        self._members[name] = _Member(
            dict(labels or {}),
            ttl,
            owner,
            bool(heartbeat),
            checked_token(token, "token=", "simulator"),
        )
        self._register(name)
        return daemon

    def add_a2a_peer(
        self,
        name: str,
        behavior: A2ABehavior | None = None,
        *,
        executor: Any = None,
        description: str = "",
        streaming: bool = True,
        labels: Mapping[str, str] | None = None,
        ttl: float = DEFAULT_TTL,
    ) -> A2APeer:
        """Run an A2A agent built with the A2A SDK's own server classes, registered as `name`.

        It answers A2A's JSON-RPC transport (and serves its card) at
        ``http://<name>.<domain>``, in-process; the hub lists it with the label
        ``protocol=a2a``, so the fleet's `CallPeer` tools (and a `ModelAgent`'s
        ``call_peer``) reach it by name, over A2A, beside the attach daemons.
        ``behavior`` is ``fn(prompt)`` returning the answer (sync or async) or an
        async generator of chunks; ``executor`` an `AgentExecutor` of your own
        (default: an echo). ``streaming=False`` serves a card without streaming.
        It stays registered (heartbeating) until `expire` or `remove_peer`.
        Needs the ``a2a`` extra. `serve()` puts it on a loopback socket as it does the
        daemons (its card then names its loopback URL); one added after `serve()` stays
        in-process.
        """
        if not isinstance(name, str) or not _NAME.match(name) or name == _HUB:
            raise ValueError(
                f"simulator: peer name {name!r} is not usable as a host name; use lower-case "
                "letters, digits and '-' (and not 'hub')"
            )
        if name in self.daemons or name in self.a2a_peers:
            raise ValueError(f"simulator: the fleet already has a peer named {name!r}")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf:
            raise ValueError(
                f"simulator: ttl must be a positive number of seconds, got {ttl!r}; "
                f"the default is {DEFAULT_TTL:g} and the hub clamps it to {MAX_TTL:g}"
            )
        agent = A2APeer(
            name,
            self.url(name),
            behavior,
            executor,
            description,
            bool(streaming),
            functools.partial(self._recorder.answering, name),
        )
        self.a2a_peers[name] = agent
        self.transport.mount(f"{name}.{self.domain}", ASGITransport(agent.app))
        self._members[name] = _Member({**dict(labels or {}), A2A_LABEL: "a2a"}, ttl, None, True)
        self._register(name)
        return agent

    def _register(self, name: str) -> None:
        member = self._members[name]
        endpoint = self._own_endpoints(name)[-1]  # the loopback one while served
        self.registry.register(name, endpoint, dict(member.labels), member.ttl, owner=member.owner)
        if member.heartbeat:
            self.registry.keep_alive(name)

    def peer(self, name: str) -> Daemon:
        """The daemon named `name` (a KeyError listing the names there are, if none)."""
        try:
            return self.daemons[name]
        except KeyError:
            raise KeyError(
                f"simulator: no daemon named {name!r} (have: {', '.join(sorted(self.daemons))})"
            ) from None

    def _member(self, name: str, verb: str) -> _Member:
        member = self._members.get(name)
        if member is None:
            raise KeyError(
                f"simulator: cannot {verb} {name!r}: the fleet has no such peer (peers: "
                f"{', '.join(sorted(self._members)) or 'none'}); add it with add_peer()"
            )
        return member

    def roster(self) -> list[RosterEntry]:
        """Every peer daemon of the fleet, registered or not, read now (sorted by name)."""
        return fleet_roster(self)

    def _repr_html_(self) -> str:
        return fleet_html(self)

    def faults(self, name: str) -> Faults:
        """The mutable `Faults` of one daemon (`"hub"` for the hub)."""
        self.peer(name)  # an unknown name raises KeyError listing the daemons
        return self._faults[name]

    def expire(self, name: str) -> bool:
        """Let the peer's lease lapse now, as if it stopped heartbeating; False if not registered.

        A fleet peer stays gone (its daemon still runs) until `revive(name)`.
        On a joined hub it stops heartbeating there, and its lease lapses there.
        A name that is neither a fleet peer nor registered on the hub is a
        mistake (a typo): it raises `KeyError`, as `faults(name)` does.
        """
        if name not in self._members and self.registry.lookup(name) is None:
            self._member(name, "expire")  # raises, listing the fleet's peers
        if self._served is not None and self._served.membership is not None:
            self._served.membership.forget(name)
        return self.registry.expire(name)

    def revive(self, name: str) -> None:
        """Register a fleet peer again (a new registration id), heartbeating if it did before.

        On a joined hub it registers there again too, as a restarted daemon does.
        """
        member = self._member(name, "revive")
        self._register(name)
        served = self._served
        if served is not None and served.membership is not None and name in served.urls:
            served.membership.add(name, served.urls[name], member.labels, member.ttl, member.token)

    def reset(self) -> None:
        """Undo what a test did to a shared fleet: faults healed, leases back, turns stopped.

        For a fleet that outlives one test (a module- or session-scoped
        fixture): every daemon's `Faults` is cleared, every fleet peer that is
        not registered (expired, lapsed, removed from the hub) registers again
        as `revive` does, running turns are cancelled, and what behaviours
        raised is forgotten (call `check_behaviors()` at each test's teardown
        to see it). Peers, their behaviours and the clock's time stay as they are.
        """
        self.behavior_errors = []
        for name in self.daemons:
            self.faults(name).clear()
        for daemon in self.daemons.values():
            _cancel(daemon)
        for name in self._members:
            entry = self.registry.lookup(name)
            if entry is None or entry.endpoint not in self._own_endpoints(name):
                self.revive(name)  # on a joined hub too

    def remove_peer(self, name: str) -> None:
        """Deregister a fleet peer, stop its daemon (and its socket, if served), forget it.

        On a joined hub it stops heartbeating there and is deregistered there (soon after,
        by the membership's task), as a stopping daemon deregisters.
        """
        self._member(name, "remove")
        if self._served is not None and self._served.membership is not None:
            self._served.membership.leave(name)
        entry = self.registry.lookup(name)
        if entry is not None and entry.endpoint in self._own_endpoints(name):
            self.registry.remove(name)
        if self._served is not None:
            self._served._stop(name)
        del self._members[name]
        self.transport.unmount(f"{name}.{self.domain}")
        if self.a2a_peers.pop(name, None) is not None:
            return
        daemon = self.daemons.pop(name)
        _cancel(daemon)
        # Its sessions leave the fleet's one store with it: the key is never used again (a
        # peer added under the name is a new daemon with a key of its own).
        key = self._store_key(name)
        self._forget(key)
        with contextlib.suppress(RuntimeError):  # no running loop: nothing of it still runs
            task = asyncio.get_running_loop().create_task(self._retire(daemon, key))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    def directory(
        self,
        labels: Mapping[str, str] | None = None,
        *,
        token: str | None = None,
        token_env: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> HubDirectory:
        """A `HubDirectory` over this fleet's hub, in-process (over the network if joined)."""
        return HubDirectory(
            self.hub_url,
            transport=self.transport if self.joined is None else None,
            token=token,
            token_env=token_env,
            labels=labels,
            environ=environ,
        )

    def call_peer(self, **kwargs: Any) -> CallPeer:
        """A `CallPeer` that reaches this fleet in-process, closed with the fleet.

        Names resolve against the hub's registry directly (a `FleetDirectory`:
        same leases as `GET /peers`, no HTTP, no roster read per call), and
        peers are dialed in-process even while the fleet is served. Pass
        ``directory=fleet.directory()`` to go through the hub's HTTP API.

        A fleet that joined another hub resolves names there and dials every
        peer over the network (its own are served on loopback).
        """
        kwargs["on_event"] = self._recorder.hook(kwargs.get("on_event"))
        if self.joined is not None:
            kwargs.setdefault("transport", None)
            tool = _call_peer(self.directory, kwargs)
            self._tools.add(tool)
            return tool
        kwargs.setdefault("transport", self.transport)
        kwargs.setdefault("directory", FleetDirectory(self))
        tool = CallPeer(**kwargs)
        self._tools.add(tool)
        return tool

    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> ServedFleet:
        """Put every daemon on its own loopback socket (hub on `port`, peers after it).

        ``port=0`` (the default) takes free ports. A port that is taken raises
        `PortInUseError` (an `OSError`) naming it; a host that is not loopback,
        or a port range past 65535, raises `ValueError`.
        """
        if self._served is not None:
            raise RuntimeError("simulator: this fleet is already served; aclose() it first")
        usable = isinstance(port, int) and not isinstance(port, bool) and port >= 0
        if not usable or (port and port + len(self.daemons) - 1 > 65535):
            raise ValueError(
                f"simulator: serve() needs port to be 0 (free ports) or a port with room for "
                f"{len(self.daemons)} daemon(s) up to 65535, got {port!r}"
            )
        served = ServedFleet(self)
        await served._start(host, port)
        self._served = served
        return served

    async def aclose(self) -> None:
        """Close the tools it handed out, stop every turn and stream (and the servers), then
        close each peer's behaviour that can be closed: a `ModelAgent` closes its model's
        HTTP client (an adapter so closed opens a fresh one if it is used again)."""
        for tool in list(self._tools):
            await tool.aclose()
        if self._served is not None:
            await self._served.aclose()
        await asyncio.gather(*self._retiring, return_exceptions=True)
        for daemon in self.daemons.values():
            await daemon.aclose()
        await self.store.aclose()  # after every daemon wrote its sessions
        closed: set[int] = set()
        for behavior in list(self._behaviors.values()):
            close = getattr(behavior, "aclose", None)
            if close is not None and id(behavior) not in closed:
                closed.add(id(behavior))
                await close()
        self.check_behaviors()

    def close(self) -> None:
        """Synchronous cleanup (for sync fixtures): cancel running turns, stop the servers.

        A fleet served on a loop that is idle now is closed there in full, as `aclose`
        does. A loop torn down with the fleet still served (pytest-asyncio closes an
        async test's loop before a sync fixture's teardown) has stopped its servers as
        it cancelled them; their listening sockets are closed here in any case. The
        fleet's store (`fleet.store`) is closed here too, its file removed, what this
        thread's loop queued committed first.
        """
        self._close()
        self.check_behaviors()

    def _close(self) -> None:
        served = self._served
        loop = served._loop if served is not None else None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            here = False
        else:
            here = True  # sync code under a running loop: no loop can be run from here
        if loop is not None and not here and not loop.is_closed() and not loop.is_running():
            loop.run_until_complete(self.aclose())  # aclose checks the behaviours too
            return
        if served is not None and (loop is None or loop.is_closed()):
            for sock in served._sockets:
                sock.close()
        for daemon in self.daemons.values():
            _cancel(daemon)
        self.store.close()  # not left to a finalizer: its file and worker thread end here


def _cancel(daemon: Daemon) -> None:
    daemon.close_streams()
    for task in list(daemon._tasks):
        with contextlib.suppress(RuntimeError):  # its loop may be closed already
            task.cancel()


class _ServedTransport(httpx.AsyncBaseTransport):
    """The network (one pool per loop), refusing at once what the serving loop must answer.

    A sync call made on the loop that serves this fleet blocks that loop
    until it returns (see `run_sync`), so the fleet's sockets could not answer
    it: without this check the call would wait out its whole deadline.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._pools: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, httpx.AsyncHTTPTransport
        ] = weakref.WeakKeyDictionary()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        here = asyncio.get_running_loop()
        if self._loop is not None and here is not self._loop and is_waiting(self._loop):
            raise LoopBlockedError(
                f"simulator: {request.url.host}:{request.url.port} is served on the loop that "
                "is waiting for this sync call, so it cannot answer until the call returns "
                "(nothing was sent); `await tool.acall(...)` there instead, call in-process "
                "with fleet.call_peer(), or run coreagent_sdk.jupyter.enable_nested_sync() "
                "once to let sync calls re-enter the notebook's loop"
            )
        pool = self._pools.get(here)
        if pool is None:
            pool = self._pools[here] = http_transport()
        return await pool.handle_async_request(request)

    async def aclose(self) -> None:
        # A tool or directory closing its client: on the serving loop the pool is the served
        # fleet's (shared by every tool it handed out) and closes with it; any other loop is
        # a sync call's own, which dies with that call, so its connections go now.
        if asyncio.get_running_loop() is not self._loop:
            await self.release()

    async def release(self) -> None:
        """Close this loop's pooled connections (the served fleet does, as it stops)."""
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()


class _LoopbackPeers(httpx.AsyncBaseTransport):
    """Where a served fleet's in-process tools send a peer that is not the fleet's own.

    A served hub lists whatever registers on it, such as an `AgentHost` in another process:
    its loopback endpoint goes over the served network; any other host is refused before
    anything is dialed, as an unrouted host always was.
    """

    def __init__(self, network: httpx.AsyncBaseTransport) -> None:
        self._network = network

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host not in ("127.0.0.1", "::1"):  # addresses, never a name to resolve
            raise NoRouteError(
                f"simulator: a served fleet reaches peers on loopback only, not "
                f"{request.url.host!r}; register the peer at a 127.0.0.1 endpoint"
            )
        return await self._network.handle_async_request(request)


class ServedFleet:
    """A fleet on loopback sockets: `urls[name]` is each daemon's base URL.

    While served, the hub lists the loopback endpoints, and `fleet.transport`
    also routes those hosts in-process, so tools made from the fleet (before
    or after serving) keep calling in-process; `call_peer()` here goes over
    the sockets.

    Attributes:
        fleet: The `Fleet` being served.
        urls: Each daemon's loopback base URL, by name (the hub's too).
        membership: The fleet's membership of a joined hub (registrations and
            heartbeats over HTTP); None when it uses its own hub.
    """

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.urls: dict[str, str] = {}
        self._servers: dict[str, tuple[Any, asyncio.Task[None]]] = {}
        self._stopped: list[tuple[Any, asyncio.Task[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop serving it
        # The loopback connections of every tool and directory this hands out: theirs to use,
        # the served fleet's to close, so a tool used inline and collected owns no socket.
        self._network = _ServedTransport()
        self._foreign: _LoopbackPeers | None = None  # fleet.transport's default while served
        self._sockets: list[socket.socket] = []
        # The peers' leases on the hub a joined fleet registers with (None: its own hub).
        self.membership: HubMembership | None = None

    def __repr__(self) -> str:
        return f"ServedFleet({self.urls!r})"

    async def _start(self, host: str, port: int) -> None:
        if host not in _LOOPBACK:
            raise ValueError(
                f"simulator: serve() binds loopback only, got host {host!r}; use '127.0.0.1'"
            )
        import uvicorn  # (coreagent_sdk.host, imported above, needs it already)

        self._loop = self._network._loop = asyncio.get_running_loop()
        try:
            # Every server starts at once and one loop waits for them all: started one
            # after another, a 1,000-peer fleet took 12 s to serve (a poll tick each).
            starting: list[tuple[str, Any, Any, socket.socket]] = []
            apps = [(n, d.app) for n, d in self.fleet.daemons.items()]
            apps += [(n, a.app) for n, a in self.fleet.a2a_peers.items()]  # add_a2a_peer's
            for i, (name, app) in enumerate(apps):
                if name == _HUB and self.fleet.joined is not None:
                    continue  # the joined hub keeps the roster: this fleet's own is not served
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                # proto=IPPROTO_TCP matters: asyncio turns Nagle off (TCP_NODELAY) only for
                # sockets that say they are TCP, and with Nagle on every small SSE frame
                # waits out the client's delayed ACK (~40 ms a turn).
                sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                want = port + i if port else 0
                try:
                    sock.bind((host, want))
                except OSError as exc:
                    sock.close()
                    if exc.errno != errno.EADDRINUSE:
                        raise
                    role = "the hub" if name == _HUB else f"peer {name!r}"
                    raise PortInUseError(
                        f"simulator: port {want} on {host} is already in use (wanted for {role}; "
                        f"the hub takes port={port} and the peers the ports after it); another "
                        "fleet or program holds it: stop it, pick another port, or pass port=0 "
                        "for free ports",
                        want,
                    ) from None
                config = uvicorn.Config(
                    app,
                    interface="asgi3",
                    lifespan="off",
                    timeout_graceful_shutdown=2,
                    # A daemon's header size limit and ReadHeaderTimeout (server.go Bind), as
                    # a served host has them: without, h11 refused 17 KiB headers sent in two
                    # writes and a slowloris client held its connection for ever. Quiet: no
                    # access line and no logger of the process configured (uvicorn's own
                    # access_log=False emptied the user's uvicorn.access logger).
                    **uvicorn_options(quiet=True),
                )
                # The host's server: started and stopped when told (not at uvicorn's next
                # 0.1 s tick), signals left to the fleet (several servers, one process).
                server = PromptServer(config)
                task = asyncio.get_running_loop().create_task(self._serve(server, sock))
                self._servers[name] = (server, task)
                starting.append((name, app, server, sock))
                self._sockets.append(sock)
            bound = 5 + 0.01 * len(starting)  # up to 5 s, and 10 ms more per server
            await asyncio.gather(
                *(s.started_within(self._servers[n][1], bound) for n, _, s, _ in starting)
            )
            for name, app, server, sock in starting:
                if not server.started:
                    sock.close()
                    raise RuntimeError(f"simulator: the server for {name!r} did not start")
                bound = sock.getsockname()[1]
                shown = f"[{host}]" if ":" in host else host
                self.urls[name] = f"http://{shown}:{bound}"
                self.fleet.transport.mount(f"{shown}:{bound}", ASGITransport(app))
                agent = self.fleet.a2a_peers.get(name)
                if agent is not None:
                    agent.served_url = self.urls[name]
            if self.fleet.transport.default is None:
                # Peers that registered on the served hub from elsewhere (a host process).
                self._foreign = self.fleet.transport.default = _LoopbackPeers(self._network)
        except BaseException:
            await self.aclose()
            raise
        for name, url in self.urls.items():
            self._point(name, self.fleet.url(name), url)
        if self.fleet.joined is not None:
            await self._join(self.fleet.joined)

    async def _serve(self, server: Any, sock: socket.socket) -> None:
        try:
            await server.serve(sockets=[sock])
        except asyncio.CancelledError:
            # The loop is being torn down with the fleet still served (a test that never
            # closed it): stop now, on this loop, so no socket outlives it unclosed.
            server.force_exit = True  # connections are closed, not waited for
            with contextlib.suppress(Exception):
                await server.shutdown(sockets=[sock])
            with contextlib.suppress(Exception):
                await self._network.release()
            raise

    async def _join(self, hub: str) -> None:
        """Register every served peer on the joined hub at its loopback URL, and keep it."""
        self.membership = HubMembership(hub, clock=self.fleet.clock)
        members = self.fleet._members
        try:
            await self.membership.join(
                (name, url, members[name].labels, members[name].ttl, members[name].token)
                for name, url in self.urls.items()
                if name in members
            )
        except BaseException:
            await self.aclose()
            raise

    def _point(self, name: str, old: str, new: str) -> None:
        """Move a fleet peer's registration from endpoint `old` to `new` (not someone else's)."""
        entry = self.fleet.registry.lookup(name)
        if name != _HUB and entry is not None and entry.endpoint == old:
            self.fleet.registry.set_endpoint(name, new)

    def _stop(self, name: str) -> None:
        """Stop serving one daemon now (its server finishes in the background until aclose)."""
        url = self.urls.pop(name, None)
        if url is not None:
            self.fleet.transport.unmount(url.removeprefix("http://"))
        got = self._servers.pop(name, None)
        if got is not None:
            got[0].should_exit = True
            self._stopped.append(got)

    @property
    def hub_url(self) -> str:
        """The hub's URL: the loopback one, or the joined hub's."""
        return self.fleet.joined if self.fleet.joined is not None else self.urls[_HUB]

    def directory(self, labels: Mapping[str, str] | None = None, **kwargs: Any) -> HubDirectory:
        """A `HubDirectory` over the served hub, through the real network stack."""
        kwargs.setdefault("transport", self._network)
        return HubDirectory(self.hub_url, labels=labels, **kwargs)

    def call_peer(self, **kwargs: Any) -> CallPeer:
        """A `CallPeer` over loopback sockets, closed with the fleet.

        A sync call to it from the loop that serves the fleet fails at once
        (that loop waits for the call, so its sockets cannot answer): await
        `acall` there, or use `fleet.call_peer()`.
        """
        kwargs.setdefault("transport", self._network)
        kwargs["on_event"] = self.fleet._recorder.hook(kwargs.get("on_event"))
        tool = _call_peer(self.directory, kwargs)
        self.fleet._tools.add(tool)
        return tool

    async def aclose(self) -> None:
        """Deregister from a joined hub, stop the servers, point the registry back in-process."""
        membership, self.membership = self.membership, None
        if membership is not None:
            try:
                await membership.aclose()
            except Exception:  # never leave the servers listening over a hub's odd answer
                _log.exception("simulator: leaving the joined hub failed")
        await self._network.release()
        for daemon in self.fleet.daemons.values():
            daemon.close_streams()
        servers = [*self._servers.values(), *self._stopped]
        for server, _ in servers:
            server.should_exit = True
        for server, task in servers:
            try:
                await asyncio.wait_for(task, 10)
            except (asyncio.TimeoutError, Exception):
                server.force_exit = True
        self._servers.clear()
        self._stopped.clear()
        for sock in self._sockets:
            sock.close()  # uvicorn closed those it started with; not one that failed to start
        self._sockets.clear()
        for name, url in self.urls.items():
            self.fleet.transport.unmount(url.removeprefix("http://"))
            self._point(name, url, self.fleet.url(name))
            agent = self.fleet.a2a_peers.get(name)
            if agent is not None:
                agent.served_url = None
        self.urls.clear()
        if self._foreign is not None and self.fleet.transport.default is self._foreign:
            self.fleet.transport.default = None
        self._foreign = None
        if self.fleet._served is self:
            self.fleet._served = None

    async def __aenter__(self) -> ServedFleet:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
