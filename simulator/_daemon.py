"""The ASGI app of one simulated daemon (and, with a registry, of a hub).

It answers with the status codes and shapes of `protocol.md`: 201/400/401/
404/409/413/415/501 where a real daemon does, SSE frames written exactly
`event: X\\ndata: {json}\\n\\n`, `capabilities` first, then a status snapshot,
then live frames to the subscribers connected at the time.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import secrets
import time
from collections.abc import Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from coreagent_sdk import PROTOCOL_VERSION, Clock, SystemClock
from coreagent_sdk._tracing import picked_headers, turn_span
from coreagent_sdk._wire import AgentEvent, AgentFrame, Content, Part, encode_sse

from ._agents import Behavior, Turn, TurnAbandoned, TurnFailed, echo
from ._faults import FaultInjector, Faults, StreamAborted
from ._registry import ANONYMOUS, Identity, PeerRegistry, RegistryError, rfc3339

__all__ = ["MAX_INJECT_BYTES", "MAX_REGISTER_BYTES", "Daemon"]

MAX_INJECT_BYTES = 8 * 1024
MAX_REGISTER_BYTES = 16 * 1024
SUBSCRIBER_QUEUE_LIMIT = 10_000  # a consumer this far behind is dropped, as a daemon would
_VERSION_HEADER = "x-attach-protocol-version"
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
_EVENT_TYPES = (
    "status-update",
    "usage-update",
    "inbox",
    "turn-complete",
    "turn-error",
    "agent",
    "wake",
    "pause",
)
_MAX_LISTINGS = 64  # encoded GET /peers bodies kept per registry version
_CLOSE = None  # queued to a subscriber: end its stream
_MALFORMED = b"event: agent\ndata: {not json\n\n"


def _text(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    # Go's http.Error: plain text and a newline.
    return PlainTextResponse(message + "\n", status_code=status, headers=headers)


class _Session:
    def __init__(self, daemon: Daemon, app: str, session_id: str, user: str) -> None:
        self.daemon = daemon
        self.app = app
        self.session_id = session_id
        self.user = user
        self.seq = 0
        self.log: list[tuple[int, bytes]] = []
        self.subscribers: set[asyncio.Queue[bytes | None]] = set()
        self.trace_context: dict[str, str] | None = None  # traceparent of the last inject
        self.inbox: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None
        self.busy = False
        self.last_touched = daemon.clock.now()
        self.tokens_in = 0
        self.tokens_out = 0
        self.turns = 0

    # --- frames -----------------------------------------------------------

    def _fanout(self, frame: bytes) -> None:
        for queue in list(self.subscribers):
            if queue.qsize() >= SUBSCRIBER_QUEUE_LIMIT:
                self.subscribers.discard(queue)
                queue.put_nowait(_CLOSE)
            else:
                queue.put_nowait(frame)

    def publish(self, event: str, payload: dict[str, Any]) -> None:
        self._fanout(encode_sse(event, payload))

    def publish_agent(self, event: AgentEvent) -> AgentFrame:
        self.seq += 1
        frame = AgentFrame(seq=self.seq, event=event)
        data = encode_sse("agent", frame.to_dict())
        self.log.append((self.seq, data))
        self._fanout(data)
        return frame

    def subscribe(self) -> asyncio.Queue[bytes | None]:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[bytes | None]) -> None:
        self.subscribers.discard(queue)

    def drop_streams(self) -> None:
        for queue in list(self.subscribers):
            queue.put_nowait(_CLOSE)
        self.subscribers.clear()

    # --- turns ------------------------------------------------------------

    def enqueue(self, message: str) -> str:
        prompt_id = f"p-{secrets.token_hex(8)}"
        self.last_touched = self.daemon.clock.now()
        self.publish(
            "inbox", {"state": "queued", "prompt_id": prompt_id, "queued_at": rfc3339(time.time())}
        )
        self.inbox.put_nowait((prompt_id, message))
        if self.worker is None or self.worker.done():
            self.worker = asyncio.get_running_loop().create_task(self._work())
            self.daemon._tasks.add(self.worker)
            self.worker.add_done_callback(self.daemon._tasks.discard)
        return prompt_id

    async def _work(self) -> None:
        while not self.inbox.empty():
            prompt_id, message = self.inbox.get_nowait()
            self.busy = True
            try:
                await self._turn(prompt_id, message)
            finally:
                self.busy = False

    async def _turn(self, prompt_id: str, message: str) -> None:
        started = time.perf_counter()
        self.publish("inbox", {"state": "dequeued", "prompt_id": prompt_id})
        invocation = f"inv-{secrets.token_hex(4)}"
        self.publish_agent(
            AgentEvent(
                content=Content(role="user", parts=(Part(text=message),)),
                id=f"u-{self.seq + 1}",
                timestamp=rfc3339(time.time()),
                invocation_id=invocation,
                author="user",
            )
        )
        turn = Turn(
            self,
            agent=self.daemon.name,
            prompt=message,
            prompt_id=prompt_id,
            invocation_id=invocation,
        )
        try:
            with turn_span(
                self.daemon.name,
                self.trace_context,
                {"gen_ai.conversation.id": self.session_id, "coreagent.prompt_id": prompt_id},
            ):
                await self.daemon.behavior(turn)
        except (TurnFailed, TurnAbandoned):
            return
        except Exception as exc:  # a behaviour bug is the peer's turn error, as on a daemon
            self.publish(
                "turn-error",
                {"kind": "unknown", "message": f"behaviour raised {exc!r}", "retryable": False},
            )
            return
        tokens_in = max(1, len(message) // 4)
        self.tokens_in += tokens_in
        self.tokens_out += turn.tokens_out
        self.turns += 1
        self.publish(
            "turn-complete",
            {
                "prompt_id": prompt_id,
                "model": self.daemon.model,
                "tokens_in": tokens_in,
                "tokens_out": turn.tokens_out,
                "cost_usd": 0.0,
                "latency_ms": int((time.perf_counter() - started) * 1000),
            },
        )
        self.publish(
            "usage-update",
            {
                "tokens_in_total": self.tokens_in,
                "tokens_out_total": self.tokens_out,
                "cost_usd_total": 0.0,
                "turns_total": self.turns,
            },
        )

    def row(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "user": self.user,
            "sessionID": self.session_id,
            "has_event_log": bool(self.log),
            "status": "active" if self.busy else "idle",
            "last_touched_at": rfc3339(self.last_touched),
        }


class _EventsEndpoint:
    """`GET .../events` as a raw ASGI app, so the subscription is made before 200 is sent
    and released on every way out (disconnect, cancel, drop)."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        daemon = self.daemon
        declared = request.headers.get(_VERSION_HEADER)
        version_headers = {"X-Attach-Protocol-Version": PROTOCOL_VERSION}
        if declared is not None:
            if not _VERSION_RE.match(declared):
                await _text(400, f"malformed protocol version {declared!r}", version_headers)(
                    scope, receive, send
                )
                return
            if declared.split(".")[0] != PROTOCOL_VERSION.split(".")[0]:
                await _text(
                    409,
                    f"protocol version {declared} is not compatible with {PROTOCOL_VERSION}",
                    version_headers,
                )(scope, receive, send)
                return
        session = daemon.find_session(request)
        if session is None:
            await _text(404, "session not found")(scope, receive, send)
            return
        since_raw = request.query_params.get("since")
        since: int | None = None
        if since_raw is not None:
            try:
                since = int(since_raw)
                if since < 0:
                    raise ValueError
            except ValueError:
                await _text(400, f"since must be a non-negative integer, got {since_raw!r}")(
                    scope, receive, send
                )
                return
        queue = session.subscribe()
        watcher = asyncio.get_running_loop().create_task(self._watch_disconnect(receive, queue))
        faults = daemon.faults
        sent = 0
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-store"),
                        (b"x-attach-protocol-version", PROTOCOL_VERSION.encode()),
                    ],
                }
            )
            opening = [daemon.capabilities_frame(request), daemon.status_frame()]
            if since is not None:
                opening.extend(data for seq, data in session.log if seq > since)
            pending: list[bytes | None] = list(opening)
            while True:
                data = pending.pop(0) if pending else await queue.get()
                if data is _CLOSE:
                    break
                if faults.malformed_frames:
                    await send(
                        {"type": "http.response.body", "body": _MALFORMED, "more_body": True}
                    )
                await send({"type": "http.response.body", "body": data, "more_body": True})
                sent += 1
                if faults.drop_streams_after is not None and sent >= faults.drop_streams_after:
                    break
                if faults.abort_streams_after is not None and sent >= faults.abort_streams_after:
                    raise StreamAborted(f"injected fault: stream aborted after {sent} frames")
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write
        finally:
            session.unsubscribe(queue)
            watcher.cancel()

    @staticmethod
    async def _watch_disconnect(receive: Receive, queue: asyncio.Queue[bytes | None]) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                queue.put_nowait(_CLOSE)
                return


