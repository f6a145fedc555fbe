"""A host's A2A JSON-RPC endpoint, made of the official A2A SDK's server classes.

`AgentHost(a2a=True)` answers A2A at `POST /` on the port of its attach routes, the
URL its card already gives (core-agent's `docs/agent-card-design.md`: a future A2A
transport turns the card's `url` into "the A2A JSON-RPC endpoint"). This module is
imported only then, so a host without A2A never imports `a2a`. Each piece, and why:

- `DefaultRequestHandler` and `create_jsonrpc_routes`: every byte of A2A's JSON-RPC
  (methods, params, errors, SSE framing, the `A2A-Version` check) is the SDK's;
  nothing here reads or writes JSON-RPC. The SDK's 0.3 compatibility is on too, so a
  client of the A2A version the daemon's card pins (0.3) is answered on the same URL.
- The request reaches the SDK through the host's guard: the shared attach token,
  per-caller tokens, the asserted-caller refusal, the Origin and JSON content-type
  checks apply as on every attach route; the card alone stays public.
- A `ServerCallContextBuilder` hands the SDK the identity the host's own auth found,
  so the SDK's task store keeps each caller's tasks apart (another caller's task is
  "not found"), and the headers it keeps lose the credential headers first, so no
  token is in the SDK's state or logs.
- A bounded, durable task store: the SDK's in-memory store holding at most
  `MAX_A2A_TASKS` tasks, the oldest finished ones let go first, as a host's sessions in
  memory are bounded (a running task is never dropped); each save committed to the
  host's session store before the SDK sends what it saved, so a task the host answered
  for survives a restart or a `kill -9`.
- The body cap (`MAX_A2A_REQUEST_BYTES`), counted as the body arrives whatever its
  Content-Length says: past it the SDK stops reading and answers its own "Payload
  too large" error (a starlette 413 raised while it reads).
- The card, built as the SDK's `AgentCard` and written by the SDK's
  `agent_card_to_dict`: A2A 1.0's fields, with 0.3's beside them.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from a2a.auth.user import User
from a2a.helpers.proto_helpers import new_text_message
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    ListTasksRequest,
    ListTasksResponse,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message

from .._version import __version__
from ._a2a_executor import A2AHost, TurnExecutor
from ._card import card_url, json_card_response
from ._store import SessionStore, StoreWriteError

__all__ = ["A2A_PATH", "MAX_A2A_REQUEST_BYTES", "MAX_A2A_TASKS", "A2AEndpoint", "BoundedTaskStore"]

A2A_PATH = "/"
"""Where a host with ``a2a=True`` answers A2A's JSON-RPC (POST): the URL its card gives."""
MAX_A2A_REQUEST_BYTES = 64 * 1024
"""The largest A2A request body a host reads; past it the SDK answers "Payload too large"."""
MAX_A2A_TASKS = 1_000
"""Tasks a host's A2A store keeps; past it the oldest finished ones are let go."""
_FINISHED = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
    }
)
# Headers the SDK's call context must not keep: they carry the caller's credential.
_CREDENTIALS = ("authorization", "x-attach-token", "cookie", "proxy-authorization")


class _Caller(User):
    """The identity the host's auth found, as the SDK's `User` (the owner of its tasks)."""

    def __init__(self, name: str, authenticated: bool) -> None:
        self._name = name
        self._authenticated = authenticated

    @property
    def is_authenticated(self) -> bool:
        return self._authenticated

    @property
    def user_name(self) -> str:
        return self._name


class _CallContext(DefaultServerCallContextBuilder):
    """The SDK's call context, with the host's caller and without credential headers."""

    def __init__(self, host: A2AHost) -> None:
        self.host = host

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        headers = context.state.get("headers", {})
        for name in _CREDENTIALS:
            headers.pop(name, None)
        # The guard let the request through, so the host knows the caller (anonymous on an
        # open host, which shares its tasks with every caller, as it shares its sessions).
        who = self.host.identify(request)
        context.user = _Caller(who.name if who is not None else "", self.host.tokens is not None)
        context.state["identity"] = who
        return context


