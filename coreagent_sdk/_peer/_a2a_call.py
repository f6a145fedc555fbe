"""A delegation to an A2A agent: `CallPeer`'s guarantees, over the A2A SDK's own client.

Everything before the dial is `CallPeer`'s, unchanged: the name is resolved
on this call, the gate ran, the token was read from the environment, one
deadline governs. Here, on top:

- The endpoint is the card's JSON-RPC URL, and it passes the same policy as
  a registry entry (absolute http(s) with a host, `allowed_hosts`) before it
  is dialed: a card may point anywhere, and that is how an SSRF starts.
  Without `allowed_hosts` it must also be on the origin the card was read
  from: a card cannot send the prompt and the token to a host the caller
  never named (an agent behind a proxy declaring its own `localhost` URL).
- The SDK's client rides the tool's own httpx transport (in-process routing,
  respx, the endpoint policy all apply), with every body counted as it
  arrives (`_a2a_bounds`): an endless line or body ends as an error.
- The answer is cut at the byte cap as it streams in (`truncated`), and the
  stream is closed then; the task id stands where an attach session id does.
- What the peer says (answers, errors, ids) is scrubbed of secrets before it
  reaches a result, an exception or a log. The token travels as a header of
  each request only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import httpx

from .. import _scrub
from .._attach._quote import go_quote
from .._attach._wire import TURN_ERROR_KINDS
from .._http._endpoint import endpoint_problem, shown_url
from .._http._rate_limit import retry_after_seconds
from .._scrub import scrub, server_text
from ..errors import (
    CallPeerError,
    InvalidEndpointError,
    PeerRateLimitedError,
    PeerRequestError,
    PeerTurnError,
    ProtocolError,
    StreamEndedError,
)
from . import _hops
from ._a2a_bounds import limits
from ._chunks import chunk_sink
from ._results import ANSWER_SEPARATOR as _SEPARATOR  # between artifacts, as events

if TYPE_CHECKING:
    from .._http._hosts import HostAllowList
    from .._http._plumbing import LoopBoundClient
    from ._directory import Peer
    from ._results import _Call


class CallPeer(Protocol):
    """What of `CallPeer` a delegation to an A2A agent uses (the tool itself, unimported)."""

    name: str
    token_env: str | None
    max_response_bytes: int
    allowed_hosts: HostAllowList | None
    _a2a_http: LoopBoundClient
    _a2a_clients: dict[tuple[int, str, str, bool], tuple[httpx.AsyncClient, Any]]

    def _emit(self, kind: str, call: _Call) -> None: ...


__all__ = ["CANCEL_SECONDS", "ask_a2a", "cancel_task", "read_task"]

CANCEL_SECONDS = 1.0
"""The longest the best-effort `CancelTask` of a task a call stopped reading may take.

