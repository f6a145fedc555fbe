"""`AttachClient`: one daemon's attach-mode API (sessions, inject, events, peers)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Collection, Coroutine, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from .._http._asyncio_only import require_asyncio
from .._http._deadline import DEFAULT_REQUEST_TIMEOUT, NO_HTTPX_TIMEOUT, outer_deadline, within
from .._http._endpoint import checked_base_url, endpoint_problem, plain_endpoint, shown_url
from .._http._inflate import ACCEPT_ENCODING
from .._http._plumbing import (
    make_http_client,
    own_requests,
    parse_json,
    read_json_bytes,
    status_error,
    transport_failure,
)
from .._telemetry import _tracing
from ..errors import (
    AsyncLibraryError,
    CoreAgentError,
    ProtocolError,
    RequestTimeoutError,
    TransportFailure,
)
from ._agentcard import AGENT_CARD_PATH, AgentCard
from ._oversized import OversizedFrame
from ._sse import MAX_EVENT_BYTES, MAX_LINE_BYTES, iter_frames
from ._token import checked_token
from ._wire import (
    PROTOCOL_VERSION,
    Frame,
    InjectResult,
    PeerList,
    PeerRecord,
    SessionCreated,
    SessionInfo,
    SessionList,
    WhoAmI,
    checked_segment,
)

__all__ = ["AttachClient", "MULTI_SESSION_HINT"]

MULTI_SESSION_HINT = (
    "the daemon runs without a session factory: start it with attach.multi_session.enabled: true"
)
_VERSION_HEADER = "X-Attach-Protocol-Version"
_JSON = "application/json"
# An event stream may sit idle between turns for as long as it likes; the
# caller's own deadline bounds it, not a read timeout.
_STREAM_TIMEOUT = httpx.Timeout(30.0, read=None)


T = TypeVar("T")

# What httpx raises while sending or reading: its own errors and stream misuse.
_HTTPX_ERRORS = (httpx.HTTPError, httpx.StreamError)


def _session_path(path: str | SessionCreated) -> str:
    if isinstance(path, SessionCreated):
        return path.path
    # The path is appended to the base URL: every segment must be plain, so it
    # cannot change the host (`@evil`, `//evil`), climb out (`..`) or add a query.
    segments = path.rstrip("/").split("/") if isinstance(path, str) else []
    plain = True
    for segment in segments[2:]:
        try:
            checked_segment(segment, "a session path segment")
        except ProtocolError:
            plain = False
    if not (plain and segments[:2] == ["", "sessions"] and 3 <= len(segments) <= 4):
        raise ValueError(
            f"attach: session path must look like '/sessions/<app>/<id>' or '/sessions/<id>', "
            f"got {path!r}; pass the SessionCreated from new_session() or its .path"
        )
    return "/".join(segments)


def _registration_segment(registration_id: str) -> str:
    try:
        return checked_segment(registration_id, "registration id")
    except ProtocolError:
        raise ValueError(
            f"attach: registration id {registration_id!r} is not a plain path segment; "
            "pass the registration_id the hub answered"
        ) from None


def dial_base(url: str) -> str:
    """`scheme://host[:port]` of an endpoint: the only part a client dials.

    The Go client builds its base URL from the scheme and host alone, so a
    path prefix, a query, a fragment or userinfo in a registered endpoint is
    never sent (userinfo would otherwise replace the bearer with Basic auth,
    and a fragment would turn every request into `POST /`).
    """
    if plain_endpoint(url):
        # No userinfo, query or fragment, a lower-case scheme: the base is what precedes
        # the path (a fleet's and a hub's endpoints; urlsplit was a fifth of a new client).
        cut = url.find("/", url.index("//") + 2)
        return url if cut < 0 else url[:cut]
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.rpartition('@')[2]}"


def _major(version: str) -> str:
    return version.split(".", 1)[0]


class AttachClient:
    """A client for one daemon's attach API.

    ``transport`` is any `httpx.AsyncBaseTransport` (None: the real network);
    ``http_client`` shares an existing `httpx.AsyncClient` instead (it is then
    not closed by `aclose()`). The token is sent as `Authorization: Bearer`
    and never shown in reprs or errors.

    Attributes:
        base_url: The daemon's base URL, checked when given.
        timeout: Seconds each request may take (None: no bound of its own).
    """

    def __init__(
        self,
        base_url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        token: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
        max_event_bytes: int = MAX_EVENT_BYTES,
        timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout < float("inf")
        ):
            raise ValueError(
                f"attach: timeout must be a positive number of seconds or None, got {timeout!r}; "
                f"the default is {DEFAULT_REQUEST_TIMEOUT:g}"
            )
        self.timeout = None if timeout is None else float(timeout)
        # The option a timeout message tells the user to raise (a wrapper names its own).
        self._timeout_option = "AttachClient(timeout=...)"
        self.base_url = dial_base(checked_base_url(base_url, "attach"))
        self._token = checked_token(token, "token=", "attach")
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else make_http_client(transport)
        self._max_line_bytes = max_line_bytes
        self._max_event_bytes = max_event_bytes
        # JSON answers may come compressed (inflated in bounded steps); see events().
        read: dict[str, str] = {"Accept-Encoding": ACCEPT_ENCODING}
        if self._token:
            read["Authorization"] = f"Bearer {self._token}"
        self._read_headers = read
        self._write_headers = {**read, "Content-Type": _JSON}
        self._events_headers = {
            **read,
            "Accept": "text/event-stream",
            # Compressing an event stream saves nothing and turns each read
            # into an unbounded inflate: ask for it plain.
            "Accept-Encoding": "identity",
            _VERSION_HEADER: PROTOCOL_VERSION,
        }
        # The SDK's own client: requests built from the parsed base URL (None: a user's client).
        self._requests = own_requests(self._http, self.base_url)

    def __repr__(self) -> str:
        token = "set" if self._token else "none"
        return f"AttachClient({shown_url(self.base_url)!r}, token={token})"

    def _for_base(self, base_url: str) -> AttachClient:
        """A client for the daemon at `base_url` (checked as the constructor checks it),
        like this one in all else: its pool, token, timeout, bounds and header dicts.

        A tool calling 10,000 peers at random makes a client for nearly every call; a
        copy skips checking again what is the same for all of them (the token, the
        timeout) and building the header dicts, which are never changed in place.
        """
        client = AttachClient.__new__(AttachClient)
        client.__dict__.update(self.__dict__)
        client.base_url = dial_base(checked_base_url(base_url, "attach"))
        client._requests = own_requests(self._http, client.base_url)
        return client

    async def __aenter__(self) -> AttachClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the underlying HTTP client if this object made it."""
        if self._owns_http:
            await self._http.aclose()

    # ----------------------------------------------------------------- plumbing

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: list[tuple[str, str | int | float | bool | None]] | None = None,
        hint_by_status: Mapping[int, str] | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        write = method not in ("GET", "HEAD", "OPTIONS")
        headers = self._write_headers if write else self._read_headers
        request = self._build(
            method,
            path,
            # Writes always declare JSON, even with no body: the daemon answers 415 otherwise.
            content=json.dumps(body).encode() if body is not None else (b"" if write else None),
            headers={**headers, **extra_headers} if extra_headers else headers,
            fixed_headers=not extra_headers,
            params=params,
        )
        return await self._open(request, hint_by_status)

    def _build(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str],
        content: bytes | None = None,
        params: Any = None,
        timeout: httpx.Timeout | None = None,
        fixed_headers: bool = True,
    ) -> httpx.Request:
        """A request for `path`; a URL httpx cannot encode is a typed error, never dialed.

        ``fixed_headers``: `headers` is one of this client's own dicts, never changed.
        """
        if self.timeout is not None or outer_deadline():
            timeout = NO_HTTPX_TIMEOUT  # the deadline bounds it, not per-read timers
        if self._requests is not None and params is None and fixed_headers:
            request = self._requests.build(
                method,
                path,
                headers=headers,
                content=content,
                timeout=self._http.timeout if timeout is None else timeout,
            )
            if request is not None:
                return request
        kwargs: dict[str, Any] = {"content": content, "headers": headers, "params": params}
        if timeout is not None:
            kwargs["timeout"] = timeout
        try:
            return self._http.build_request(method, self.base_url + path, **kwargs)
        except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
            failure = TransportFailure(
                f"attach: cannot send {method} to {shown_url(self.base_url)}: httpx refuses "
                f"the URL ({type(exc).__name__}); check the endpoint"
            )
        raise failure  # outside the handler: the refused URL stays out of __context__

    async def _open(
        self, request: httpx.Request, hint_by_status: Mapping[int, str] | None = None
    ) -> httpx.Response:
        """Send `request` streaming; a transport failure or non-2xx answer is a typed error."""
        try:
            response = await self._http.send(request, stream=True)
        except _HTTPX_ERRORS as exc:
            if isinstance(exc, CoreAgentError):
                raise  # already ours: chaining it to itself would print it twice
            raise transport_failure(exc, shown_url(self.base_url), "attach") from exc
        if response.status_code >= 300:
            try:
                hint = (hint_by_status or {}).get(response.status_code, "")
                if response.status_code == 401 and not hint:
                    hint = "pass a token the daemon accepts (token=...)"
                error = await status_error(response, "attach", hint)
            except _HTTPX_ERRORS as exc:
                if isinstance(exc, CoreAgentError):
                    raise
                raise transport_failure(exc, shown_url(self.base_url), "attach") from exc
            finally:
                await response.aclose()
            raise error
        return response

    async def _bounded(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        """`await coro` within this client's deadline (none when a caller's already governs)."""
        try:
            require_asyncio("attach")
        except AsyncLibraryError:
            coro.close()  # never awaited: closed here so no warning follows the error
            raise
        if self.timeout is None or outer_deadline():
            return await coro
        try:
            return await within(self.timeout, coro)
        except asyncio.TimeoutError:
            pass
        raise RequestTimeoutError(
            f"attach: {what} on {shown_url(self.base_url)} did not finish within "
            f"{self.timeout:g} s (the whole-request deadline); the server is stalled or "
            f"slow: check it, or raise {self._timeout_option}"
        )

    async def _json(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        return await self._bounded(self._json_now(method, path, what, **kwargs), f"{method} {path}")

    async def _json_now(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        got = await self._body_now(method, path, what, **kwargs)
        return None if got is None else parse_json(*got, what)

    async def _body_now(
        self, method: str, path: str, what: str, **kwargs: Any
    ) -> tuple[bytearray, str] | None:
        """The answer's JSON body undecoded and the host that sent it (None: a 204)."""
        response = await self._send(method, path, **kwargs)
        try:
            if response.status_code == 204:
                return None
            return await read_json_bytes(response, what), response.url.host
        except _HTTPX_ERRORS as exc:
            # A body cut short, a broken stream: the answer never arrived whole.
            if isinstance(exc, CoreAgentError):
                raise
            raise transport_failure(exc, shown_url(self.base_url), "attach") from exc
        finally:
            await response.aclose()

    # ----------------------------------------------------------------- sessions

    async def new_session(self) -> SessionCreated:
        """`POST /sessions`: a fresh session on this daemon."""
        data = await self._json(
            "POST", "/sessions", "new session", hint_by_status={501: MULTI_SESSION_HINT}
        )
        return SessionCreated.from_dict(data)

    async def delete_session(self, path: str | SessionCreated) -> None:
        """`DELETE {path}`: free a session on the daemon (403 for its startup session)."""
        await self._json(
            "DELETE",
            _session_path(path),
            "delete session",
            hint_by_status={403: "a daemon's startup session cannot be deleted"},
        )

    async def list_sessions(self) -> tuple[SessionInfo, ...]:
        """`GET /sessions`."""
        return SessionList.from_dict(await self._json("GET", "/sessions", "sessions")).sessions

    async def inject(
        self, path: str | SessionCreated, message: str, wake: bool | None = None
    ) -> InjectResult:
        """`POST {path}/inject`: queue a prompt on the session."""
        body: dict[str, Any] = {"message": message}
        if wake is not None:
            body["wake"] = wake
        # The daemon hands this context to the turn that drains the message (otelhttp).
        trace = _tracing.trace_headers()  # None without OpenTelemetry or a current span
        data = await self._json(
            "POST", _session_path(path) + "/inject", "inject", body=body, extra_headers=trace
        )
        return InjectResult.from_dict(data)

    @asynccontextmanager
    async def events(
        self,
        path: str | SessionCreated,
        since: int | None = None,
        *,
        types: Collection[str] | None = None,
        cut_oversized: bool = False,
    ) -> AsyncIterator[AsyncIterator[Frame | OversizedFrame]]:
        """Open `GET {path}/events`; yields an async iterator of typed frames.

        The stream is open (the daemon has answered 200) when the block is
        entered, so a caller can subscribe first and inject second, which is
        the only order that never misses a fast turn. ``since`` replays the
        session's recorded events after that sequence number. ``types`` keeps
        only those event types (e.g. ``{"agent", "turn-complete"}``), skipping
        the rest unparsed. Leaving the block closes the stream.

        An event over ``max_event_bytes`` raises `FrameTooLargeError`; with
        ``cut_oversized=True`` it is read to its end in bounded memory instead
        and yielded as an `OversizedFrame` (its frame with the text its first
        ``max_event_bytes`` held).
        """
        request = self._build(
            "GET",
            _session_path(path) + "/events",
            headers=self._events_headers,
            params=[("since", str(since))] if since is not None else None,
            timeout=_STREAM_TIMEOUT,
        )
        response = await self._bounded(self._open(request), f"GET {request.url.path}")
        try:
            kind = response.headers.get("content-type", "")
            if kind.split(";", 1)[0].strip().lower() != "text/event-stream":
                shown = kind[:60] or "none"
                raise ProtocolError(
                    f"attach: GET {response.url.path} on {response.url.host!r} answered "
                    f"{response.status_code} with content type {shown!r}, not an event stream; "
                    "is that URL an attach-mode daemon?"
                )
            theirs = response.headers.get(_VERSION_HEADER)
            if theirs and _major(theirs) != _major(PROTOCOL_VERSION):
                raise ProtocolError(
                    f"attach: {shown_url(self.base_url)} speaks protocol {theirs}, this SDK speaks "
                    f"{PROTOCOL_VERSION}; use an SDK release for major version {_major(theirs)}"
                )
            frames = iter_frames(
                response,
                max_line_bytes=self._max_line_bytes,
                max_event_bytes=self._max_event_bytes,
                types=types,
                cut_oversized=cut_oversized,
            )
            try:
                yield frames
            finally:
                await frames.aclose()  # type: ignore[attr-defined]
        finally:
            await response.aclose()

    # -------------------------------------------------------------------- peers

    async def list_peers(self, labels: Mapping[str, str] | None = None) -> tuple[PeerRecord, ...]:
        """`GET /peers` on a hub, filtered by labels (every pair must match)."""
        got = await self._peer_list_body(labels)
        data: Any = None if got is None else parse_json(*got, "peer list")
        return PeerList.from_dict(data).peers

    async def _peer_list_body(
        self, labels: Mapping[str, str] | None
    ) -> tuple[bytearray, str] | None:
        """`GET /peers`' body undecoded and the host that sent it (None: a 204).

        `HubDirectory` compares it with the last body before decoding: an
        unchanged roster of 10,000 peers is then not decoded again.
        """
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("label", f"{k}={v}") for k, v in sorted((labels or {}).items())
        ]
        return await self._bounded(
            self._body_now(
                "GET",
                "/peers",
                "peer list",
                params=params or None,
                hint_by_status={
                    404: "this daemon keeps no peer registry; point at the fleet's hub"
                },
            ),
            "GET /peers",
        )

    async def register_peer(
        self,
        name: str,
        endpoint: str,
        labels: Mapping[str, str] | None = None,
        ttl: float | None = None,
    ) -> PeerRecord:
        """`POST /peers`: register (or replace) `name` at `endpoint` with a lease."""
        problem = endpoint_problem(endpoint)
        if problem is not None:
            raise ValueError(
                f"attach: endpoint {shown_url(endpoint)!r} for peer {name!r} is refused: "
                f"{problem}; register an absolute http(s) URL with a host"
            )
        body: dict[str, Any] = {"name": name, "endpoint": endpoint}
        if labels:
            body["labels"] = dict(labels)
        if ttl is not None:
            body["heartbeat_ttl_sec"] = int(ttl)
        return PeerRecord.from_dict(await self._json("POST", "/peers", "register", body=body))

    async def heartbeat(self, registration_id: str) -> PeerRecord:
        """`POST /peers/{id}/heartbeat`: extend the lease (404: register again)."""
        path = f"/peers/{_registration_segment(registration_id)}/heartbeat"
        return PeerRecord.from_dict(
            await self._json(
                "POST",
                path,
                "heartbeat",
                hint_by_status={404: "the hub no longer knows this registration: register again"},
            )
        )

    async def deregister(self, registration_id: str) -> None:
        """`DELETE /peers/{id}`; idempotent on the hub's side."""
        await self._json("DELETE", f"/peers/{_registration_segment(registration_id)}", "deregister")

    async def whoami(self) -> WhoAmI:
        """`GET /whoami`: the identity the daemon sees for this token."""
        return WhoAmI.from_dict(await self._json("GET", "/whoami", "whoami"))

    async def agent_card(self) -> AgentCard:
        """`GET /.well-known/agent-card.json`: the peer's A2A card (its name and skills).

        A daemon serves it only when configured with a card description; one
        without answers 404 (`NotFoundError`).
        """
        return AgentCard.from_dict(await self._json("GET", AGENT_CARD_PATH, "agent card"))
