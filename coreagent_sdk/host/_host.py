"""The agent host: the ASGI app of one daemon's attach server (and, with a registry, of a hub).

It answers with the status codes and shapes of `protocol.md`: 201/204/400/
401/403/404/409/415/429/501 where a real daemon does, SSE frames written
exactly `event: X\\ndata: {json}\\n\\n`, `capabilities` first, then a status
snapshot, the replayed log, then live frames to the subscribers connected at
the time.

Memory is bounded as a daemon's is: a session keeps the newest
`REPLAY_WINDOW` events, a session idle for `session_idle_timeout` is evicted
from memory to the host's store (one with a running turn is never idle) and
resumed from it by the next request, and `DELETE` frees a session at once.
Bodies are counted while they are read and refused past their cap.

This module holds what core-agent's `pkg/attach/server.go` and `registry.go`
hold: the host itself, its routes, auth and write guard, session lookup,
resume and idle eviction, and its lifecycle. A session and its fan-out are in
`_session`, the events endpoint in `_events_endpoint`, the session routes in
`_session_handlers`, a hub's `/peers` routes in `_peers_handlers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .._attach._agentcard import AGENT_CARD_PATH
from .._attach._token import credential_variable
from .._clock import Clock, SystemClock
from .._http._endpoint import checked_base_url
from .._peer._call_peer import CallPeer
from .._peer._directory import Directory, HubDirectory
from .._version import __version__
from ..errors import CoreAgentError
from ._agents import Agent, echo
from ._attach_auth import attach_refusal, presented_token, read_attach_token
from ._capabilities import capabilities_frame
from ._card import card_response
from ._daemon import StreamHook
from ._events_endpoint import _EventsEndpoint
from ._gowire import is_json_media_type, origin_allowed
from ._gowire import sse as encode_sse
from ._host_routes import HOST, host_routes
from ._ratelimit import SessionRateLimit, SessionRateLimiter
from ._registry import ANONYMOUS, Identity, PeerRegistry
from ._replies import _q, _text, _unauthorized
from ._runtimes import Runtimes
from ._session import STARTUP_SESSION, _Session
from ._shared_store import SharedStore
from ._shared_store import session_store as _session_store
from ._spans import ServerSpans
from ._stop_request import StopRequest
from ._store import StoredSession
from ._store_errors import STORE_ERRORS, _unreadable
from ._sweeps import Sweeps, sweeps_of

if TYPE_CHECKING:
    from ._a2a import A2AEndpoint

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_MAX_SESSIONS_IN_MEMORY",
    "DEFAULT_SESSION_IDLE_TIMEOUT",
    "AgentHost",
    "StreamHook",
]

DEFAULT_SESSION_IDLE_TIMEOUT = 24 * 3600.0  # the daemon's session_idle_timeout
"""Seconds a session may sit idle before eviction, the daemon's default (24 h)."""
DEFAULT_MAX_SESSIONS_IN_MEMORY = 1_000
"""Idle sessions a host keeps in memory; past it the least recently used go to its store."""
DEFAULT_GRACE = 5.0  # seconds a stopping host lets running turns finish
_CAPABILITIES_KEPT = 64  # capabilities frames kept encoded, one per caller and address
DAEMON_RATE_LIMIT = SessionRateLimit()  # a daemon limits POST /sessions unless told not to


# The header a proxy asserts another identity with (core-agent `auth.HeaderAssertedCaller`).
_PROXY_HEADER = "x-asserted-caller"


def _cancel_anywhere(task: asyncio.Task[None]) -> None:
    """Cancel a task of this loop or another one (a closed loop's tasks are gone already)."""
    other = task.get_loop()
    if other is asyncio.get_running_loop():
        task.cancel()
    elif not other.is_closed():
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            other.call_soon_threadsafe(task.cancel)


class _Guard:
    """Auth and the JSON content type, checked once in front of every route."""

    def __init__(self, app: ASGIApp, daemon: AgentHost) -> None:
        self.app = app
        self.daemon = daemon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        daemon = self.daemon
        scope[HOST] = daemon  # the shared routes answer for the host named here
        if scope["type"] == "http" and scope["path"] == AGENT_CARD_PATH and daemon.description:
            # The card bypasses auth, as the daemon's cardBypass routes it: discovery is public.
            await daemon.card(Request(scope))(scope, receive, send)
            return
        if scope["type"] == "http":
            if not daemon._ready():
                await daemon.open()
            refused = self.daemon.refuse(Request(scope))
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