A call cut at its byte cap, past its deadline, or at a bound of what it reads stops
reading a task the agent is still running; it then asks the agent to cancel it, and
ends at most this much after its deadline (a cut call: after its answer was in hand).
"""

_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_MAX_QUOTED = 1000  # characters of a peer's own words quoted in an error message
_MAX_ID = 256  # characters of a task id this SDK accepts (it goes into results and messages)
_BODY_FACTOR = 16  # a stream may carry this many event bounds in all before it is cut
_KEPT_CLIENTS = 256
_MAX_POLLS = 600  # GetTask requests of one read-back of a task still running
_POLL_SECONDS = (0.05, 1.0)  # the first and the longest wait between them


def _q(value: str) -> str:
    return go_quote(value)


def _said(text: str) -> str:
    shown, cut = server_text(text, _MAX_QUOTED)
    return shown + ("..." if cut else "")


class _Answer:
    """The artifacts read so far, and their size as one answer (UTF-8 bytes)."""

    __slots__ = ("cap", "order", "sizes", "texts", "total")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.texts: dict[str, str] = {}
        self.sizes: dict[str, int] = {}
        self.order: list[str] = []
        self.total = 0  # bytes of the texts joined by the separator

    def add(self, artifact: Any, append: bool) -> bool:
        """Take one artifact (update); True once the answer is over the cap."""
        key = artifact.artifact_id or f"#{len(self.order)}"
        text = _artifact_text(artifact)
        if key not in self.texts:
            self.order.append(key)
            self.texts[key] = ""
            self.sizes[key] = 0
            if len(self.order) > 1:
                self.total += len(_SEPARATOR)
        self.texts[key] = self.texts[key] + text if append else text
        size = len(self.texts[key].encode())
        self.total += size - self.sizes[key]
        self.sizes[key] = size
        return self.total > self.cap

    def text(self, cut: bool = False) -> tuple[str, bool]:
        """The answer; `cut`: reading stopped at the cap, so more was on its way."""
        # Scrubbed whole, not piece by piece: a token split across two chunks is still one.
        whole = scrub(_SEPARATOR.join(self.texts[k] for k in self.order)).strip()
        data = whole.encode()
        if len(data) <= self.cap:
            return whole, cut
        return data[: self.cap].decode("utf-8", "ignore").rstrip(), True


def _artifact_text(artifact: Any) -> str:
    """An artifact's text parts, unscrubbed, as one text.

    Concatenated: a streamed artifact's appended chunks are its parts (the SDK's task
    store extends ``parts`` on an append), so `GetTask` reads back what the stream said.
    """
    return "".join(p.text for p in artifact.parts if p.WhichOneof("content") == "text")


def _message_text(message: Any) -> str:
    """A message's text parts, one line apart, scrubbed."""
    return scrub("\n".join(p.text for p in message.parts if p.WhichOneof("content") == "text"))


def _checked_id(tool: str, peer: str, value: str) -> str:
    if not value or len(value) > _MAX_ID or not value.isprintable():
        shown, _ = server_text(value[:_MAX_QUOTED], 80)
        raise PeerRequestError(
            f"{tool}: peer {_q(peer)} named its task {shown!r}, which is not an id this SDK "
            f"takes (1-{_MAX_ID} printable characters); is it an A2A agent?"
        )
    return scrub(value)


def _card(target: Peer) -> Any:
    """The AgentCard the SDK's factory needs, made from what the directory resolved."""
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface

    a2a = target.a2a
    assert a2a is not None
    return AgentCard(
        name=target.name,
        supported_interfaces=[
            AgentInterface(
                protocol_binding="JSONRPC",
                url=target.endpoint,
                protocol_version=a2a.protocol_version,
            )
        ],
        capabilities=AgentCapabilities(streaming=a2a.streaming),
    )


def _client(tool: CallPeer, target: Peer) -> Any:
    """The SDK's client for `target` over this loop's pool, made once and kept (bounded)."""
    from a2a.client import ClientConfig, ClientFactory

    http = tool._a2a_http.get()
    a2a = target.a2a
    assert a2a is not None
    key = (id(http), target.endpoint, a2a.protocol_version, a2a.streaming)
    kept = tool._a2a_clients.get(key)
    if kept is not None and kept[0] is http:
        return kept[1]
    factory = ClientFactory(ClientConfig(httpx_client=http, streaming=a2a.streaming))
    client = factory.create(_card(target))
    if len(tool._a2a_clients) >= _KEPT_CLIENTS:
        tool._a2a_clients.clear()
    tool._a2a_clients[key] = (http, client)
    return client