class BoundedTaskStore(TaskStore):
    """The SDK's `InMemoryTaskStore`, at most `limit` tasks, each save committed to `host`'s store.

    The memory serves every read; the host's session store (a named file) keeps each
    task's latest state, so a task the host answered for is found after a restart
    (`kill -9` included). A save returns once its row is committed, and the SDK sends a
    task's event only after its save: nothing a client was told is missing from the
    file. A save that cannot be stored raises `StoreWriteError` (the SDK fails the
    request with it) and leaves the task failed, in memory only. A restarted host
    reads its tasks back before its first A2A request; one whose turn was running is
    failed then (`_cut`), its turn gone with the process. A private temporary store is
    removed on close and read by no restart, so nothing is written to it.
    """

    def __init__(self, limit: int = MAX_A2A_TASKS, host: A2AHost | None = None) -> None:
        self.limit = limit
        self.host = host
        self._store = InMemoryTaskStore()
        # (owner, task id) -> finished, oldest save first: what to let go past the limit.
        self._kept: collections.OrderedDict[tuple[str, str], bool] = collections.OrderedDict()
        self._loaded = host is None
        self._loading: asyncio.Lock | None = None

    def __len__(self) -> int:
        return len(self._kept)

    def _file(self) -> SessionStore | None:
        """The host's store if a restart can read it (looked up per use: a `MultiAgentHost`
        gives each agent its part of one file after making the agent's host)."""
        store = self.host.store if self.host is not None else None
        return None if store is None or store.temporary else store

    async def _ready(self) -> None:
        """Read back what a last run of the host stored, once, before any other use."""
        if self._loaded:
            return
        if self._loading is None:
            self._loading = asyncio.Lock()
        async with self._loading:
            if self._loaded:
                return
            store = self._file()
            if store is not None:
                rows = [(owner, Task.FromString(blob)) for owner, blob in await store.tasks()]
                writes = []
                for owner, task in rows:
                    if task.status.state not in _FINISHED:
                        _cut(task)
                        writes.append(store.put_task(owner, task.id, task.SerializeToString()))
                await asyncio.gather(*writes)  # one commit for them all
                for owner, task in rows:
                    await self._remember(task, _context(owner))
            self._loaded = True

    async def save(self, task: Task, context: ServerCallContext) -> None:
        if not self._loaded:  # checked here: a save is made at every event of every task
            await self._ready()
        store = self._file()
        if store is not None:
            try:
                await store.put_task(context.user.user_name, task.id, task.SerializeToString())
            except StoreWriteError as exc:
                # Not stored, so not told: the SDK fails the request with this error. What
                # memory keeps says so, rather than a state no restart would find.
                failed = Task()
                failed.CopyFrom(task)
                _fail(failed, f"a2a: the task could not be stored ({exc}); it was not run on")
                await self._remember(failed, context)
                raise
        await self._remember(task, context)

    async def _remember(self, task: Task, context: ServerCallContext) -> None:
        await self._store.save(task, context)
        key = (context.user.user_name, task.id)
        self._kept[key] = task.status.state in _FINISHED
        self._kept.move_to_end(key)
        excess = len(self._kept) - self.limit
        if excess <= 0:
            return
        # Oldest first, and only as far as needed: a scan of every kept task per save would
        # cost each task the whole store's length.
        gone = []
        for kept, finished in self._kept.items():
            if finished:  # a running task is never dropped: its turn still reports to it
                gone.append(kept)
                if len(gone) == excess:
                    break
        store = self._file()
        for owner, task_id in gone:
            del self._kept[owner, task_id]
            await self._store.delete(task_id, _context(owner))
            if store is not None:  # in the next commit; nobody waits to be told of it
                store.delete_task(owner, task_id)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        await self._ready()
        return await self._store.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        await self._ready()
        return await self._store.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._ready()
        owner = context.user.user_name
        store = self._file()
        if self._kept.pop((owner, task_id), None) is not None and store is not None:
            await store.delete_task(owner, task_id)
        await self._store.delete(task_id, context)


