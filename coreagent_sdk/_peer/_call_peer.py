"""`CallPeer`: named delegation to a peer agent, bounded in time and size.

Properties held by construction, and why each matters:

- The arguments are a peer *name* and a prompt. There is no URL, header,
  token or timeout argument, so a model cannot point the tool at an address
  of its choosing or lift its own bounds. A URL-shaped name is just a name.
- The name is resolved through the directory on every call: a peer whose
  lease lapsed is gone on the next call, not after a cache expires.
- The endpoint is checked (absolute http or https, with a host) before it is
  dialed, even though the hub checked it at registration.
- The gate runs before the token is read and before any network call: a
  refused call leaves no trace on the network.
- The credential comes from an environment variable read at call time. It
  is not in the schema, the result, reprs, errors, logs or events.
- Subscribe before inject: a fast peer's turn starts the moment the message
  lands, and a stream opened afterwards would miss it.
- One wall-clock deadline covers the whole call (a call that can outlive a
  liveness probe is a wedged parent), and a byte cap stops reading at once.
  A call that times out or loses its stream fails: a partial answer that
  looks complete is worse than an error.
"""

from __future__ import annotations

import asyncio
import contextvars
import fnmatch
import functools
import inspect
import json
import logging
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import httpx

from .._attach._client import MULTI_SESSION_HINT, AttachClient
from .._attach._oversized import OversizedFrame
from .._attach._quote import go_quote, quoted_names
from .._attach._recording import recording_peer
from .._attach._token import credential_variable
from .._attach._wire import AgentEvent, AgentFrame, Frame, TurnComplete, TurnError
from .._clock import Clock, SystemClock
from .._http._asyncio_only import require_asyncio
from .._http._deadline import governed, within
from .._http._endpoint import endpoint_problem, shown_url
from .._http._hosts import HostAllowList
from .._http._plumbing import LoopBoundClient
from .._http._rate_limit import waiting_out_rate_limits
from .._scrub import scrub, server_text
from .._telemetry import _metrics, _tracing
from ..errors import (
    APIStatusError,
    AuthenticationError,
    CallPeerError,
    CoreAgentError,
    DirectoryError,
    InvalidArgumentError,
    InvalidEndpointError,
    NotImplementedByServerError,
    PeerRateLimitedError,
    PeerRequestError,
    PeerTimeoutError,
    PeerTurnError,
    PermissionDeniedError,
    ProtocolError,
    RateLimitedError,
    StreamEndedError,
    TransportFailure,
    UnknownPeerError,
)
from ..jupyter import reenters, run_sync
from . import _hops, _read_back
from ._a2a_bounds import BoundedBodies
from ._a2a_call import CANCEL_SECONDS, ask_a2a
from ._a2a_cards import A2A_LABEL, CardCache
from ._a2a_directory import A2ADirectory, card_url_of
from ._chunks import chunk_sink
from ._directory import Directory, HubDirectory, Peer, lookup_peer, read_token
from ._loop_thread import LoopThread
from ._read_back import DEFAULT_READ_BACK_BYTES
from ._results import ANSWER_SEPARATOR as _SEPARATOR
from ._results import MAX_TIMEOUT, CallPeerEvent, CallPeerResult, _Call, event_bound
from ._slots import CallSlots

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TOOL_NAME",
    "MAX_TIMEOUT",
    "AllowList",
    "CallPeer",
    "CallPeerEvent",
    "CallPeerResult",
    "Gate",
]

DEFAULT_TOOL_NAME = "call_peer"
"""The tool's name unless `CallPeer(name=...)` says otherwise."""
DEFAULT_TIMEOUT = 120.0
"""Seconds one whole call may take, unless `timeout=` says otherwise."""
DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024
"""The byte cap of an answer (UTF-8 bytes), unless `max_response_bytes=` says otherwise."""
DEFAULT_MAX_CONNECTIONS = 100
"""Connections to peers one `CallPeer` may hold open per event loop, unless `max_connections=`.

A call holds two at once (its event stream and a request), so this admits 50
calls at once per loop; more wait, inside their own deadline. 100 sockets
stay well inside a `ulimit -n` of 1024 beside an app's own.
"""

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI and Anthropic both accept
# All a delegation reads; capabilities, status and inbox frames go unparsed.
_READ_TYPES = frozenset({"agent", "turn-complete", "turn-error"})
_READING = "the event stream"  # the step of a delegation that reads the turn
_KEPT_CLIENTS = 256  # peers' attach clients a tool keeps for reuse (see _client_for)
_MAX_LISTED = 50  # names listed in an unknown-peer error
_MAX_LISTING = 4000  # characters of names listed in one: 50 long names stay one screen
_MAX_QUOTED = 1000  # characters of a peer's own words quoted in an error message
# The daemon's cap on an inject body (protocol.md: write bodies, inject 8 KiB). A prompt
# over it is refused before any request, so no session is left open on the peer.
_MAX_INJECT_BYTES = 8 * 1024


Gate = Callable[[str, str], "Awaitable[None] | None"]
"""A gate: `gate(tool, peer)`, sync or async; it raises `PermissionDeniedError` to refuse."""