def _check_dial(tool: CallPeer, target: Peer) -> None:
    """The endpoint policy on the URL about to be dialed (a card's, possibly a hostile one)."""
    problem = endpoint_problem(target.endpoint)
    if problem is not None:
        raise InvalidEndpointError(
            f"{tool.name}: peer {_q(target.name)}'s agent card points at "
            f"{shown_url(target.endpoint)!r}, which is refused: {problem}; nothing was sent. "
            "Fix the card's JSON-RPC interface URL (an absolute http(s) URL with a host)"
        )
    hosts = tool.allowed_hosts
    if hosts is not None and not hosts.allows(target.endpoint):
        raise InvalidEndpointError(
            f"{tool.name}: peer {_q(target.name)}'s agent card points at host "
            f"{hosts.host_of(target.endpoint)!r}, which is not in allowed_hosts "
            f"({', '.join(hosts.patterns) or 'empty'}); nothing was sent. Add the host to "
            "allowed_hosts if it is trusted"
        )
    read_at = target.a2a.card_url if target.a2a is not None else ""
    if hosts is None and read_at and not same_origin(read_at, target.endpoint):
        # Listed in allowed_hosts, the other host was trusted by name (checked above).
        raise InvalidEndpointError(
            f"{tool.name}: peer {_q(target.name)}'s agent card, read from origin "
            f"{origin_of(read_at)!r}, points its JSON-RPC interface at another origin, "
            f"{origin_of(target.endpoint)!r}; nothing was sent. An agent behind a proxy "
            "must declare the URL its callers reach it at (the proxy's), not its own; if "
            "the other host is the agent's and trusted, pass "
            f"allowed_hosts=[{origin_host(target.endpoint)!r}, ...] to {tool.name}"
        )


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of `url`: the host lower-cased, the scheme's default port."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    port = parts.port if parts.port is not None else _DEFAULT_PORTS.get(scheme)
    return scheme, host, port


def origin_of(url: str) -> str:
    """`url`'s origin as messages show it: ``scheme://host`` and a port not the default."""
    try:
        scheme, host, port = _origin(url)
    except ValueError:
        return "?"
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + ("" if port == _DEFAULT_PORTS.get(scheme) else f":{port}")


def origin_host(url: str) -> str:
    """`url`'s host (and a port not the default) as an `allowed_hosts` pattern names it."""
    return origin_of(url).partition("://")[2]


def same_origin(card_url: str, endpoint: str) -> bool:
    """Whether `endpoint` is on the origin its card was read from (A2A agents' usual case).

    Two names of this machine's loopback (``localhost``, ``127.0.0.1``, ``::1``) are one
    host, and a card read over http may point at https on the same host: neither reaches a
    server the card's own host is not.
    """
    try:
        (c_scheme, c_host, c_port), (e_scheme, e_host, e_port) = (
            _origin(card_url),
            _origin(endpoint),
        )
    except ValueError:
        return False
    if c_host in _LOOPBACK and e_host in _LOOPBACK:
        c_host = e_host
    if c_host != e_host:
        return False
    if (c_scheme, c_port) == (e_scheme, e_port):
        return True
    return (c_scheme, c_port, e_scheme, e_port) == ("http", 80, "https", 443)


def _status_error(
    tool: CallPeer, call: _Call, exc: BaseException, step: str = "SendMessage"
) -> CallPeerError | None:
    """A status the peer answered with, as CallPeer's typed error (None: not a status)."""
    cause = exc.__cause__
    if not isinstance(cause, httpx.HTTPStatusError):
        return None
    response = cause.response
    status = response.status_code
    who = f"{tool.name}: peer {_q(call.peer)}"
    if status == 401:
        fix = (
            f"set ${tool.token_env} to a token the peer accepts"
            if tool.token_env
            else "the peer requires a token: pass token_env='VAR' and export VAR"
        )
        return PeerRequestError(
            f"{who} refused the credential on {step} (401); {fix}", status_code=401
        )
    if status == 429:
        after = retry_after_seconds(response.headers.get("retry-after"))
        shown = "" if after is None else f", retry after {after:g} s"
        return PeerRateLimitedError(
            f"{who} is limiting how fast this caller sends messages (429{shown}); slow down",
            retry_after=after,
        )
    return PeerRequestError(
        f"{who} answered {step} with {status} {_said(response.reason_phrase)}",
        status_code=status,
    )