def _context(owner: str) -> ServerCallContext:
    return ServerCallContext(user=_Caller(owner, True))


def _fail(task: Task, text: str) -> None:
    """Make `task` failed with an agent message `text`, kind "unknown", as a cut stream is."""
    meta: dict[str, Any] = {"kind": "unknown", "retryable": False}
    if "session_id" in task.metadata:
        meta["session_id"] = task.metadata["session_id"]
    message = new_text_message(text, context_id=task.context_id, task_id=task.id)
    message.metadata.update(meta)
    task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_FAILED, message=message))
    task.status.timestamp.GetCurrentTime()
    task.metadata.update(meta)


def _cut(task: Task) -> None:
    """A stored task whose turn was running when the host stopped: failed, saying so."""
    fields = task.metadata.fields  # a protobuf Struct: no .get() of its own
    sid = fields["session_id"].string_value if "session_id" in fields else ""
    where = f"; session {sid} holds what the turn wrote before" if sid else ""
    _fail(
        task,
        "a2a: the host stopped (or was killed) while this task's turn ran; the turn did not "
        f"finish and no answer is returned{where}",
    )


def agent_card(host: A2AHost, url: str) -> AgentCard:
    """The host's card as the SDK's model: the JSON-RPC transport at `url`, 1.0 and 0.3."""
    skills = host.skills or {host.name: host.description}  # A2A requires at least one skill
    card = AgentCard(
        name=host.name,
        description=host.description,
        version=__version__,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version)
            for version in ("1.0", "0.3")
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id=skill, name=skill, description=skills[skill], tags=["skill"])
            for skill in sorted(skills)
            if skill
        ],
    )
    if host._attach_token is not None:  # as the daemon's `deriveSecurity`: the shared token
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card


class A2AEndpoint:
    """The SDK's JSON-RPC route and request handler for one host, behind the body cap."""

    def __init__(self, host: A2AHost) -> None:
        self.host = host
        self.executor = TurnExecutor(host)
        self.tasks = BoundedTaskStore(host=host)
        self.handler = DefaultRequestHandler(
            agent_executor=self.executor,
            task_store=self.tasks,
            # What the handler reads of it is the capabilities (streaming on, no push).
            agent_card=agent_card(host, "http://localhost"),
        )
        (route,) = create_jsonrpc_routes(
            self.handler, A2A_PATH, context_builder=_CallContext(host), enable_v0_3_compat=True
        )
        self._sdk_route = route
        self.route = Route(A2A_PATH, self.serve, methods=["POST"])

    def card_response(self, request: Request) -> Response:
        """The card, as the SDK writes it, its transport at the URL the request was sent to."""
        if request.method not in ("GET", "HEAD"):
            return json_card_response(request, {})
        return json_card_response(
            request,
            agent_card_to_dict(agent_card(self.host, card_url(request, self.host.external_url))),
        )

    async def serve(self, request: Request) -> Response:
        """Hand the request to the SDK's route, its body counted as it is read."""
        declared = ""
        for name, value in request.scope["headers"]:  # not Headers: built for one lookup
            if name == b"content-length":
                declared = value.decode("latin-1")
                break
        received = 0
        receive = request.receive

        async def capped() -> Message:
            nonlocal received
            if declared.isdigit() and int(declared) > MAX_A2A_REQUEST_BYTES:
                raise HTTPException(413)  # the SDK's "Payload too large", before any read
            message = await receive()
            received += len(message.get("body", b""))
            if received > MAX_A2A_REQUEST_BYTES:
                raise HTTPException(413)
            return message

        endpoint: Any = self._sdk_route.endpoint
        response: Response = await endpoint(Request(request.scope, capped))
        return response

    async def aclose(self) -> None:
        """Let the SDK's running tasks go (their turns are the host's to stop)."""
        await self.handler.aclose()