_log = logging.getLogger("coreagent_sdk.call_peer")


def _q(value: str) -> str:
    # Go's %q, which the daemon's own messages use: "x" with escapes, and cut (hostile input).
    return go_quote(value)


def _check_prompt(tool: str, peer: str, prompt: object) -> None:
    """Refuse a prompt the peer cannot take, before any request (no orphan session)."""
    if not isinstance(prompt, str):
        raise InvalidArgumentError(
            f"{tool}: prompt must be a string (the task for peer {_q(peer)}), "
            f"got {type(prompt).__name__}"
        )
    if not prompt.strip():
        raise InvalidArgumentError(f"{tool}: prompt is empty; say what peer {_q(peer)} should do")
    try:
        size = len(json.dumps({"message": prompt}).encode())
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"{tool}: prompt is not valid Unicode text (a lone surrogate "
            f"{prompt[exc.start]!r} at index {exc.start}); decode your input with "
            "errors='replace' or remove it"
        ) from None
    if size > _MAX_INJECT_BYTES:
        raise InvalidArgumentError(
            f"{tool}: prompt is {size} bytes as an inject body, over the daemon's "
            f"{_MAX_INJECT_BYTES}-byte (8 KiB) inject cap; shorten it, or hand the peer a "
            "reference (a path, a URL it can read) instead of the content"
        )


class AllowList:
    """A gate allowing `<tool name>:<peer name>` keys that match any glob pattern.

    ``AllowList(["call_peer:prod-*"])`` lets the `call_peer` tool ask any peer whose name
    starts with ``prod-``; a refused call raises `PermissionDeniedError` naming the
    pattern to add.

    Attributes:
        patterns: The glob patterns, in the order given.
    """

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)

    def __repr__(self) -> str:
        return f"AllowList({list(self.patterns)!r})"

    def allows(self, tool_name: str, peer_name: str) -> bool:
        """Whether `<tool_name>:<peer_name>` matches one of the patterns."""
        key = f"{tool_name}:{peer_name}"
        return any(fnmatch.fnmatchcase(key, p) for p in self.patterns)

    def __call__(self, tool_name: str, peer_name: str) -> None:
        if not self.allows(tool_name, peer_name):
            raise PermissionDeniedError(
                f"{tool_name}: calling peer {_q(peer_name)} is not allowed (allow list: "
                f"{', '.join(self.patterns) or 'empty'}); add a pattern such as "
                f"'{tool_name}:{peer_name}' to allow it"
            )


# The event loop a sync call's caller was running (None: plain sync code, or an awaited
# call). That loop can run nothing until the call returns, so a peer waiting on it (a
# task an async test scheduled) can never finish: a timeout then names it, rather than
# advising a longer timeout. Context variables follow the call onto the loop it runs on.
_blocked_loop: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "coreagent_blocked_loop", default=None
)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _timeout_advice() -> str:
    """What to do about a timeout: a longer one, unless the caller's own loop was blocked."""
    blocked = _blocked_loop.get()
    if blocked is None:
        return f"Ask for less, or raise timeout= (at most {MAX_TIMEOUT:g})"
    return (
        f"This sync call was made on a running event loop ({type(blocked).__name__} at "
        f"{id(blocked):#x}), which could run nothing until the call returned: if the peer "
        "waited on that loop (a task your async test scheduled, a server on it), no timeout "
        "is long enough. `await tool.acall(...)` there instead of calling the tool"
    )