def _mapped(
    tool: CallPeer, call: _Call, exc: Exception, step: str = "SendMessage"
) -> CallPeerError:
    """An error of the SDK (or of our bounds under it) as CallPeer's typed error."""
    from a2a.client import A2AClientError

    who = f"{tool.name}: peer {_q(call.peer)}"
    task = f" (task {call.session_id})" if call.session_id else ""
    _scrub.scrub_chain(exc)
    status = _status_error(tool, call, exc, step)
    if status is not None:
        return status
    bounded = exc if isinstance(exc, ProtocolError) else exc.__cause__
    if isinstance(bounded, ProtocolError):
        return PeerRequestError(
            f"{who} sent an answer that cannot be read{task}: {bounded}; no partial answer is "
            "returned. Ask for a shorter answer"
        )
    if isinstance(exc, A2AClientError):
        if isinstance(exc.__cause__, httpx.RequestError):
            if call.session_id:
                return StreamEndedError(
                    f"{who} broke off its stream before the task ended{task}: {_said(str(exc))}; "
                    "no partial answer is returned. Retry, or read the task on the peer"
                )
            return PeerRequestError(f"{who} could not be reached: {_said(str(exc))}")
        return PeerRequestError(
            f"{who} sent an answer that cannot be read{task}: {_said(str(exc))}"
        )
    from a2a.utils.errors import A2AError

    if isinstance(exc, A2AError):
        what = "the message" if step == "SendMessage" else step
        return PeerRequestError(
            f"{who} refused {what} ({type(exc).__name__}){task}: {_said(str(exc))}"
        )
    # The SDK's own checks of what it read ("no compatible transports found", a response
    # with neither task nor message) and protobuf's parse errors.
    return PeerRequestError(
        f"{who} sent an answer the A2A SDK could not read{task} ({type(exc).__name__}: "
        f"{_said(str(exc))}); is it an A2A agent speaking JSON-RPC?"
    )


def _turn_error(
    tool: CallPeer, call: _Call, state: str, status: Any, task: Any, canceling: bool = False
) -> PeerTurnError:
    """A task that ended without an answer (failed, canceled, rejected, or asking back).

    `canceling`: the call cancels the task next (one waiting for input or authorization).
    """
    said = _message_text(status.message) if status.HasField("message") else ""
    meta = _error_meta(status, task)
    kind = meta.get("kind")
    kind = kind if isinstance(kind, str) and kind in TURN_ERROR_KINDS else None
    retryable = meta.get("retryable") is True
    fix = ""
    if state == "TASK_STATE_CANCELED":
        kind, what = "canceled", "canceled the task"
    elif state == "TASK_STATE_REJECTED":
        what = "rejected the task"
    elif state == "TASK_STATE_INPUT_REQUIRED":
        what = (
            "left the task input-required: it asked for more input, which a call cannot "
            "give (one message per call)"
        )
        fix = "; make the prompt self-contained"
    elif state == "TASK_STATE_AUTH_REQUIRED":
        kind = kind or "auth_error"
        what = (
            "left the task auth-required: it asked to be authorized, which a call cannot do "
            "(one message per call)"
        )
        fix = (
            "; authorize this caller with the agent beforehand (a token it accepts, "
            f"{'$' + tool.token_env if tool.token_env else 'token_env='})"
        )
    else:
        what = "failed the task"
    if canceling and state in _WAITING:
        fix += "; the call cancels the task on the agent (best effort): nobody will answer it"
    return PeerTurnError(
        f"{tool.name}: peer {_q(call.peer)} {what} ({kind or 'unknown'}"
        f"{', retryable' if retryable else ''}): {_said(said) or 'no message'}{fix} "
        f"(task {call.session_id})",
        kind=kind or "unknown",
        peer_message=said,
        retryable=retryable,
        code=_text_of(meta.get("code")),
        hint=_text_of(meta.get("hint")),
        session_id=call.session_id,
    )


def _text_of(value: object) -> str | None:
    """A code or hint the peer sent, bounded and scrubbed (None: absent or not text)."""
    if not isinstance(value, str) or not value:
        return None
    return server_text(value, _MAX_QUOTED)[0]


def _error_meta(status: Any, task: Any) -> dict[str, Any]:
    """A turn error's kind and retryable flag where an A2A host of ours puts them."""
    from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

    for holder in (status.message if status.HasField("message") else None, task):
        if holder is None or not holder.HasField("metadata"):
            continue
        meta = MessageToDict(holder.metadata)
        found = meta.get("coreagent") if isinstance(meta.get("coreagent"), dict) else meta
        if isinstance(found, dict) and ("kind" in found or "retryable" in found):
            return found
    return {}


