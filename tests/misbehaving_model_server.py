"""A model server on 127.0.0.1 that answers whatever a test queues, byte for byte.

Real models, proxies and gateways misbehave at the byte level: a body cut
short, invalid UTF-8, an error in a 200, an answer of hundreds of megabytes,
a byte every half second. `MisbehavingServer` serves both vendors' paths
(`/v1/chat/completions`, `/v1/messages`) from one queue of `Answer`s, one per
request, each a status, headers and a generator of body chunks; it counts
the bytes it managed to send and keeps every request's JSON body. It serves
only inside its `async with` block, on a port of its own, and every answer
is bounded in size and time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import attrs

from .fake_model_server import LoopbackModelServer

Chunks = Callable[[], AsyncIterator[bytes]]


@attrs.define
class Answer:
    """One queued answer: status, headers, and the body as chunks (`Chunks` or bytes)."""

    body: bytes | Chunks = b""
    status: int = 200
    headers: Iterable[tuple[str, str]] = (("content-type", "application/json"),)
    sent: int = 0  # body bytes the server handed to the socket
    finished: bool = False  # the whole body went out (False: the client hung up first)


def json_answer(data: Any, status: int = 200) -> Answer:
    return Answer(json.dumps(data).encode(), status)


def raw_answer(body: bytes, status: int = 200) -> Answer:
    return Answer(body, status)


def chunked(total: int, chunk: int, head: bytes = b'{"junk": "') -> Chunks:
    """A body of `total` bytes in chunks of `chunk` (made as sent, never held whole)."""

    async def gen() -> AsyncIterator[bytes]:
        yield head
        left = total - len(head)
        block = b"x" * chunk
        while left > 0:
            piece = block[: min(chunk, left)]
            left -= len(piece)
            yield piece

    return gen


def trickle(every: float, count: int, head: bytes = b'{"choices": [') -> Chunks:
    """`head`, then one byte every `every` seconds, `count` times (bounded in time)."""

    async def gen() -> AsyncIterator[bytes]:
        yield head
        for _ in range(count):
            await asyncio.sleep(every)
            yield b" "

    return gen


class MisbehavingServer(LoopbackModelServer):
    """`async with MisbehavingServer() as server:` then `server.queue(answer)` per request."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[Answer] = []
        self.requests: list[tuple[str, Any]] = []

    def queue(self, *answers: Answer) -> None:
        self.answers.extend(answers)

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            self.requests.append((scope["path"], json.loads(body)))
        except ValueError:
            self.requests.append((scope["path"], body))
        if not self.answers:
            await send({"type": "http.response.start", "status": 599, "headers": []})
            await send({"type": "http.response.body", "body": b"no answer queued"})
            return
        answer = self.answers.pop(0)
        headers = [(k.encode(), v.encode()) for k, v in answer.headers]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        chunks = answer.body() if callable(answer.body) else _once(answer.body)
        # uvicorn drops writes after a client hangs up without saying so; receive() does.
        gone = asyncio.ensure_future(receive())
        try:
            async for chunk in chunks:
                if gone.done():
                    return  # what was sent before the client hung up is counted
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                answer.sent += len(chunk)
            await send({"type": "http.response.body", "body": b""})
            answer.finished = True
        finally:
            gone.cancel()


async def _once(body: bytes) -> AsyncIterator[bytes]:
    if body:
        yield body