class CallPeer:
    """The `call_peer` tool: ask a peer, by name, to do work; get its answer back.

    ``directory`` resolves names (asked on every call); ``transport`` reaches
    the peers (None: the real network); ``token_env`` names the environment
    variable holding the bearer token (read per call from ``environ``, default
    `os.environ`); ``timeout`` bounds each whole call (0 < timeout <= 900 s);
    ``max_response_bytes`` caps the answer (UTF-8 bytes). ``gate(tool, peer)``
    may raise `PermissionDeniedError`; ``on_event`` observes calls.
    ``wait_on_rate_limit=True`` waits out a peer's 429 on `POST /sessions` when
    its `Retry-After` fits in what is left of the deadline (on ``clock``);
    otherwise the 429 is `PeerRateLimitedError` with `retry_after`.
    ``allowed_hosts`` limits the hosts it may dial (None: any, except that an
    A2A agent's card may then point only at the origin it was read from).

    ``max_connections`` caps the connections to peers per event loop (a call
    holds two, so ``max_connections // 2`` calls run at once; more wait for a
    free one inside their own deadline). ``delete_sessions=True`` deletes each
    call's session on the peer once its whole answer is read (best effort,
    within what is left of the deadline; a truncated answer's session is kept,
    it holds the rest). ``meter_provider`` records OpenTelemetry metrics (None:
    the global provider, if one is set; see the web-service guide).

    The sync form (``tool(peer, prompt)``) is safe from any number of threads:
    its calls run on one event loop on a thread of the tool's own, which keeps
    their connections pooled between calls. `close()` (or `aclose()`) stops it.

    Attributes:
        directory: Resolves peer names to endpoints, asked on every call.
        token_env: The environment variable holding the bearer token (None: no token).
        timeout: Seconds one whole call may take, lookup included.
        max_response_bytes: The answer's cap in UTF-8 bytes.
        name: The tool's name, as a model sees it.
        gate: Called as ``gate(tool, peer)`` before each call; raises to refuse.
        allowed_hosts: The `HostAllowList` of hosts this tool may dial (None: any).
        wait_on_rate_limit: Whether a 429 that fits the deadline is waited out.
        max_connections: Connections to peers per event loop (two per call).
        delete_sessions: Whether each answered call's session is deleted on the peer.
    """

    def __init__(
        self,
        directory: Directory,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        token_env: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        name: str = DEFAULT_TOOL_NAME,
        description: str | None = None,
        gate: Gate | None = None,
        environ: Mapping[str, str] | None = None,
        on_event: Callable[[CallPeerEvent], None] | None = None,
        logger: logging.Logger | None = None,
        wait_on_rate_limit: bool = False,
        clock: Clock | None = None,
        allowed_hosts: Iterable[str] | HostAllowList | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        delete_sessions: bool = False,
        meter_provider: Any = None,
    ) -> None:
        if (
            isinstance(max_connections, bool)
            or not isinstance(max_connections, int)
            or max_connections < 2
        ):
            raise ValueError(
                "call_peer: max_connections must be an int >= 2 (a call holds two connections "
                f"at once), got {max_connections!r}; the default is {DEFAULT_MAX_CONNECTIONS}"
            )
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not (0 < timeout <= MAX_TIMEOUT)
        ):
            raise ValueError(
                f"call_peer: timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}], "
                f"got {timeout!r}; the default is {DEFAULT_TIMEOUT:g}"
            )
        if (
            isinstance(max_response_bytes, bool)
            or not isinstance(max_response_bytes, int)
            or (max_response_bytes <= 0)
        ):
            raise ValueError(
                "call_peer: max_response_bytes must be a positive int, "
                f"got {max_response_bytes!r}; "
                f"the default is {DEFAULT_MAX_RESPONSE_BYTES}"
            )
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise ValueError(
                f"call_peer: tool name {name!r} is not usable by function-calling APIs; "
                "use 1-64 letters, digits, '_' or '-' (the default is 'call_peer')"
            )
        if not callable(getattr(directory, "peers", None)):
            shown = repr(directory)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            hint = (
                f"; for a hub URL use HubDirectory({shown})"
                if isinstance(directory, str)
                else "; use HubDirectory(hub_url), StaticDirectory(peers) or DirectoryFunc(fn)"
            )
            raise TypeError(
                f"call_peer: directory must be a Directory (an object with async peers()), "
                f"got {type(directory).__name__} {shown}{hint}"
            )
        if token_env is not None and (not isinstance(token_env, str) or not token_env.strip()):
            raise ValueError(
                f"call_peer: token_env must name an environment variable, got {token_env!r}"
            )
        self.directory = directory
        self.token_env = token_env
        credential_variable(token_env)  # never handed to an MCP server
        self.timeout = float(timeout)
        self.max_response_bytes = max_response_bytes
        self.name = name
        self.gate = gate
        self._description = description
        self._environ = environ
        self._on_event = on_event
        self._log = logger if logger is not None else _log
        self.max_connections = max_connections
        self._http = LoopBoundClient(transport, max_connections)
        self._slots = CallSlots(max_connections // 2)
        # A2A peers' pool: every body read through it is counted (see _a2a_bounds), and the
        # A2A SDK sets its version header on the client it is given, so it has its own.
        self._a2a_http = LoopBoundClient(transport, max_connections, wrap=BoundedBodies)
        # The A2A SDK's clients by (pool, endpoint, version, streaming); see _a2a_call.
        self._a2a_clients: dict[tuple[int, str, str, bool], tuple[httpx.AsyncClient, Any]] = {}
        # Clients by (pool, endpoint, token, event bound); see _client_for.
        self._attach_clients: dict[
            tuple[int, str, str | None, int], tuple[httpx.AsyncClient, AttachClient]
        ] = {}
        self._last_client: tuple[httpx.AsyncClient, tuple[str | None, int], AttachClient] | None = (
            None
        )
        self.delete_sessions = bool(delete_sessions)
        self._meter_provider = meter_provider
        # Sync calls run here. Collected with the tool: its loop closes its own connections.
        self._loop_thread = LoopThread(f"coreagent-{name}")
        self._release = functools.partial(_release, self._http, directory, self._a2a_http)
        weakref.finalize(self, self._loop_thread.stop, self._release).atexit = False
        # Hosts this tool may dial (None: any); checked before anything is sent.
        self.allowed_hosts = (
            allowed_hosts
            if allowed_hosts is None or isinstance(allowed_hosts, HostAllowList)
            else HostAllowList(allowed_hosts)
        )
        self.wait_on_rate_limit = bool(wait_on_rate_limit)
        self._clock: Clock = clock if clock is not None else SystemClock()
        # Hub peers labelled A2A: their cards, kept as their caching headers allow.
        self._a2a_cards = CardCache(self._clock)

    def __repr__(self) -> str:
        return (
            f"CallPeer(name={self.name!r}, directory={self.directory!r}, "
            f"token_env={self.token_env!r}, timeout={self.timeout:g}, "
            f"max_response_bytes={self.max_response_bytes})"
        )

    # ------------------------------------------------------------ tool surface

    @property
    def description(self) -> str:
        """What the model reads about the tool."""
        if self._description is not None:
            return self._description
        return (
            "Ask another agent in the fleet (a peer) to do a task, by the peer's name. "
            "The peer works in a fresh session of its own, so make the prompt "
            "self-contained. Its answer comes back as text, cut at "
            f"{self.max_response_bytes} bytes (then marked truncated), within "
            f"{self.timeout:g} seconds. To find out which peers exist, call this "
            "tool with an empty peer name: the error lists the registered peers."
        )

    @property
    def schema(self) -> dict[str, Any]:
        """JSON schema of the arguments: `peer` and `prompt`, both required strings."""
        return {
            "type": "object",
            "properties": {
                "peer": {
                    "type": "string",
                    "description": "Name of the peer agent to ask (a name, not a URL). "
                    "Empty lists the registered peers.",
                },
                "prompt": {
                    "type": "string",
                    "description": "The task for the peer, complete in itself.",
                },
            },
            "required": ["peer", "prompt"],
            "additionalProperties": False,
        }

    def openai_tool(self) -> dict[str, Any]:
        """The tool definition in OpenAI's function-calling format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.schema,
            },
        }

    def anthropic_tool(self) -> dict[str, Any]:
        """The tool definition in Anthropic's tool-use format."""
        return {"name": self.name, "description": self.description, "input_schema": self.schema}

    # ------------------------------------------------------------------ calling

    def __call__(self, peer: str, prompt: str) -> CallPeerResult:
        """Synchronous `acall`, safe from any thread (works in Jupyter too).

        Every sync call of this tool runs on one event loop, on a thread the
        tool starts on first use, so connections are reused between calls
        and threads never share async state. Inside a running loop the
        caller's loop waits for the call; ``await acall(...)`` there instead
        to keep that loop's other tasks running.
        """
        marked = _blocked_loop.set(_running_loop())  # the context goes with the call
        try:
            if reenters():  # enable_nested_sync(): run on the caller's own (re-entered) loop
                return run_sync(self.acall(peer=peer, prompt=prompt))
            if self._loop_thread.owns_current_thread():
                # Called from code running on the tool's own loop (a hook, a behaviour):
                # waiting for that loop here would wait forever, so this one call gets a
                # loop of its own.
                return run_sync(self._acall_and_release(peer, prompt))
            return self._loop_thread.run(self.acall(peer=peer, prompt=prompt))
        finally:
            _blocked_loop.reset(marked)

    async def _acall_and_release(self, peer: str, prompt: str) -> CallPeerResult:
        # The loop made for one sync call dies with it: release its connections on it
        # first, so none is left to be finalised later on no loop.
        try:
            return await self.acall(peer=peer, prompt=prompt)
        finally:
            await self._release()

    def close(self) -> None:
        """Stop the sync calls' loop thread, closing its connections; the tool stays usable.

        For apps that only make sync calls (a WSGI app's shutdown hook). A sync
        call still in flight is cancelled. `aclose()` does this too.
        """
        self._loop_thread.close(self._release)

    async def aclose(self) -> None:
        """Release pooled connections (a `HubDirectory`'s too) and stop the sync calls' loop.

        The tool stays usable: the next call opens what it needs again.
        """
        await self._release()
        if not self._loop_thread.owns_current_thread():
            await asyncio.wrap_future(self._loop_thread.stop(self._release))

    async def __aenter__(self) -> CallPeer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def acall(self, peer: str, prompt: str) -> CallPeerResult:
        """Ask `peer` to answer `prompt`; see the class and module docs for the rules."""
        require_asyncio(self.name)
        call = _Call(peer if isinstance(peer, str) else "", _hops.budget(self.timeout))
        metrics = _metrics.call_metrics(self._meter_provider)  # None: nothing records
        span = _tracing.call_span(self.name, call.peer)  # None without OpenTelemetry
        try:
            if span is None:
                result = await self._acall(call, peer, prompt)
            else:
                result = await span.run(call, self._acall(call, peer, prompt))
        except BaseException as exc:
            if call.abandon is not None and isinstance(exc, CallPeerError):
                await self._abandon(call)  # past the deadline, or at a bound: the task runs on
            if metrics is not None:
                self._measure(metrics, call, exc)
            raise
        if call.abandon is not None:
            await self._abandon(call)  # cut at the byte cap: the rest is not wanted
        if metrics is not None:
            self._measure(metrics, call, None, truncated=result.truncated)
        if call.forget is not None:
            await self._forget(call)
        return result

    def _measure(
        self,
        metrics: _metrics.CallMetrics,
        call: _Call,
        error: BaseException | None,
        truncated: bool = False,
    ) -> None:
        try:
            metrics.record(
                tool=self.name,
                peer=call.peer if call.resolved else None,
                seconds=time.perf_counter() - call.started,
                error=error,
                truncated=truncated,
            )
        except Exception:  # a broken exporter must not change the call's outcome
            self._log.warning("%s: recording metrics failed", self.name, exc_info=True)

    async def _abandon(self, call: _Call) -> None:
        """Cancel the A2A task the call stopped reading: best effort, within `CANCEL_SECONDS`.

        Its failure never changes the call's own outcome: it is logged, scrubbed.
        """
        abandon, call.abandon = call.abandon, None
        if abandon is None:
            return
        try:
            with governed():
                await within(CANCEL_SECONDS, abandon())
        except Exception as exc:  # asyncio.TimeoutError included
            said = (
                f"no answer within {CANCEL_SECONDS:g} s"
                if isinstance(exc, asyncio.TimeoutError)
                else f"{type(exc).__name__}: {server_text(str(exc), 300)[0]}"
            )
            self._log.info(
                "%s: could not cancel task %s on peer %s: %s",
                self.name,
                call.session_id,
                _q(call.peer),
                said,
            )

    async def _forget(self, call: _Call) -> None:
        """Delete the call's session (delete_sessions=True): best effort, within the deadline."""
        forget, call.forget = call.forget, None
        left = call.budget.seconds - (time.perf_counter() - call.started)
        if forget is None or left <= 0:
            return
        try:
            with governed():
                await within(left, forget())
        except Exception as exc:  # asyncio.TimeoutError included
            # The answer is in hand: a session left behind costs the peer memory, not the call.
            self._log.info(
                "%s: could not delete session %s on peer %r: %s",
                self.name,
                call.session_id,
                call.peer,
                "the deadline passed" if isinstance(exc, asyncio.TimeoutError) else exc,
            )

    async def read_answer(
        self,
        result: CallPeerResult,
        *,
        max_response_bytes: int = DEFAULT_READ_BACK_BYTES,
        timeout: float | None = None,
    ) -> CallPeerResult:
        """Read a call's whole answer back from the peer's session (after a truncated call).

        ``result`` is what `acall` returned; the peer is found by its name
        through the directory again and its session's log is replayed from the
        start. Bounded as a call is: one deadline (``timeout``, default the
        tool's own) and a byte cap (``max_response_bytes``, default 1 MiB, at
        most 64 MiB; the returned result's `truncated` says when it cut). The
        gate, ``allowed_hosts`` and the token apply as to a call. Waits for
        the peer's turn to end if it is still running; a log that has lost the
        answer's beginning raises `PeerRequestError` rather than return a tail.
        For an A2A agent the task is read with `GetTask` (asked again while it
        runs); a task the cut call canceled raises `PeerTurnError` (kind
        ``canceled``): it has no whole answer.
        """
        return await _read_back.read_answer(self, result, max_response_bytes, timeout)

    async def _acall(self, call: _Call, peer: str, prompt: str) -> CallPeerResult:
        self._emit("started", call)
        try:
            if not isinstance(peer, str):
                raise InvalidArgumentError(
                    f"{self.name}: peer must be a peer name (a string), got {type(peer).__name__}"
                )
            _check_prompt(self.name, peer, prompt)
            if peer.strip():
                await self._check_gate(peer)
            token = read_token(self.token_env, self._environ, self.name)
            seconds, path = call.budget.seconds, call.budget.path
            if seconds < _hops.MIN_BUDGET:  # a hop deep in a delegation: it could only time out
                raise _hops.not_asked(self.name, peer, path, seconds)
            try:
                # One deadline governs the whole call: the directory's and the
                # client's own deadlines step aside, so every stall ends here.
                with governed():
                    result = await within(seconds, self._resolve_and_ask(call, prompt, token))
            except asyncio.TimeoutError:
                where = f" (session {call.session_id})" if call.session_id else ""
                if call.waiting:
                    raise PeerTimeoutError(
                        f"{self.name}: the call to peer {_q(peer)} waited {seconds:.3g} s "
                        f"for a free connection and got none (max_connections="
                        f"{self.max_connections}: {self._slots.calls} calls at once per event "
                        "loop); nothing was sent. Raise max_connections, or send fewer calls "
                        "at once"
                    ) from None
                looped = _hops.in_cycle(self.name, peer, path, seconds)
                if looped is not None:  # the halving at work, not a deadline to raise
                    raise looped from None
                if not call.budget.whole:
                    raise _hops.cut_short(self.name, peer, path, seconds) from None
                raise PeerTimeoutError(
                    f"{self.name}: peer {_q(peer)} did not finish within "
                    f"{self.timeout:.3g} s{where}; no partial answer is returned. "
                    + _timeout_advice()
                ) from None
        except CallPeerError as exc:
            _hops.forget(call.session_id)
            # Safe to retry exactly when the prompt cannot have reached the peer.
            exc.retry_safe = not call.injected
            self._emit("failed", call, error=str(exc), error_type=type(exc).__name__)
            self._log.info("%s: call to %s failed: %s", self.name, _q(call.peer), exc)
            raise
        _hops.forget(call.session_id)
        size = len(result.response.encode()) if self._on_event is not None else None
        if result.truncated:
            self._emit("truncated", call, response_bytes=size)
        self._emit("finished", call, response_bytes=size)
        self._log.info(
            "%s: peer %s answered in %d ms (session %s, %d chars%s)",
            self.name,
            _q(result.peer),
            result.duration_ms,
            result.session_id,
            len(result.response),
            ", truncated" if result.truncated else "",
        )
        return result

    async def _check_gate(self, peer: str) -> None:
        if self.gate is None:
            return
        verdict = self.gate(self.name, peer)
        if inspect.isawaitable(verdict):
            await verdict

    async def _allowed_names(self, roster: Iterable[Peer]) -> tuple[str, ...]:
        """The roster's names, sorted; only those the gate allows."""
        names = sorted({p.name for p in roster})
        if self.gate is not None:
            allowed = []
            for name in names:
                try:
                    await self._check_gate(name)
                except PermissionDeniedError:
                    continue
                allowed.append(name)
            names = allowed
        return tuple(names)

    @staticmethod
    def _listed(names: Sequence[str]) -> str:
        """Names for an error message, bounded."""
        # Quoted as Go's %q would: a name cannot forge a line in the model's context.
        quoted, more = quoted_names(names, most=_MAX_LISTED, budget=_MAX_LISTING)
        shown = ", ".join(quoted) + (f", and {more} more" if more else "")
        return shown or "none allowed"

    async def _roster(self) -> Sequence[Peer]:
        try:
            return await self.directory.peers()
        except CallPeerError:
            raise
        except Exception as exc:
            raise DirectoryError(
                f"{self.name}: the directory could not list peers ({exc!r}); "
                "check the hub URL and that the hub is up"
            ) from exc

    async def _resolve_and_ask(self, call: _Call, prompt: str, token: str | None) -> CallPeerResult:
        target = await self._resolve(call.peer)
        call.resolved = True
        slots = self._slots.here()
        call.waiting = True
        async with slots:  # waits inside the call's deadline, like everything else
            call.waiting = False
            with recording_peer(target.name):  # a recording names the peer it came from
                return await self._ask(call, target, prompt, token)

    async def _resolve(self, name: str) -> Peer:
        """The peer named `name`, by the directory's by-name lookup; the roster only on a miss."""
        candidate = None
        if name.strip():
            try:
                candidate = await lookup_peer(self.directory, name)
            except CallPeerError:
                raise
            except Exception as exc:
                raise DirectoryError(
                    f"{self.name}: the directory could not look up peer {_q(name)} ({exc!r}); "
                    "check the hub URL and that the hub is up"
                ) from exc
        if candidate is None:
            roster = await self._roster()
            if not roster:
                raise UnknownPeerError(
                    f"{self.name}: no peers are registered with this hub right now", names=()
                )
            names = await self._allowed_names(roster)
            if not name.strip():
                raise UnknownPeerError(
                    f"{self.name}: peer is required (registered: {self._listed(names)})",
                    names=names,
                )
            raise UnknownPeerError(
                f"{self.name}: unknown peer {_q(name)} (registered: {self._listed(names)})",
                names=names,
            )
        if not candidate.endpoint:
            raise InvalidEndpointError(
                f"{self.name}: peer {_q(name)} has no endpoint; re-register it with an "
                "absolute http(s) URL"
            )
        problem = endpoint_problem(candidate.endpoint)
        if problem is not None:
            raise InvalidEndpointError(
                f"{self.name}: peer {_q(name)} has endpoint {shown_url(candidate.endpoint)!r}, "
                f"which is refused: {problem}; re-register the peer with an absolute http(s) "
                "URL with a host"
            )
        return candidate

    def _request_error(self, call: _Call, exc: CoreAgentError, step: str) -> CallPeerError:
        """What a failure at `step` of a delegation means to the caller, and its fix."""
        who = f"{self.name}: peer {_q(call.peer)}"
        if isinstance(exc, TransportFailure) and step == _READING:
            return StreamEndedError(
                f"{who} broke off its event stream before the turn ended "
                f"(session {call.session_id}): {exc}; no partial answer is returned. "
                "Retry, or read the session on the peer"
            )
        if isinstance(exc, NotImplementedByServerError) and step == "POST /sessions":
            return PeerRequestError(
                f"{who} cannot open a session (501): {MULTI_SESSION_HINT}", status_code=501
            )
        if isinstance(exc, RateLimitedError):
            after = "" if exc.retry_after is None else f", retry after {exc.retry_after:g} s"
            fix = (
                "waiting it out would pass the deadline, or it kept answering 429"
                if self.wait_on_rate_limit
                else "slow down, or pass wait_on_rate_limit=True to wait within the deadline"
            )
            return PeerRateLimitedError(
                f"{who} is limiting how fast this caller opens sessions (429{after}); {fix}",
                retry_after=exc.retry_after,
            )
        if isinstance(exc, AuthenticationError):
            fix = (
                f"set ${self.token_env} to a token the peer accepts"
                if self.token_env
                else "the peer requires a token: pass token_env='VAR' and export VAR"
            )
            return PeerRequestError(
                f"{who} refused the credential on {step} (401); {fix}", status_code=401
            )
        if isinstance(exc, APIStatusError):
            return PeerRequestError(f"{who} failed {step}: {exc}", status_code=exc.status_code)
        if isinstance(exc, ProtocolError):
            # It answered, in a shape (or a size) this SDK does not read: not unreachable.
            where = f" (session {call.session_id})" if call.session_id else ""
            return PeerRequestError(
                f"{who} sent an answer on {step} that cannot be read{where}: {exc}"
            )
        return PeerRequestError(f"{who} could not be reached on {step}: {exc}")

    def _check_host(self, peer: str, endpoint: str) -> None:
        """Refuse, before anything is sent, an endpoint whose host is not allowed."""
        hosts = self.allowed_hosts
        if hosts is not None and not hosts.allows(endpoint):
            raise InvalidEndpointError(
                f"{self.name}: peer {_q(peer)} is at host "
                f"{hosts.host_of(endpoint)!r}, which is not in allowed_hosts "
                f"({', '.join(hosts.patterns) or 'empty'}); nothing was sent. Add the host "
                "to allowed_hosts if it is trusted"
            )

    async def _a2a_target(self, call: _Call, target: Peer) -> Peer:
        """`target`, or for a hub peer labelled an A2A agent, the peer its card describes."""
        if target.a2a is None and target.labels.get(A2A_LABEL) == "a2a":
            # Its card (kept as its caching headers allow) says how to reach it.
            self._check_host(call.peer, target.endpoint)
            card_url = card_url_of(target.endpoint)
            return await self._a2a_cards.read(self._a2a_http.get(), card_url, target.name)
        return target

    def _client_for(self, peer: str, target: Peer, token: str | None, cap: int) -> AttachClient:
        """A client for `target`, refused before anything is sent if its host is not allowed.

        Shared by a call and `read_answer`, so both dial under the same host check.
        """
        self._check_host(peer, target.endpoint)
        bound = event_bound(cap)
        http = self._http.get()
        # A peer's client is made once per event loop's pool and reused: making one parses
        # and checks its URL and merges its headers, a twentieth of a delegation's CPU.
        key = (id(http), target.endpoint, token, bound)
        kept = self._attach_clients.get(key)
        if kept is not None and kept[0] is http:
            return kept[1]
        # Past the kept ones, a new peer's client is the last one made for another base
        # URL, when all else (pool, token, bound) is the same: half a new client's cost.
        last = self._last_client
        if last is not None and last[0] is http and last[1] == (token, bound):
            client = last[2]._for_base(target.endpoint)
        else:
            client = AttachClient(
                target.endpoint,
                http_client=http,
                token=token,
                max_event_bytes=bound,
                max_line_bytes=bound,
            )
            self._last_client = (http, (token, bound), client)
        if len(self._attach_clients) >= _KEPT_CLIENTS:
            self._attach_clients.clear()  # bounded: a fleet larger than this makes them anew
        self._attach_clients[key] = (http, client)
        return client

    async def _ask(
        self, call: _Call, target: Peer, prompt: str, token: str | None
    ) -> CallPeerResult:
        target = await self._a2a_target(call, target)
        if target.a2a is not None:
            text, truncated = await ask_a2a(
                self, call, target, prompt, token, event_bound(self.max_response_bytes)
            )
            return CallPeerResult(
                peer=target.name,
                session_id=call.session_id,
                response=text,
                duration_ms=call.elapsed_ms(),
                truncated=truncated,
                max_response_bytes=self.max_response_bytes,
            )
        client = self._client_for(call.peer, target, token, self.max_response_bytes)
        step = "POST /sessions"
        try:
            session = await waiting_out_rate_limits(
                client.new_session,
                wait=self.wait_on_rate_limit,
                time_left=lambda: call.budget.seconds - (time.perf_counter() - call.started),
                sleep=self._clock.sleep,
            )
            call.session_id = session.session_id
            # Before the prompt lands: the peer's turn, if it runs in this process, takes
            # the deadline from here and hands its own calls half of what is left.
            _hops.note(
                call.session_id, call.started + call.budget.seconds, call.budget.path, call.id
            )
            self._emit("session_opened", call)
            step = "GET events"
            async with client.events(session, types=_READ_TYPES, cut_oversized=True) as frames:
                step = "POST inject"
                call.injected = True  # from here the peer may have it, whatever we hear back
                await client.inject(session, prompt)
                step = _READING
                text, truncated = await self._read(call, frames)
        except CallPeerError:
            raise
        except CoreAgentError as exc:
            if step == "POST inject" and isinstance(exc, APIStatusError) and exc.status_code < 500:
                call.injected = False  # the daemon refused the message: no turn started
            raise self._request_error(call, exc, step) from exc
        if self.delete_sessions and not truncated:
            # After the answer, outside this deadline's reach: deleting never changes it.
            call.forget = functools.partial(client.delete_session, session)
        return CallPeerResult(
            peer=target.name,
            session_id=call.session_id,
            response=text,
            duration_ms=call.elapsed_ms(),
            truncated=truncated,
            max_response_bytes=self.max_response_bytes,
        )

    async def _read(self, call: _Call, frames: Any, cap: int | None = None) -> tuple[str, bool]:
        """Collect the turn's text by protocol.md's rules; (text, truncated)."""
        cap = self.max_response_bytes if cap is None else cap
        pieces: list[str] = []
        size = 0  # UTF-8 bytes of SEPARATOR.join(pieces)
        frame: Frame | OversizedFrame
        async for frame in frames:
            kind = type(frame)
            oversize = kind is OversizedFrame
            if oversize:
                # One event past the bound, read from its two ends: its text is a prefix.
                oversized: OversizedFrame = frame  # type: ignore[assignment]
                if oversized.frame is None:
                    raise self._unreadable(
                        call, oversized, "it is not an agent event this SDK reads"
                    )
                frame, kind = oversized.frame, AgentFrame
            if kind is AgentFrame:
                event: AgentEvent = frame.event  # type: ignore[union-attr]
                if event.partial:
                    sink = chunk_sink.get()
                    if sink is not None and event.text:
                        await sink(scrub(event.text))  # a bridge's progress (see _chunks)
                    continue
                # A peer may echo the caller's token; it must not reach the model.
                text = scrub(event.text)
                by_model = event.author not in ("", "user")
                if oversize and by_model:
                    held = len(text.lstrip().encode()) if not pieces else len(text.encode()) + 2
                    if size + held <= cap:
                        # Its first bytes did not fill the cap, and the rest (text after a
                        # huge tool result, say) is gone: an answer missing it would lie.
                        raise self._unreadable(
                            call,
                            oversized,
                            f"its first bytes held {len(text.encode())} bytes of text",
                        )
                if text and by_model:
                    if not pieces:
                        text = text.lstrip()
                    grown = size + len(text.encode()) + (2 if pieces else 0)
                    if grown > cap:
                        whole = _SEPARATOR.join([*pieces, text]).encode()
                        # Cutting bytes can split a character: drop the broken tail.
                        cut = whole[:cap].decode("utf-8", "ignore")
                        return cut.rstrip(), True
                    pieces.append(text)
                    size = grown
                # Only the peer's own events end the turn: a TurnComplete on the echoed
                # prompt or on an author-less event is ignored, as Go's call_peer does.
                if by_model and (event.turn_complete or (text and not event.has_function)):
                    break
            elif kind is TurnComplete:
                break
            elif kind is TurnError:
                err: TurnError = frame  # type: ignore[assignment]
                said, said_cut = server_text(err.message, _MAX_QUOTED)
                hint, hint_cut = server_text(err.hint or "", _MAX_QUOTED)
                raise PeerTurnError(
                    f"{self.name}: peer {_q(call.peer)} failed its turn ({err.kind}"
                    f"{', retryable' if err.retryable else ''}): {said}{'...' if said_cut else ''}"
                    f"{'; ' + hint if hint else ''}{'...' if hint_cut else ''} "
                    f"(session {call.session_id})",
                    kind=err.kind,
                    peer_message=err.message,
                    retryable=err.retryable,
                    code=err.code,
                    hint=err.hint,
                    session_id=call.session_id,
                )
        else:
            raise StreamEndedError(
                f"{self.name}: peer {_q(call.peer)} closed its event stream before the turn "
                f"ended (session {call.session_id}); no partial answer is returned. "
                "Retry, or read the session on the peer"
            )
        return _SEPARATOR.join(pieces).strip(), False

    def _unreadable(self, call: _Call, oversized: OversizedFrame, why: str) -> PeerRequestError:
        return PeerRequestError(
            f"{self.name}: peer {_q(call.peer)} sent one event of {oversized.size} bytes, over "
            f"the {event_bound(self.max_response_bytes)} bytes a call reads of one event, and "
            f"it could not be read ({why}); no partial answer is returned. Read it on the peer "
            f"(session {call.session_id}), or ask for a shorter answer"
        )

    def _emit(
        self,
        kind: str,
        call: _Call,
        error: str | None = None,
        *,
        error_type: str | None = None,
        response_bytes: int | None = None,
    ) -> None:
        if self._on_event is None:
            return
        event = CallPeerEvent(
            kind=kind,
            tool=self.name,
            peer=call.peer,
            session_id=call.session_id,
            duration_ms=call.elapsed_ms() if kind in ("finished", "failed", "truncated") else None,
            error=error,
            call_id=call.id,
            response_bytes=response_bytes,
            error_type=error_type,
        )
        try:
            self._on_event(event)
        except Exception:
            self._log.warning("%s: on_event hook raised on %s", self.name, kind, exc_info=True)


async def _release(
    http: LoopBoundClient, directory: Directory, a2a_http: LoopBoundClient | None = None
) -> None:
    """Close the running loop's pooled connections of a tool (and of its own directory)."""
    await http.aclose()
    if a2a_http is not None:
        await a2a_http.aclose()
    if isinstance(directory, (HubDirectory, A2ADirectory)):
        await directory.aclose()
