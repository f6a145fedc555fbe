"""Hostile servers for the SDK to meet: raw sockets on 127.0.0.1 and in-process ASGI apps.

Everything here is bounded: a raw server accepts connections only while its
`async with` block runs, every handler is cancelled when the block ends, and
every loop that writes stops after a fixed count or when the peer goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import httpx

from coreagent_sdk import ASGITransport, Peer, StaticDirectory
from coreagent_sdk._attach._wire import encode_sse

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Scope = dict[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]

SESSION = {"app": "core-agent", "user": "u", "sessionID": "s-1", "url": ""}


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes]:
    """(method, target, headers, body) of one HTTP/1.1 request; headers bounded to 64 KiB."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0") or 0)
    body = await reader.readexactly(length) if length else b""
    return method, target, headers, body


class RawServer:
    """`async with RawServer(handler) as server:` then dial `server.url` (127.0.0.1, port 0)."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.base_events.Server | None = None
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.errors: list[BaseException | None] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The handler runs in a task of our own, cancelled when the block ends; the
        # task asyncio made for the connection then returns normally (cancelling
        # that one makes asyncio log an error on Python 3.11).
        task = asyncio.get_running_loop().create_task(self._handler(reader, writer))
        self._tasks.add(task)
        try:
            await asyncio.wait({task})
            if not task.cancelled() and isinstance(task.exception(), Exception):
                exc = task.exception()
                if not isinstance(exc, (ConnectionError, asyncio.IncompleteReadError)):
                    self.errors.append(exc)
        finally:
            self._tasks.discard(task)
            writer.close()

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 2)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self._server.wait_closed(), 2)


def respond(status: str, body: bytes, headers: Mapping[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 answer with `status` written verbatim (reason phrase included)."""
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


# ------------------------------------------------------------------ ASGI apps


async def send_json(send: Any, status: int, payload: Any, headers: list[Any] | None = None) -> None:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_stream(send: Any, chunks: AsyncIterator[bytes] | list[bytes], **kw: Any) -> None:
    """A 200 event stream of `chunks`, then held open until cancelled (as a daemon holds it)."""
    headers = [(b"content-type", b"text/event-stream"), *kw.get("headers", [])]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    if isinstance(chunks, list):
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    else:
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    if kw.get("close", False):
        await send({"type": "http.response.body", "body": b""})
        return
    await asyncio.Event().wait()


def daemon(
    *,
    session: Any = None,
    stream: Callable[[], AsyncIterator[bytes]] | list[bytes] | None = None,
    inject: Any = None,
    stream_headers: list[Any] | None = None,
    seen: list[tuple[str, str, dict[str, str]]] | None = None,
) -> App:
    """A daemon whose answers are scripted: the session answer, the stream, the inject answer."""

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        method, path = scope["method"], scope["path"]
        if seen is not None:
            headers = {k.decode(): v.decode("latin-1") for k, v in scope["headers"]}
            seen.append(
                (
                    method,
                    path + ("?" + scope["query_string"].decode() if scope["query_string"] else ""),
                    headers,
                )
            )
        if method == "POST" and path == "/sessions":
            await send_json(send, 201, SESSION if session is None else session)
        elif path.endswith("/events"):
            chunks = stream() if callable(stream) else (stream or [])
            await send_stream(send, chunks, headers=stream_headers or [])
        elif path.endswith("/inject"):
            await send_json(
                send,
                200,
                inject if inject is not None else {"injected": "p", "session": "s-1", "woke": True},
            )
        else:
            await send_json(send, 404, {"error": "no"})

    return app


def turn(text: str) -> list[bytes]:
    """The frames of one model turn answering `text`."""
    event = {
        "Author": "model",
        "Content": {"role": "model", "parts": [{"text": text}]},
        "TurnComplete": True,
    }
    return [encode_sse("agent", {"seq": 1, "event": event})]


def one_peer(app: App, name: str = "evil") -> tuple[StaticDirectory, httpx.AsyncBaseTransport]:
    """A directory listing `name` at http://evil.test and a transport reaching `app` there."""
    return StaticDirectory([Peer(name, f"http://{name}.test")]), ASGITransport(app)


def records(requests: list[httpx.Request]) -> httpx.MockTransport:
    """A transport that records what would have been sent and answers 599, dialing nothing."""

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(599)

    return httpx.MockTransport(handler)