class _Guard:
    """Auth and the JSON content type, checked once in front of every route."""

    def __init__(self, app: ASGIApp, daemon: Daemon) -> None:
        self.app = app
        self.daemon = daemon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = self.daemon.refuse(Request(scope))
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Daemon:
    """One simulated core-agent daemon; a hub when it has a `registry`.

    ``tokens`` maps bearer tokens to identities; None is an open daemon that
    accepts anonymous callers (and redacts nothing). ``multi_session=False``
    answers 501 to `POST /sessions`, as a daemon without a session factory.
    """

    def __init__(
        self,
        name: str,
        *,
        behavior: Behavior | None = None,
        multi_session: bool = True,
        tokens: Mapping[str, Identity] | None = None,
        registry: PeerRegistry | None = None,
        clock: Clock | None = None,
        faults: Faults | None = None,
        app_name: str = "core-agent",
        model: str = "sim-model",
        provider: str = "sim",
    ) -> None:
        self.name = name
        self.behavior: Behavior = behavior if behavior is not None else echo()
        self.multi_session = multi_session
        self.tokens = dict(tokens) if tokens is not None else None
        self.registry = registry
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.faults = faults if faults is not None else Faults()
        self.app_name = app_name
        self.model = model
        self.provider = provider
        self.sessions: dict[str, _Session] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._listings: dict[tuple[str, tuple[tuple[str, str], ...]], bytes] = {}
        self._listing_version = -1
        routes = [
            Route("/sessions", self._create_session, methods=["POST"]),
            Route("/sessions", self._list_sessions, methods=["GET"]),
            Route("/sessions/{app}/{sid}/inject", self._inject, methods=["POST"]),
            Route("/sessions/{sid}/inject", self._inject, methods=["POST"]),
            Route("/sessions/{app}/{sid}/events", _EventsEndpoint(self), methods=["GET"]),
            Route("/sessions/{sid}/events", _EventsEndpoint(self), methods=["GET"]),
            Route("/whoami", self._whoami, methods=["GET"]),
        ]
        if registry is not None:  # elsewhere /peers is the router's own 404
            routes += [
                Route("/peers", self._list_peers, methods=["GET"]),
                Route("/peers", self._register, methods=["POST"]),
                Route("/peers/{rid}/heartbeat", self._heartbeat, methods=["POST"]),
                Route("/peers/{rid}", self._deregister, methods=["DELETE"]),
            ]
        self.app = FaultInjector(_Guard(Starlette(routes=routes), self), self.faults)
        if not multi_session:
            # Without a session factory the daemon still has its one main session.
            self.sessions["main"] = _Session(self, app_name, "main", ANONYMOUS.name)

    def __repr__(self) -> str:
        kind = "hub" if self.registry is not None else "daemon"
        return f"Daemon({self.name!r}, {kind}, sessions={len(self.sessions)})"

    # --- auth and checks --------------------------------------------------

    def identify(self, request: Request) -> Identity | None:
        """The caller's identity; None for a bad or missing token on a protected daemon."""
        if self.tokens is None:
            return ANONYMOUS
        token = request.headers.get("x-attach-token")
        if not token:
            auth = request.headers.get("authorization", "")
            scheme, _, value = auth.partition(" ")
            token = value.strip() if scheme.lower() == "bearer" else ""
        return self.tokens.get(token) if token else None

    def refuse(self, request: Request) -> Response | None:
        """401 for a caller without a valid token, 415 for a write that is not JSON."""
        if self.identify(request) is None:
            return _text(401, "unauthorized", {"WWW-Authenticate": 'Bearer realm="attach"'})
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype != "application/json":
                return _text(415, "Content-Type must be application/json")
        return None

    def _caller(self, request: Request) -> Identity | None:
        """The identity for owner checks: None on an open daemon (everyone may)."""
        return None if self.tokens is None else self.identify(request)

    async def _json_body(self, request: Request, limit: int) -> Any | Response:
        body = await request.body()
        if len(body) > limit:
            return _text(413, f"request body is over {limit} bytes")
        if not body.strip():
            return {}
        try:
            return json.loads(body)
        except ValueError:
            return _text(400, "request body is not valid JSON")

    def find_session(self, request: Request) -> _Session | None:
        sid = request.path_params["sid"]
        session = self.sessions.get(sid)
        app = request.path_params.get("app")
        if session is None or (app is not None and app != session.app):
            return None
        return session

    def capabilities_frame(self, request: Request) -> bytes:
        who = self.identify(request)
        host = request.headers.get("host", f"{self.name}.sim")
        payload: dict[str, Any] = {
            "protocol_version": PROTOCOL_VERSION,
            "event_types": list(_EVENT_TYPES),
            "server": "coreagent-sdk-simulator/0.1.0",
            # The feature names a daemon advertises (fixture capabilities-v1.4.0.json).
            "features": {
                "cost_ceiling": False,
                "cross_daemon": self.registry is not None,
                "interrupt": False,
                "mcp": False,
                "multi_session": self.multi_session,
                "observer_mode": False,
                "perms_stream": False,
                "specialists": False,
            },
            "slash_commands": ["compact", "done"],
            "agent": {
                "name": self.name,
                "version": "v0.1.0-sim",
                "description": f"Simulated core-agent daemon {self.name!r}.",
                "model": self.model,
                "url": f"{request.url.scheme}://{host}",
            },
        }
        if who is not None and who is not ANONYMOUS:
            payload["caller_id"] = who.name
        return encode_sse("capabilities", payload)

    def status_frame(self) -> bytes:
        return encode_sse(
            "status-update",
            {
                "model": self.model,
                "provider": self.provider,
                "perm_mode": "default",
                "turn_state": "idle",
                "context_pct": 0,
            },
        )

    # --- sessions ---------------------------------------------------------

    async def _create_session(self, request: Request) -> Response:
        if not self.multi_session:
            return _text(
                501,
                "multi-session is not enabled: start the daemon with "
                "attach.multi_session.enabled: true",
            )
        who = self.identify(request) or ANONYMOUS
        sid = f"s-{next(self._ids):04d}{secrets.token_hex(3)}"
        self.sessions[sid] = _Session(self, self.app_name, sid, who.name)
        host = request.headers.get("host")
        path = f"/sessions/{self.app_name}/{sid}"
        url = f"{request.url.scheme}://{host}{path}" if host else path
        return JSONResponse(
            {"app": self.app_name, "user": who.name, "sessionID": sid, "url": url},
            status_code=201,
        )

    async def _list_sessions(self, request: Request) -> Response:
        return JSONResponse({"sessions": [s.row() for s in self.sessions.values()]})

    async def _inject(self, request: Request) -> Response:
        body = await self._json_body(request, MAX_INJECT_BYTES)
        if isinstance(body, Response):
            return body
        session = self.find_session(request)
        if session is None:
            return _text(404, "session not found")
        message = body.get("message") if isinstance(body, dict) else None
        if not isinstance(message, str) or not message.strip():
            return _text(400, "message is required")
        session.trace_context = picked_headers(request.headers)  # for the turn's span
        prompt_id = session.enqueue(message)
        return JSONResponse(
            {
                "injected": message,
                "session": session.session_id,
                "woke": bool(body.get("wake", False)),
                "prompt_id": prompt_id,
            }
        )

    async def _whoami(self, request: Request) -> Response:
        who = self.identify(request) or ANONYMOUS
        source = "none" if who is ANONYMOUS else "bearer"
        return JSONResponse({"identity": who.name, "admin": who.admin, "source": source})

    # --- peers (hub only) -------------------------------------------------

    async def _list_peers(self, request: Request) -> Response:
        assert self.registry is not None  # the /peers routes exist on hubs only
        labels: dict[str, str] = {}
        for raw in request.query_params.getlist("label"):
            key, sep, value = raw.partition("=")
            if not sep or not key:
                return _text(400, f"label filter must be key=value, got {raw!r}")
            labels[key] = value
        body = self._peer_listing(labels, self._caller(request))
        return Response(body, media_type="application/json")

    def _peer_listing(self, labels: dict[str, str], caller: Identity | None) -> bytes:
        """`GET /peers`' body, encoded once per registry version, label filter and view.

        Encoding 10,000 records on every request made the roster lookup the
        cost of a delegation; an unchanged roster is served from here instead.
        """
        assert self.registry is not None
        version = self.registry.version()
        if version != self._listing_version:
            self._listings.clear()
            self._listing_version = version
        # Who sees which registration ids: everyone (open hub, admin) or an owner's own.
        view = "all" if caller is None or caller.admin else "owner:" + caller.name
        key = (view, tuple(sorted(labels.items())))
        body = self._listings.get(key)
        if body is None:
            records = [
                e.record(redact=not self.registry.may_manage(e, caller))
                for e in self.registry.peers(labels)
            ]
            body = JSONResponse({"peers": records}).body
            if len(self._listings) >= _MAX_LISTINGS:  # callers choose filters: stay bounded
                self._listings.clear()
            self._listings[key] = body
        return body

    async def _register(self, request: Request) -> Response:
        assert self.registry is not None  # the /peers routes exist on hubs only
        body = await self._json_body(request, MAX_REGISTER_BYTES)
        if isinstance(body, Response):
            return body
        if not isinstance(body, dict):
            return _text(400, "request body must be a JSON object")
        caller = self._caller(request)
        try:
            entry = self.registry.register(
                body.get("name"),
                body.get("endpoint"),
                body.get("labels"),
                body.get("heartbeat_ttl_sec"),
                owner=caller.name if caller is not None else None,
            )
        except RegistryError as exc:
            return _text(400, str(exc))
        return JSONResponse(entry.record(redact=False), status_code=201)

    async def _heartbeat(self, request: Request) -> Response:
        assert self.registry is not None  # the /peers routes exist on hubs only
        entry = self.registry.heartbeat(request.path_params["rid"])
        if entry is None:
            return _text(404, "registration not found; register again")
        return JSONResponse(entry.record(redact=False))

    async def _deregister(self, request: Request) -> Response:
        assert self.registry is not None  # the /peers routes exist on hubs only
        if not self.registry.deregister(request.path_params["rid"], self._caller(request)):
            return _text(403, "only the owner or an admin may deregister this peer")
        return Response(status_code=204)

    # --- lifecycle --------------------------------------------------------

    def close_streams(self) -> None:
        """End every open event stream (used before a server shuts down)."""
        for session in self.sessions.values():
            session.drop_streams()

    async def aclose(self) -> None:
        """Stop running turns and end every stream."""
        self.close_streams()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