_WAITING = frozenset({"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"})
"""States a task waits in for what a call cannot send: the call stops there, the task not."""
_ENDS = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
    | _WAITING
)


async def ask_a2a(
    tool: CallPeer, call: _Call, target: Peer, prompt: str, token: str | None, event_bound: int
) -> tuple[str, bool]:
    """Send `prompt` to the A2A agent `target`; its answer as (text, truncated)."""
    try:
        from a2a.client import ClientCallContext
        from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
    except ImportError:
        raise PeerRequestError(
            f"{tool.name}: peer {_q(target.name)} is an A2A agent, and the A2A SDK is not "
            "installed; nothing was sent. pip install 'coreagent-sdk[a2a]'"
        ) from None

    _check_dial(tool, target)
    client = _client(tool, target)
    headers = {"Accept-Encoding": "identity"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    message_id = uuid.uuid4().hex
    request = SendMessageRequest(
        message=Message(role=Role.ROLE_USER, message_id=message_id, parts=[Part(text=prompt)])
    )
    context = ClientCallContext(service_parameters=headers)
    answer = _Answer(tool.max_response_bytes)
    status: Any = None
    task: Any = None
    call.injected = True  # from here the peer may have it, whatever we hear back
    # Before it is sent: a host of this process running it hands the note to its turn,
    # whose own calls then take their deadline and their parent from this call (_hops).
    _hops.note_message(message_id, call.started + call.budget.seconds, call.budget.path, call.id)

    def opened(task_id: str) -> None:
        _opened(tool, call, task_id)
        if call.abandon is None:  # until the task ends, stopping to read it leaves it running
            call.abandon = functools.partial(
                cancel_task, client, call.session_id, headers, event_bound
            )

    try:
        with limits(event_bound, _BODY_FACTOR * event_bound, "answer"):
            async with contextlib.aclosing(client.send_message(request, context=context)) as events:
                async for event in events:
                    kind = event.WhichOneof("payload")
                    if kind == "message":
                        text = _message_text(event.message).strip()
                        data = text.encode()
                        if len(data) > answer.cap:
                            return data[: answer.cap].decode("utf-8", "ignore").rstrip(), True
                        return text, False
                    if kind == "task":
                        task = event.task
                        opened(task.id)
                        status = task.status
                        for artifact in task.artifacts:
                            answer.add(artifact, append=False)
                    elif kind == "status_update":
                        opened(event.status_update.task_id)
                        status = event.status_update.status
                    elif kind == "artifact_update":
                        update = event.artifact_update
                        opened(update.task_id)
                        sink = chunk_sink.get()
                        if sink is not None and not update.last_chunk:
                            # A streamed piece, for a bridge's progress (see _chunks); the
                            # last chunk is the answer itself (AgentHost(a2a=True) sends it so).
                            text = scrub(_artifact_text(update.artifact))
                            if text:
                                await sink(text)
                        if answer.add(update.artifact, append=update.append):
                            return answer.text(cut=True)  # the rest is left unread
                    state = TaskState.Name(status.state) if status is not None else ""
                    ended = state in _ENDS
                    if ended and state not in _WAITING:
                        call.abandon = None  # it ended: nothing to cancel
                    # A task waiting for input or authorization is open on the agent until
                    # someone answers, and nobody will: the call cancels it (call.abandon).
                    if answer.total > answer.cap:
                        return answer.text(cut=True)
                    if ended:
                        break
                else:
                    raise StreamEndedError(
                        f"{tool.name}: peer {_q(call.peer)} ended its stream before the task "
                        f"ended (task {call.session_id or 'not named'}); no partial answer is "
                        "returned. Retry, or read the task on the peer"
                    )
    except CallPeerError:
        raise
    except Exception as exc:
        raise _mapped(tool, call, exc) from exc
    finally:
        _hops.forget_message(message_id)
    state = TaskState.Name(status.state)
    if state != "TASK_STATE_COMPLETED":
        raise _turn_error(tool, call, state, status, task, canceling=call.abandon is not None)
    if not answer.order and status.HasField("message"):
        text = _message_text(status.message).strip()
        data = text.encode()
        if len(data) > answer.cap:
            return data[: answer.cap].decode("utf-8", "ignore").rstrip(), True
        return text, False
    return answer.text()


async def cancel_task(client: Any, task_id: str, headers: dict[str, str], event_bound: int) -> None:
    """Ask the agent to cancel `task_id` (best effort: the caller bounds it, and logs a failure)."""
    from a2a.client import ClientCallContext
    from a2a.types import CancelTaskRequest

    with limits(event_bound, event_bound, "answer to CancelTask"):
        await client.cancel_task(
            CancelTaskRequest(id=task_id), context=ClientCallContext(service_parameters=headers)
        )


def _opened(tool: CallPeer, call: _Call, task_id: str) -> None:
    """The task id, noted where a session id goes, on the first event that names it."""
    checked = _checked_id(tool.name, call.peer, task_id)
    if not call.session_id:
        call.session_id = checked
        tool._emit("session_opened", call)
    elif checked != call.session_id:
        raise PeerRequestError(
            f"{tool.name}: peer {_q(call.peer)} sent events of task {checked!r} in the stream of "
            f"task {call.session_id}; is it an A2A agent?"
        )


async def read_task(
    tool: CallPeer, call: _Call, target: Peer, token: str | None, cap: int, event_bound: int
) -> tuple[str, bool]:
    """A task's whole answer read back with `GetTask` (`CallPeer.read_answer`): (text, truncated).

    A task still running is asked again (at most `_MAX_POLLS` times, waits growing to
    1 s) until it ends; the caller's deadline bounds it all. A completed task's
    artifacts are the answer, cut at `cap`; a canceled one has no whole answer (a call
    that stops reading a task cancels it), and says so.
    """
    from a2a.client import ClientCallContext
    from a2a.types import GetTaskRequest, TaskState

    _check_dial(tool, target)
    client = _client(tool, target)
    headers = {"Accept-Encoding": "identity"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    context = ClientCallContext(service_parameters=headers)
    wait = _POLL_SECONDS[0]
    for _ in range(_MAX_POLLS):
        try:
            with limits(event_bound, event_bound, "task"):
                task = await client.get_task(GetTaskRequest(id=call.session_id), context=context)
        except CallPeerError:
            raise
        except Exception as exc:
            raise _mapped(tool, call, exc, "GetTask") from exc
        if task.id != call.session_id:
            shown, _ = server_text(task.id[:_MAX_QUOTED], 80)
            raise PeerRequestError(
                f"{tool.name}: peer {_q(call.peer)} answered GetTask for task {call.session_id} "
                f"with task {shown!r}; is it an A2A agent?"
            )
        state = TaskState.Name(task.status.state)
        if state in _ENDS:
            break
        await asyncio.sleep(wait)
        wait = min(2 * wait, _POLL_SECONDS[1])
    else:
        raise PeerRequestError(
            f"{tool.name}: task {call.session_id} on peer {_q(call.peer)} was still "
            f"{state} after {_MAX_POLLS} reads; no partial answer is returned. Try again later"
        )
    if state == "TASK_STATE_CANCELED":
        raise PeerTurnError(
            f"{tool.name}: task {call.session_id} on peer {_q(call.peer)} was canceled, so it "
            "has no whole answer (a call that stops reading a task, at its byte cap or its "
            "deadline, cancels it); no partial answer is returned. Call again with a larger "
            "max_response_bytes or timeout",
            kind="canceled",
            peer_message="",
            retryable=False,
            session_id=call.session_id,
        )
    if state != "TASK_STATE_COMPLETED":
        raise _turn_error(tool, call, state, task.status, task)
    answer = _Answer(cap)
    for artifact in task.artifacts:
        answer.add(artifact, append=False)
    if not answer.order and task.status.HasField("message"):
        return _capped(_message_text(task.status.message), cap)
    return answer.text()


def _capped(text: str, cap: int) -> tuple[str, bool]:
    """`text` stripped, cut at `cap` UTF-8 bytes: (text, truncated)."""
    text = text.strip()
    data = text.encode()
    if len(data) > cap:
        return data[:cap].decode("utf-8", "ignore").rstrip(), True
    return text, False