class AgentHost:
    """Serves an agent on the attach wire as a core-agent daemon does; a hub with a `registry`.

    ``host.app`` is an ASGI app: `serve()` puts it on a socket (and joins a hub given
    ``register_to``), or `coreagent_sdk.ASGITransport(host.app)` calls it in-process.

    Args:
        name: The agent's name: its card's name, and a simulated fleet's peer name.
        behavior: The agent, an async function of a `Turn` (None: it echoes the prompt).
        multi_session: False answers 501 to `POST /sessions`, as a daemon without a
            session factory; every daemon has its startup session, `default`.
        tokens: Bearer tokens to identities. None is an open daemon that accepts
            anonymous callers (and redacts nothing); with tokens, a caller sees only its
            own sessions (an admin sees all).
        attach_token_env: The environment variable holding one shared token every caller
            must present, as a daemon started with ``--attach-token`` requires (read once,
            here; 401 with ``realm="attach"`` before any other check; the card declares the
            bearer scheme); it combines with ``tokens`` as the daemon's two layers do.
        registry: A `PeerRegistry` makes this host a hub (`/peers`).
        clock: The clock of leases, rate limits and idle eviction (None: the system's).
        app_name: The app every session belongs to (`/sessions/{app}/{sid}`).
        model: The model name the capabilities and status frames report.
        provider: The provider name the capabilities frame reports.
        session_rate_limit: Limits `POST /sessions` per caller, on by default with the
            daemon's defaults (burst 5, then 10 a minute); None turns it off.
        session_idle_timeout: Seconds a session may sit idle before it is evicted from
            memory (0: never); an evicted session stays listed as `idle` and the next
            request resumes it from ``store``.
        max_sessions_in_memory: Sessions kept in memory besides `default`: past it, the
            least recently used ones without a turn, a queued message or an open event
            stream are evicted to ``store`` as the idle sweep evicts them, so what finished
            delegations leave in memory is bounded (None: no bound, as a daemon keeps
            them until ``session_idle_timeout``; see docs/differences.md).
        refuse_foreign_reregistration: A hub refuses (403) a registration of a name
            another identity owns; a real hub does not.
        description: Turns on the A2A discovery card at `/.well-known/agent-card.json`
            (public, as a daemon serves it); "" serves no card.
        skills: The card's skills, name to description.
        external_url: The URL the card names (its ``url``; with ``a2a``, its JSON-RPC
            interface's) instead of the one it was fetched from: the daemon's
            ``--agent-card-external-url``, for a host behind a proxy that forwards neither
            ``Host`` nor ``X-Forwarded-Host`` (callers refuse a card naming another origin
            than the one they read it from, unless they trust that host).
        register_to: The hub `serve()` joins (registers, heartbeats, deregisters).
        endpoint: The URL the hub gives callers (None: where `serve()` listens).
        labels: The labels the host registers with.
        ttl: The lease `serve()` asks of the hub, in seconds (heartbeats at a third).
        token_env: The environment variable holding the host's token (read when used).
        directory: Where `turn.call_peer` looks peers up (None: the joined hub).
        peer_transport: The transport of calls made inside turns (None: the network).
        peer_tool: Makes the `CallPeer` of `turn.call_peer` (None: one over `directory`).
        stream_hook: Sees every event stream's frames (the simulator's faults use it).
        middleware: Wraps the ASGI app (the simulator's faults use it).
        on_agent_error: Called with an exception the agent raised (not `Turn.error`)
            once its turn-error (kind "unknown") is sent: the caller never sees the
            traceback, so a host logs it there (the simulator's `raise_behavior_errors`
            re-raises it in the test).
        runtimes: A `RuntimeCache`: each turn gets the agent's runtime as
            `turn.runtime`, built on first use under ``agent_id`` and leased for the
            turn, so the cache never closes it mid-turn (`MultiAgentHost` serves many
            agents this way).
        agent_id: The agent's id in ``runtimes`` (None: ``name``).
        store: The host's event log and its sessions, a SQLite file: every event is
            written there before it is sent, a session answered 201 once its row is
            (the file you name keeps them for a host started on it again, and this host
            holds it alone until it closes); None is a private temporary file, made on
            first use and removed by `aclose()`; a `SharedStore` keeps them in a file
            several hosts of this process share, under ``store_key``.
        propagate_trace: A `call_peer` made inside a turn sends `traceparent`, so the
            callee's trace continues this one; a daemon's does not, and False behaves
            as it does (docs/guides/tracing.md).
        store_sync: What each commit to ``store`` survives: "normal" (the default) a
            killed process, "full" a power cut too, for a disk sync per commit
            (docs/guides/host.md); with a `SharedStore`, the store's own setting
            applies ("full" is refused if the store's is "normal").
        store_key: This host's key in a `SharedStore` (None: its ``name``); no other
            host may use it until this one's `aclose()`.
        a2a: Also answer the A2A JSON-RPC transport (the official A2A SDK's server; the
            ``a2a`` extra) at `POST /` on the same port, behind the same auth: each
            message a turn in a fresh session, its chunks streamed as artifact updates,
            its answer the completed task's artifact, a turn error a failed task with
            its kind and retryable flag, `CancelTask` stopping the turn. The card then
            declares the transport at its URL (it is served with or without a
            ``description``). See docs/guides/a2a.md.

    Attributes:
        name: The agent's name: its card's name, and a simulated fleet's peer name.
        behavior: The agent: an async function of a `Turn` (echo() when none is given).
        multi_session: False answers 501 to `POST /sessions`, as a daemon without a
            session factory.
        tokens: Bearer tokens to identities, or None for an open daemon.
        attach_token_env: The variable holding the shared attach token, or None (the
            token itself is kept out of every attribute, repr and message).
        registry: The hub's `PeerRegistry` when this host is a hub, else None.
        clock: The clock of leases, rate limits and idle eviction.
        app_name: The app every session belongs to (`/sessions/{app}/{sid}`).
        model: The model name the capabilities and status frames report.
        provider: The provider name the capabilities frame reports.
        session_idle_timeout: Seconds a session may sit idle before it is evicted
            (0: never).
        max_sessions_in_memory: Sessions kept in memory besides `default` before the
            least recently used idle ones are evicted to the store (None: no bound).
        refuse_foreign_reregistration: True makes the hub answer 403 to a registration
            of a name another identity owns.
        rate_limiter: The `POST /sessions` rate limiter, or None when it is off.
        sessions: The sessions in memory, by session id (`default` always among them);
            evicted ones are in `store`.
        store: Where sessions are kept when evicted, and across restarts with a named file.
        app: The ASGI app to serve (the attach routes behind the host's guard and
            any `middleware`).
        stream_hook: Sees every event stream's frames (the simulator's faults), or None.
        on_agent_error: Called with an exception an agent raised, after its turn-error
            is sent, or None.
        description: The agent card's description ("" serves no card).
        skills: The card's skills of this host's agent, name to description.
        external_url: The URL the card names, or None (the URL it was fetched from).
        register_to: The hub `serve()` joins, or None.
        endpoint: The URL the hub gives callers (None: where `serve()` listens).
        labels: The labels the host registers with.
        ttl: The lease `serve()` asks of the hub, in seconds (heartbeats at a third of it).
        token_env: The environment variable holding the host's token (read when used).
        directory: Where `turn.call_peer` looks peers up (the joined hub by default).
        peer_transport: The transport of the host's own calls (None: the network).
        peer_tool: Makes the `CallPeer` of `turn.call_peer` (None: one over `directory`).
        draining: True while a stopping host refuses new work (503).
        runtimes: The `RuntimeCache` each turn leases this agent's runtime from
            (`turn.runtime`), or None: turns get no runtime.
        agent_id: The agent's id in `runtimes` (its name unless given).
        propagate_trace: True when calls made inside a turn send `traceparent`.
        a2a: True when the host answers A2A's JSON-RPC at `POST /`.
    """

    def __init__(
        self,
        name: str,
        *,
        behavior: Agent | None = None,
        multi_session: bool = True,
        tokens: Mapping[str, Identity] | None = None,
        attach_token_env: str | None = None,
        registry: PeerRegistry | None = None,
        clock: Clock | None = None,
        app_name: str = "core-agent",
        model: str = "sim-model",
        provider: str = "sim",
        session_rate_limit: SessionRateLimit | None = DAEMON_RATE_LIMIT,
        session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
        max_sessions_in_memory: int | None = DEFAULT_MAX_SESSIONS_IN_MEMORY,
        refuse_foreign_reregistration: bool = False,
        description: str = "",
        skills: Mapping[str, str] | None = None,
        external_url: str | None = None,
        register_to: str | None = None,
        endpoint: str | None = None,
        labels: Mapping[str, str] | None = None,
        ttl: float = 60,
        token_env: str | None = None,
        directory: Directory | None = None,
        peer_transport: httpx.AsyncBaseTransport | None = None,
        peer_tool: Callable[[], CallPeer] | None = None,
        stream_hook: StreamHook | None = None,
        middleware: Callable[[ASGIApp], ASGIApp] | None = None,
        on_agent_error: Callable[[Exception], None] | None = None,
        runtimes: Runtimes | None = None,
        agent_id: str | None = None,
        store: str | os.PathLike[str] | SharedStore | None = None,
        propagate_trace: bool = True,
        store_sync: str = "normal",
        store_key: str | None = None,
        a2a: bool = False,
    ) -> None:
        if (
            isinstance(session_idle_timeout, bool)
            or not isinstance(session_idle_timeout, (int, float))
            or not session_idle_timeout >= 0
        ):
            raise ValueError(
                f"AgentHost: session_idle_timeout must be seconds >= 0 (0 disables eviction), "
                f"got {session_idle_timeout!r}; the daemon's default is "
                f"{DEFAULT_SESSION_IDLE_TIMEOUT:g}"
            )
        if max_sessions_in_memory is not None and (
            isinstance(max_sessions_in_memory, bool)
            or not isinstance(max_sessions_in_memory, int)
            or max_sessions_in_memory < 1
        ):
            raise ValueError(
                f"AgentHost: max_sessions_in_memory must be a whole number >= 1 or None (no "
                f"bound), got {max_sessions_in_memory!r}; the default is "
                f"{DEFAULT_MAX_SESSIONS_IN_MEMORY}"
            )
        if session_rate_limit is not None and not isinstance(session_rate_limit, SessionRateLimit):
            # Refused here: taken, it made every POST /sessions answer 500.
            raise ValueError(
                f"AgentHost: session_rate_limit must be a SessionRateLimit(...) or None (off), "
                f"got {session_rate_limit!r}; SessionRateLimit() is the daemon's defaults"
            )
        self.name = name
        self.behavior: Agent = behavior if behavior is not None else echo()
        self.runtimes = runtimes
        self.agent_id = agent_id if agent_id is not None else name
        self.multi_session = multi_session
        self.tokens = dict(tokens) if tokens is not None else None
        self.attach_token_env = attach_token_env
        self._attach_token = read_attach_token(attach_token_env) if attach_token_env else None
        self.registry = registry
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.stream_hook = stream_hook
        self.on_agent_error = on_agent_error
        self.propagate_trace = bool(propagate_trace)
        self.app_name = app_name
        self.model = model
        self.provider = provider
        self.session_idle_timeout = float(session_idle_timeout)
        self.max_sessions_in_memory = max_sessions_in_memory
        self.refuse_foreign_reregistration = refuse_foreign_reregistration
        if a2a and not description:
            description = f"Agent {name!r}, served by coreagent-sdk."
        self.description = description
        self.skills = dict(skills or {})
        self.external_url = (
            checked_base_url(external_url, "AgentHost external_url") if external_url else None
        )
        # Joining a fleet (see _serve): the hub, where callers reach this host, and the
        # environment variable holding its token (read when used, never stored).
        self.register_to = checked_base_url(register_to, "AgentHost") if register_to else None
        if endpoint is not None:
            checked_base_url(endpoint, "AgentHost")
        self.endpoint = endpoint
        self.labels = dict(labels or {})
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf:
            raise ValueError(
                f"AgentHost: ttl must be a positive number of seconds (the lease asked of the "
                f"hub), got {ttl!r}; the default is 60"
            )
        self.ttl = float(ttl)
        self.token_env = token_env
        credential_variable(token_env)  # never handed to an MCP server
        self.peer_transport = peer_transport
        # The simulator's fleets hand their own (recorded) CallPeer to their daemons' turns.
        self.peer_tool = peer_tool
        self._own_directory: HubDirectory | None = None
        if directory is None and self.register_to is not None:
            directory = self._own_directory = HubDirectory(
                self.register_to, transport=peer_transport, token_env=token_env
            )
        self.directory = directory
        self._peer_tool: CallPeer | None = None
        self.draining = False  # set while the host shuts down: writes answer 503
        self._stop = StopRequest()  # what stop() asks of serve()
        self.rate_limiter = (
            SessionRateLimiter(session_rate_limit, self.clock)
            if session_rate_limit is not None
            else None
        )
        self.sessions: dict[str, _Session] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._listings: dict[tuple[str, tuple[tuple[str, str], ...]], bytes] = {}
        self._listing_version = -1
        self.store = _session_store(name, store, store_sync, store_key)
        # How the store was opened: True when it answered at once (no future: a fleet of
        # 10,000 daemons called at random kept a done one per daemon), else the task.
        self._opening: asyncio.Future[None] | Literal[True] | None = None
        # Where this host's idle sweeps are scheduled (one task per loop and clock ticks every
        # host's, see _sweeps), and its next tick there.
        self._sweeps: Sweeps | None = None
        self._sweep_tick = 0.0
        self._sweep_anchor = self.clock.now()
        self._resuming: dict[str, asyncio.Task[None]] = {}
        self._capabilities: dict[tuple[Any, ...], bytes] = {}
        # The host's own event streams; the routes are shared by every host of its kind and
        # reach it through the scope (_host_routes), so an idle host holds no copy of them.
        self._events = _EventsEndpoint(self)
        # A2A's JSON-RPC at POST /, behind the same guard as the attach routes (its module, and
        # the a2a SDK with it, is imported only here: a host without A2A never imports `a2a`).
        self._a2a: A2AEndpoint | None = None
        if a2a:
            try:
                from ._a2a import A2AEndpoint
            except ImportError as exc:
                if not (exc.name or "").startswith("a2a"):
                    raise
                raise ImportError(
                    "AgentHost: a2a=True needs the official A2A SDK, the 'a2a' extra: "
                    "pip install 'coreagent-sdk[host,a2a]'"
                ) from exc
            self._a2a = A2AEndpoint(self)
        routes = host_routes(
            hub=registry is not None, extra=(self._a2a.route,) if self._a2a is not None else ()
        )
        # The daemon's otelhttp wraps everything it serves, the card and refusals too.
        app: ASGIApp = ServerSpans(_Guard(routes, self))
        self.app = middleware(app) if middleware is not None else app
        # Every daemon starts with one session of its own; it is never evicted or deleted.
        self.sessions[STARTUP_SESSION] = _Session(self, app_name, STARTUP_SESSION, ANONYMOUS.name)

    def __repr__(self) -> str:
        kind = "hub" if self.registry is not None else "daemon"
        return f"AgentHost({self.name!r}, {kind}, sessions={len(self.sessions)})"

    async def call_peer(self, peer: str, prompt: str) -> dict[str, Any]:
        """One `call_peer` made by a turn: the result's JSON, or `{"error": ...}` on failure.

        Made with the host's own `CallPeer` (its directory: the hub it joined
        unless given one; its `token_env`), so a peer sees this host's
        identity. A failure is the tool's answer, as a daemon returns it to
        the model, never an exception out of the turn.
        """
        tool = self._peer_tool
        if tool is None:
            if self.peer_tool is not None:
                tool = self.peer_tool()
            elif self.directory is not None:
                tool = CallPeer(
                    self.directory, transport=self.peer_transport, token_env=self.token_env
                )
            else:
                return {
                    "error": f"call_peer: host {self.name!r} has no directory of peers; give "
                    "AgentHost register_to= (the hub it joins) or directory="
                }
            self._peer_tool = tool
        try:
            result = await tool.acall(peer=peer, prompt=prompt)
        except (CoreAgentError, ValueError) as exc:
            return {"error": str(exc)}
        return result.to_dict()

    @property
    def a2a(self) -> bool:
        """Whether this host answers A2A's JSON-RPC at `POST /` (``a2a=True``)."""
        return self._a2a is not None

    def card(self, request: Request) -> Response:
        """The host's A2A agent card (see `_card`; `_a2a` with A2A on), as answered to `request`."""
        if self._a2a is not None:
            return self._a2a.card_response(request)
        return card_response(
            request,
            name=self.name,
            description=self.description,
            version=__version__,
            skills=self.skills,
            bearer=self._attach_token is not None,
            external_url=self.external_url,
        )

    # --- auth and checks --------------------------------------------------

    def identify(self, request: Request) -> Identity | None:
        """The caller's identity; None for a bad or missing token on a protected daemon."""
        if self.tokens is None:
            return ANONYMOUS
        token = presented_token(request)
        return self.tokens.get(token) if token else None

    def refuse(self, request: Request) -> Response | None:
        """401 for a caller without a valid token or asserting another, then the write guard.

        First a shared attach token, when the host has one: `checkAttachToken`'s 401
        (`realm="attach"`, see `_attach_auth`), outermost as `Server.Bind` wraps it. Then
        it pins core-agent `pkg/attach/caller_middleware.go` `callerMiddlewareWithConfig`:
        the host's `tokens` are a per-caller daemon's users (`BearerTokenAuth`, enforced),
        so a missing or unknown token is `writeUnauthorized`'s 401
        (`realm="attach-multisession"`); then an `X-Asserted-Caller` header is refused,
        as `resolveProxyAssertion` refuses a caller not allowed to proxy (a host allows
        none; an open daemon's anonymous caller cannot either). Then `pkg/attach/csrf.go`
        `browserWriteGuard` (after the token check, as `Server.Bind` orders them): a
        write from a foreign browser Origin is 403, a write that is not
        `application/json` is 415.
        """
        if self._attach_token is not None:
            refused = attach_refusal(request, self._attach_token)
            if refused is not None:
                return refused
        if self.identify(request) is None:
            return _unauthorized("unauthorized: no valid credential")
        if request.headers.get(_PROXY_HEADER):
            return _unauthorized(
                "asserted-caller header rejected: caller is not permitted to proxy"
            )
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            origin = request.headers.get("origin", "")
            host = request.headers.get("host", "")
            if origin and not origin_allowed(origin, host):
                return _text(
                    403,
                    f"cross-origin request rejected: Origin {_q(origin)} is neither a loopback "
                    f"origin nor this listener ({_q(host)}); browser pages may not drive the "
                    "attach API cross-site. Native clients should omit the Origin header.",
                )
            if not is_json_media_type(request.headers.get("content-type", "")):
                return _text(
                    415,
                    'unsupported media type: state-changing attach endpoints require "Content-'
                    'Type: application/json" (browser cross-site request forgery protection; '
                    "add the header even when the request has no body)",
                )
        return None

    def _caller(self, request: Request) -> Identity | None:
        """The identity for owner checks: None on an open daemon (everyone may)."""
        return None if self.tokens is None else self.identify(request)

    def visible(
        self, session: _Session | StoredSession, who: Identity | None, action: str = "read"
    ) -> bool:
        """Whether `who` may `read`, `write` or `admin` the session (else it is a 404).

        With multi-session auth, as core-agent `pkg/auth/authorize.go`
        `Authorize` decides: an admin may do anything; the owner too; the
        session's contributors may read and write; its viewers may read.
        """
        if self.tokens is None or who is None:
            return True
        if who.admin or session.user == who.name:
            return True
        if action == "read":
            return who.name in session.viewers or who.name in session.contributors
        return action == "write" and who.name in session.contributors

    def find_session(self, request: Request, action: str = "read") -> _Session | None:
        """The session in memory the path names, if the caller may `action` it (else None)."""
        sid = request.path_params["sid"]
        session = self.sessions.get(sid)
        app = request.path_params.get("app")
        if session is None or (app is not None and app != session.app):
            return None
        if not self.visible(session, self.identify(request), action):
            return None
        session.touch()
        return session

    async def lookup_session(self, request: Request, action: str = "read") -> _Session | None:
        """The session the path names, resumed from the store if it was evicted (else None: 404).

        Pins core-agent `pkg/attach/registry.go` `lookupGated` / `LookupSingle` and
        `resumeAndRegister`: a memory hit is touched (the shortcut form finds it by
        id alone, whatever its app; a shortcut miss resumes only a session of the
        host's `app_name`, as Go's resumes under its one app); on a miss the stored
        row is checked against the caller first (a caller who may not read
        it learns nothing and costs no resume), concurrent misses share one
        resume, and the session comes back with its owner, viewers,
        contributors, usage and newest `REPLAY_WINDOW` events.
        """
        sid = request.path_params["sid"]
        if sid in self.sessions or not self.store.opened:
            return self.find_session(request, action)
        try:
            found = await self.store.get(sid)
        except STORE_ERRORS as exc:
            raise _unreadable(self.name, sid, exc) from exc
        row, newest = found if found is not None else (None, 0)
        # The shortcut form names no app: it resumes a session of the host's own app only,
        # as `LookupSingle` resumes under the daemon's one app (`resumerDefaultApp`).
        app = request.path_params.get("app", self.app_name)
        if row is None or app != row.app:
            return None
        who = self.identify(request)
        if not self.visible(row, who, "read"):  # the resume gate reads, as `resumeGateFor`
            return None
        flight = self._resuming.get(sid)
        if flight is None:
            flight = asyncio.get_running_loop().create_task(self._resume(row, newest))
            self._resuming[sid] = flight
            flight.add_done_callback(lambda _: self._resuming.pop(sid, None))
        try:
            await asyncio.shield(flight)
        except STORE_ERRORS as exc:
            raise _unreadable(self.name, sid, exc) from exc
        return self.find_session(request, action)

    async def _resume(self, row: StoredSession, newest: int) -> None:
        if row.session_id in self.sessions:  # resumed meanwhile, or created again
            return
        session = _Session(self, row.app, row.session_id, row.user)
        self._restore(session, row, newest)
        self.sessions[row.session_id] = session
        self._admitted()

    @staticmethod
    def _restore(session: _Session, row: StoredSession, newest: int) -> None:
        session.viewers, session.contributors = row.viewers, row.contributors
        session.created_at = row.created_at
        session.tokens_in, session.tokens_out, session.turns = (
            row.tokens_in,
            row.tokens_out,
            row.turns,
        )
        session.seq = newest  # its events stay in the store; a replay reads them there

    def sweep(self) -> list[str]:
        """Evict the sessions idle past `session_idle_timeout` to the store; their ids.

        Pins core-agent `pkg/attach/registry.go` `SessionRegistry.EvictBefore(now -
        idleAfter)`: a session last touched strictly before the cutoff leaves
        memory whether or not a message is queued; its queued messages go with
        it, as a daemon's inbox goes with its evicted agent, and its event
        streams end. Its row, usage and newest events stay in the store, so it
        stays listed (`idle`) and the next request resumes it. The startup
        session and a session running a turn are never evicted (see
        differences.md). The host runs this every `sweep_period()`.
        """
        timeout = self.session_idle_timeout
        if timeout <= 0:
            return []
        cutoff = self.clock.now() - timeout
        gone = [
            sid
            for sid, session in self.sessions.items()
            if sid != STARTUP_SESSION and not session.busy and session.last_touched < cutoff
        ]
        for sid in gone:
            self._evict(sid)
        return gone

    def _evict(self, sid: str) -> None:
        """Send session `sid` from memory to the store: listed `idle`, resumed on next use."""
        session = self.sessions.pop(sid)
        session.drop_streams()
        session.inbox.clear()
        session.save()

    def _admitted(self) -> None:
        """A session came into memory: evict the least recently used past the bound.

        Only sessions that nothing is using leave (no turn, no queued message, no
        event stream, no write waiting), oldest touch first, down to an eighth below
        `max_sessions_in_memory` so the sort is paid once per eighth of the bound.
        Then the idle sweep runs, if a session could be evicted by it.
        """
        bound = self.max_sessions_in_memory
        if bound is not None and len(self.sessions) > bound + 1:  # + the startup session
            spare = sorted(
                (s for sid, s in self.sessions.items() if sid != STARTUP_SESSION and s.unused()),
                key=lambda s: s.last_touched,
            )
            excess = len(self.sessions) - 1 - (bound - bound // 8)
            for session in spare[:excess]:
                self._evict(session.session_id)
        self._sweep_soon()

    def _ready(self) -> bool:
        """Whether `open()` has run."""
        opening = self._opening
        return opening is True or (opening is not None and opening.done())

    async def open(self) -> None:
        """Open the store; the first request and `serve()` call it.

        A named store's sessions come back: the startup session's log and
        usage at once, the others listed as idle until a request resumes
        them; event seqs and session ids go on from the last ones it holds.
        """
        loop = asyncio.get_running_loop()
        opening = self._opening
        if opening is True:
            return
        if (
            opening is None
            or (opening.done() and (opening.cancelled() or opening.exception() is not None))
            or (not opening.done() and opening.get_loop() is not loop)
        ):
            # The sweeps tick from here on, every sweep_period(), as the daemon's ticker
            # from `Bind`; the task runs only while a session could be evicted.
            self._sweep_anchor = self.clock.now()
            # A store whose file is open answers at once: opened here, with no task and no
            # turn of the loop (each of a fleet's daemons paid both on its first request).
            read = self.store.open_now(STARTUP_SESSION)
            if read is not None:
                self._opened(*read)
                self._opening = True
                return
            opening = self._opening = loop.create_task(self._open())
        if opening.done():
            opening.result()
        else:
            await asyncio.shield(opening)

    def _sweep_soon(self) -> None:
        """Run the idle sweep (a session that may be evicted is in memory)."""
        if self.session_idle_timeout <= 0:
            return
        sweeps = sweeps_of(asyncio.get_running_loop(), self.clock)
        if self._sweeps is not sweeps:
            # A host called from another loop (a sync call's) sweeps on the loop in use now.
            if self._sweeps is not None:
                self._sweeps.drop(self)
            sweeps.add(self)

    async def _open(self) -> None:
        # A temporary file too: made here (the first request, or serve() before it listens),
        # so no session's first write waits for a file and a thread to be made.
        last_id = await self.store.open()
        self._opened(last_id, await self.store.get(STARTUP_SESSION))

    def _opened(self, last_id: int, found: tuple[StoredSession, int] | None) -> None:
        # Counting on from the store, never back from where this host already is (event
        # seqs come from the store itself, as each event is written).
        self._ids = itertools.count(max(next(self._ids), last_id + 1))
        startup = self.sessions[STARTUP_SESSION]
        if found is not None and not startup.seq and not startup.turns:
            self._restore(startup, *found)

    def capabilities_frame(self, request: Request) -> bytes:
        """The `capabilities` frame an event stream opens with, as this caller sees it."""
        who = self.identify(request)
        host = request.headers.get("host", f"{self.name}.sim")
        scheme = request.scope.get("scheme", "http")  # request.url parses the whole URL
        caller = who.name if who is not None and who is not ANONYMOUS else None
        hub = self.registry is not None
        key = (caller, scheme, host, self.name, self.model, self.multi_session, hub)
        frame = self._capabilities.get(key)
        if frame is None:
            if len(self._capabilities) >= _CAPABILITIES_KEPT:
                self._capabilities.clear()  # callers and Host headers are the client's to vary
            frame = self._capabilities[key] = self._capabilities_frame(caller, scheme, host)
        return frame

    def _capabilities_frame(self, caller: str | None, scheme: str, host: str) -> bytes:
        # Encoded once per caller and address, from the template of this kind of host.
        return capabilities_frame(
            name=self.name,
            model=self.model,
            url=f"{scheme}://{host}",
            multi_session=self.multi_session,
            hub=self.registry is not None,
            caller=caller,
        )

    def status_frame(self, session: _Session) -> bytes:
        """The boot `status-update` frame of a session: the model and its turn state."""
        # The daemon's boot snapshot carries the model and the turn state only.
        state = "streaming" if session.busy else "idle"
        return encode_sse("status-update", {"model": self.model, "turn_state": state})

    # --- lifecycle --------------------------------------------------------

    def close_streams(self) -> None:
        """End every open event stream (used before a server shuts down)."""
        for session in self.sessions.values():
            session.drop_streams()

    def busy(self) -> int:
        """How many sessions are running a turn (or have one queued) right now."""
        return sum(1 for s in self.sessions.values() if s.busy or s.inbox)

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        grace: float = DEFAULT_GRACE,
        on_ready: Callable[[str], None] | None = None,
        handle_signals: bool = True,
        tune_gc: bool = True,
    ) -> None:
        """Serve this host on `host:port` until SIGTERM/SIGINT or `stop()`, then drain.

        See `coreagent_sdk.host._serve.serve`: it joins the fleet's hub when
        the host has `register_to`, calls `on_ready(url)` once listening, and
        on the way out drains running turns for up to `grace` seconds,
        deregisters and closes, within 10 s whatever a hub or peer does.

        While it serves, the process's garbage collector is tuned for serving
        (`coreagent_sdk.host._collector`: the heap as it stands frozen, a larger
        young generation) and put back as found when the last server stops;
        never in a Jupyter kernel. ``tune_gc=False`` leaves the collector alone.
        """
        from ._serve import serve

        await serve(
            self,
            host,
            port,
            grace=grace,
            on_ready=on_ready,
            handle_signals=handle_signals,
            tune_gc=tune_gc,
        )

    def stop(self) -> None:
        """Ask `serve()` to drain and return (as SIGTERM does), from any thread.

        A stop asked before `serve()` listens (its task not run yet, its store opening) is
        kept: it returns as soon as it has started. So is one asked while none serves.
        """
        self._stop.ask()

    async def aclose(self) -> None:
        """Stop running turns, end every stream (sessions stay listed), stop its agent's MCP
        servers (a `ModelAgent` behaviour's; they start again on its next turn)."""
        if self._peer_tool is not None:
            await self._peer_tool.aclose()
            self._peer_tool = None
        if self._own_directory is not None:
            await self._own_directory.aclose()
        self.close_streams()
        if self._sweeps is not None:
            self._sweeps.drop(self)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if not self.store.temporary and self.store.opened:
            for session in self.sessions.values():
                session.save()  # usage and last touch as they are now, for the next start
        if self._a2a is not None:
            await self._a2a.aclose()  # the SDK's running tasks: their turns were cancelled above
        await self.store.aclose()
        self._opening = None
        close_mcp = getattr(self.behavior, "aclose_mcp", None)
        if close_mcp is not None:
            await close_mcp()
