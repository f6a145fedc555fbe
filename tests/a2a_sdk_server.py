"""An A2A agent built only of the A2A SDK's own classes, served by uvicorn on loopback.

Run as ``python -m tests.a2a_sdk_server``: it binds 127.0.0.1 on a free port, prints
the port on its first line, and serves until SIGTERM. Nothing of coreagent_sdk is
imported, so what a test's `CallPeer` reads from it is an A2A server's answer, not
our own host's. The agent streams its answer in chunks (``"x" * N`` for a prompt
``repeat N``, else the prompt upper-cased), requires ``Bearer $A2A_SERVER_TOKEN``
when that is set, and echoes the credential it was given at the end of its answer
(a hostile echo, for the caller to scrub).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from typing import Any

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse


class Chunks(AgentExecutor):
    async def execute(self, context: Any, event_queue: Any) -> None:
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        prompt = context.get_user_input()
        words = prompt.split()
        answer = "x" * int(words[1]) if words[:1] == ["repeat"] else prompt.upper()
        given = context.call_context.state.get("headers", {}).get("authorization", "")
        if given:
            answer += f" (you sent {given})"
        for start in range(0, len(answer), 1000):
            await updater.add_artifact(
                [new_text_part(answer[start : start + 1000])],
                artifact_id="answer",
                append=start > 0,
            )
        await updater.complete()

    async def cancel(self, context: Any, event_queue: Any) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Guard(BaseHTTPMiddleware):
    async def dispatch(self, request: Any, call_next: Any) -> Any:
        want = os.environ.get("A2A_SERVER_TOKEN")
        given = request.headers.get("authorization")
        if want and request.method == "POST" and given != f"Bearer {want}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await call_next(request)


def card_of(url: str, streaming: bool = True) -> AgentCard:
    """The agent's card: one JSON-RPC interface at `url`, A2A 1.0, streaming unless told."""
    return AgentCard(
        name="sdk-agent",
        description="An agent of the A2A SDK's own classes",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="upper", name="upper", description="upper-cases", tags=["t"])],
    )


def app(
    url: str,
    executor: AgentExecutor | None = None,
    cache_control: str | None = None,
    card_modifier: Any = None,
    streaming: bool = True,
) -> Starlette:
    """The agent as an ASGI app of the SDK's own routes (in process, or under uvicorn)."""
    card = card_of(url, streaming)
    handler = DefaultRequestHandler(
        agent_executor=executor or Chunks(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(
        card, card_modifier=card_modifier, cache_control=cache_control
    )
    served = Starlette(routes=routes + create_jsonrpc_routes(handler, "/"))
    served.add_middleware(Guard)
    return served


async def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is printed: a bound socket that does not listen yet refuses a
    # connection, and the test connects as soon as it reads the port (CI's rehearsal did).
    sock.listen(128)
    port = sock.getsockname()[1]
    served = app(f"http://127.0.0.1:{port}/")
    server = uvicorn.Server(uvicorn.Config(served, log_level="warning", lifespan="off"))
    print(port, flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
