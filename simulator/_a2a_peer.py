"""An A2A agent in a fleet, built with the A2A SDK's own server classes.

`Fleet.add_a2a_peer` mounts one at ``http://<name>.<domain>`` beside the
fleet's attach daemons: the SDK's `DefaultRequestHandler` over an in-memory
task store, its JSON-RPC and agent-card routes in a Starlette app, reached
in-process through the fleet's routing transport. The fleet's hub lists it
with the label ``protocol=a2a``, so a fleet `CallPeer` reads its card and
speaks A2A to it, and a `ModelAgent`'s `call_peer` tool reaches it by name
like any attach peer.

A behaviour is a function of the prompt: ``fn(text)`` returning the answer
(sync or async), or an async generator of chunks (each an artifact update
appended to the answer). An `AgentExecutor` of your own is taken as it is.
Either that asks other peers through a fleet tool it holds
(``fleet.call_peer()``) has those calls recorded under its own in
``fleet.calls``, with half the time its caller left it, as a daemon's turn
has.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Union
from urllib.parse import urlsplit

__all__ = ["A2APeer", "A2ABehavior", "a2a_app"]

# The Host a request to an A2A peer was sent to (its card names the URL it was read at).
_asked_host: contextvars.ContextVar[str] = contextvars.ContextVar("a2a_peer_host", default="")


def _host_of(scope: Any) -> str:
    for name, value in scope.get("headers") or ():
        if name == b"host":
            return str(value.decode("latin-1"))
    return ""


A2ABehavior = Callable[[str], Union[str, Awaitable[str], AsyncIterator[str]]]  # noqa: UP007
# What runs around a behaviour's answer to one message, given the message's id: the fleet's
# recorder, so the behaviour's own calls go under the call that sent it.
Answering = Callable[[str], contextlib.AbstractContextManager[None]]


def _echo(text: str) -> str:
    return text


def _executor(behavior: A2ABehavior) -> Any:
    from a2a.helpers.proto_helpers import (
        new_task_from_user_message,
        new_text_message,
        new_text_part,
    )
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.tasks import TaskUpdater
    from a2a.types import Role

    class _Behavior(AgentExecutor):  # type: ignore[misc]
        """A task per message: working, the answer as one artifact (or chunks of it), completed."""

        async def execute(self, context: Any, event_queue: Any) -> None:
            task = context.current_task or new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            await updater.start_work()
            try:
                await self._answer(behavior, context.get_user_input(), updater)
            except Exception as exc:
                await updater.failed(
                    new_text_message(f"{type(exc).__name__}: {exc}", role=Role.ROLE_AGENT)
                )
                return
            await updater.complete()

        @staticmethod
        async def _answer(behavior: A2ABehavior, text: str, updater: Any) -> None:
            got = behavior(text)
            if inspect.isasyncgen(got):
                first = True
                async for chunk in got:
                    await updater.add_artifact(
                        [new_text_part(str(chunk))],
                        artifact_id="answer",
                        name="answer",
                        append=not first,
                    )
                    first = False
                return
            if inspect.isawaitable(got):
                got = await got
            await updater.add_artifact(
                [new_text_part(str(got))],
                artifact_id="answer",
                name="answer",
                last_chunk=True,  # the whole answer, not a piece of it
            )

        async def cancel(self, context: Any, event_queue: Any) -> None:
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            await updater.cancel()

    return _Behavior()


def _answered(executor: Any, answering: Answering) -> Any:
    """`executor`, each message's answer run inside `answering(message id)`.

    So what it asks through a fleet tool it holds hangs under the call that sent the
    message, with half the time that call left, as a daemon's turn's calls do.
    """
    from a2a.server.agent_execution import AgentExecutor

    class _Answered(AgentExecutor):  # type: ignore[misc]
        async def execute(self, context: Any, event_queue: Any) -> None:
            sent = context.message.message_id if context.message is not None else ""
            with answering(sent):
                await executor.execute(context, event_queue)

        async def cancel(self, context: Any, event_queue: Any) -> None:
            await executor.cancel(context, event_queue)

    return _Answered()


def agent_card(name: str, url: str, description: str, streaming: bool) -> Any:
    """The card a fleet's A2A agent serves: one JSON-RPC interface at `url`, A2A 1.0."""
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill

    return AgentCard(
        name=name,
        description=description,
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="answer", name=name, description=description, tags=["simulated"])],
    )


def a2a_app(executor: Any, card: Any, card_modifier: Any = None) -> Any:
    """A Starlette app of the A2A SDK's own: its card and JSON-RPC routes over `executor`."""
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore
    from starlette.applications import Starlette

    handler = DefaultRequestHandler(
        agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card, card_modifier=card_modifier)
    return Starlette(routes=routes + create_jsonrpc_routes(handler, "/"))


class A2APeer:
    """One A2A agent of a fleet: its card, its executor and its Starlette app.

    Attributes:
        name: Its name in the fleet (and its card's name).
        url: Its base URL, where its JSON-RPC endpoint and its card are.
        card: The `AgentCard` it serves (the A2A SDK's protobuf message).
        executor: The `AgentExecutor` answering its messages.
        behavior: The behaviour (or executor) it was given, which the roster names.
        app: The ASGI app serving both.
        served_url: Its loopback URL while the fleet is served (its card then names it).
    """

    def __init__(
        self,
        name: str,
        url: str,
        behavior: A2ABehavior | None,
        executor: Any,
        description: str,
        streaming: bool,
        answering: Answering | None = None,
    ) -> None:
        try:
            import a2a  # noqa: F401
            import starlette  # noqa: F401
        except ImportError:
            raise ImportError(
                "simulator: add_a2a_peer runs an agent of the A2A SDK's own; "
                "pip install 'coreagent-sdk[a2a]'"
            ) from None
        if behavior is not None and executor is not None:
            raise ValueError("simulator: add_a2a_peer takes a behaviour or an executor, not both")
        if behavior is not None and not callable(behavior):
            raise TypeError(
                f"simulator: an A2A peer's behaviour is a function of the prompt, got "
                f"{type(behavior).__name__}; pass fn(text) -> answer"
            )
        self.name = name
        self.url = url
        # The spec requires a description (the SDK warns of a card without one).
        said = description or f"A simulated A2A agent named {name}"
        self.card = agent_card(name, url + "/", said, streaming)
        self.executor = executor if executor is not None else _executor(behavior or _echo)
        # What its answers come from, as the roster names it.
        self.behavior: object = executor if executor is not None else (behavior or _echo)
        # Its loopback URL while the fleet is served: the card read there names it, so a
        # caller over the sockets is sent there, never to the in-process name (nothing
        # resolves it); the card read in-process keeps the in-process name, on the origin it
        # was read from (a caller refuses a card pointing at another origin).
        self.served_url: str | None = None
        answered = self.executor if answering is None else _answered(self.executor, answering)
        self._sdk_app = a2a_app(answered, self.card, self._served_card)

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        """The ASGI app serving both; notes the host each request was sent to, for the card."""
        token = _asked_host.set(_host_of(scope))
        try:
            await self._sdk_app(scope, receive, send)
        finally:
            _asked_host.reset(token)

    async def _served_card(self, card: Any) -> Any:
        if self.served_url is None or _asked_host.get() != urlsplit(self.served_url).netloc:
            return card
        served = type(card)()
        served.CopyFrom(card)
        for interface in served.supported_interfaces:
            interface.url = self.served_url + "/"
        return served

    def __repr__(self) -> str:
        return f"A2APeer({self.name!r}, {self.url!r})"
