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
- A bounded task store: the SDK's in-memory store holding at most `MAX_A2A_TASKS`
  tasks, the oldest finished ones let go first, as a host's sessions in memory are
  bounded (a running task is never dropped).
- The body cap (`MAX_A2A_REQUEST_BYTES`), counted as the body arrives whatever its
  Content-Length says: past it the SDK stops reading and answers its own "Payload
  too large" error (a starlette 413 raised while it reads).
- The card, built as the SDK's `AgentCard` and written by the SDK's
  `agent_card_to_dict`: A2A 1.0's fields, with 0.3's beside them.
"""

from __future__ import annotations

import collections
from typing import Any

from a2a.auth.user import User
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
)
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message

from .._version import __version__
from ._a2a_executor import A2AHost, TurnExecutor
from ._card import card_url, json_card_response

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
    """The SDK's `InMemoryTaskStore`, keeping at most `limit` tasks: oldest finished first out."""

    def __init__(self, limit: int = MAX_A2A_TASKS) -> None:
        self.limit = limit
        self._store = InMemoryTaskStore()
        # (owner, task id) -> finished, oldest save first: what to let go past the limit.
        self._kept: collections.OrderedDict[tuple[str, str], bool] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    async def save(self, task: Task, context: ServerCallContext) -> None:
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
        for owner, task_id in gone:
            del self._kept[owner, task_id]
            await self._store.delete(task_id, ServerCallContext(user=_Caller(owner, True)))

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await self._store.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await self._store.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._kept.pop((context.user.user_name, task_id), None)
        await self._store.delete(task_id, context)


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
        self.tasks = BoundedTaskStore()
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
            request, agent_card_to_dict(agent_card(self.host, card_url(request)))
        )

    async def serve(self, request: Request) -> Response:
        """Hand the request to the SDK's route, its body counted as it is read."""
        declared = request.headers.get("content-length", "")
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
