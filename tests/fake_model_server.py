"""A tiny OpenAI-compatible (and Anthropic-compatible) model server on 127.0.0.1, for tests.

It decides like a very small model: offered `call_peer` and not yet given a
tool result, it asks the peer named after "ask " in the prompt; given tool
results, it answers with them. `fail_next` queues error answers (status and
JSON body) served before the next normal one. Everything it was sent is kept
in `requests`. It serves only while its `async with` block runs, on a port of
its own, and stops by itself (bounded) when the block ends.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Mapping
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from coreagent_sdk._attach._inbox import inbox_ask
from coreagent_sdk.host import PromptServer


def _ask(text: str) -> str:
    """What a user message asks: a host's model reads the [Inbox] bundle, guidance and all."""
    return inbox_ask(text)


def _peer_of(prompt: str) -> str:
    words = prompt.split()
    return words[words.index("ask") + 1].strip("?.,!") if "ask" in words[:-1] else "nobody"


class LoopbackModelServer:
    """A model server's ASGI `app` on 127.0.0.1, served only inside `async with`."""

    app: Any

    def __init__(self) -> None:
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Any:
        self._server, self._task, self.port = await serve_on_loopback(self.app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None and self._task is not None
        await stop_serving(self._server, self._task)


class FakeModelServer(LoopbackModelServer):
    """`async with FakeModelServer() as server:` then point a model at `server.openai_url`."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.fail_next: list[tuple[int, Mapping[str, Any]]] = []
        self._ids = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
            ]
        )

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:04d}"

    async def _read(self, request: Request) -> Any:
        body = json.loads(await request.body())
        self.requests.append((request.url.path, dict(request.headers), body))
        return body

    async def _chat(self, request: Request) -> JSONResponse:
        body = await self._read(request)
        if self.fail_next:
            status, error = self.fail_next.pop(0)
            return JSONResponse(dict(error), status_code=status)
        messages = body["messages"]
        results = [m["content"] for m in messages if m["role"] == "tool"]
        offered = {t["function"]["name"] for t in body.get("tools", [])}
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if results or "call_peer" not in offered:
            message["content"] = "The peers said: " + " | ".join(results)
            finish = "stop"
        else:
            prompt = _ask(next(m["content"] for m in reversed(messages) if m["role"] == "user"))
            arguments = {"peer": _peer_of(prompt), "prompt": prompt}
            message["tool_calls"] = [
                {
                    "id": self._next_id("call_"),
                    "type": "function",
                    "function": {"name": "call_peer", "arguments": json.dumps(arguments)},
                }
            ]
            finish = "tool_calls"
        return JSONResponse(
            {
                "id": self._next_id("chatcmpl-"),
                "object": "chat.completion",
                "created": 1764540000,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {
                    "prompt_tokens": 10 * len(messages),
                    "completion_tokens": 5,
                    "total_tokens": 10 * len(messages) + 5,
                },
            }
        )

    async def _messages(self, request: Request) -> JSONResponse:
        body = await self._read(request)
        if self.fail_next:
            status, error = self.fail_next.pop(0)
            return JSONResponse(dict(error), status_code=status)
        messages = body["messages"]
        results = [
            b["content"]
            for m in messages
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_result"
        ]
        offered = {t["name"] for t in body.get("tools", [])}
        if results or "call_peer" not in offered:
            content: list[dict[str, Any]] = [
                {"type": "text", "text": "The peers said: " + " | ".join(results)}
            ]
            stop = "end_turn"
        else:
            prompt = _ask(next(m["content"] for m in reversed(messages) if m["role"] == "user"))
            content = [
                {
                    "type": "tool_use",
                    "id": self._next_id("toolu_"),
                    "name": "call_peer",
                    "input": {"peer": _peer_of(prompt), "prompt": prompt},
                }
            ]
            stop = "tool_use"
        return JSONResponse(
            {
                "id": self._next_id("msg_"),
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 10 * len(messages), "output_tokens": 5},
            }
        )


async def serve_on_loopback(app: Any) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    """`app` served by uvicorn on 127.0.0.1 at a free port, started (at most 10 s)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", log_level="warning", interface="asgi3")
    # The SDK's own server: it leaves the process's signals alone (uvicorn's own would swap
    # SIGINT's handler while pytest-asyncio's runner has its own in place, and put the
    # runner's back after the runner is gone: a handler left behind for every later test),
    # and it starts and stops when told rather than at uvicorn's next 0.1 s tick.
    server = PromptServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    assert await server.started_within(task, 10), "the model server on 127.0.0.1 did not start"
    return server, task, port


async def stop_serving(server: uvicorn.Server, task: asyncio.Task[None]) -> None:
    """Stop it (an answer still being sent does not hold the exit), bounded."""
    server.should_exit = True
    server.force_exit = True
    await asyncio.wait_for(task, 10)
