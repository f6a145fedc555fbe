"""ASGITransport streams (an endless body is readable at once) and cleans up; routing by host."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import gc
import pathlib
import weakref
from typing import Any

import httpx
import pytest

import coreagent_sdk
from coreagent_sdk import ASGITransport, RoutingTransport
from coreagent_sdk.errors import ASGIAppError, NoRouteError


class EndlessSSE:
    """A raw ASGI app streaming frames forever; records whether it was cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False
        self.finished = False
        self.body: bytes = b""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.body = (await receive())["body"]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        self.started.set()
        try:
            n = 0
            while True:
                n += 1
                await send(
                    {
                        "type": "http.response.body",
                        "body": f'event: wake\ndata: {{"at": "{n}"}}\n\n'.encode(),
                        "more_body": True,
                    }
                )
                await asyncio.sleep(0.001)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.finished = True


async def test_the_first_frames_of_an_endless_stream_arrive_within_a_second() -> None:
    app = EndlessSSE()
    async with httpx.AsyncClient(transport=ASGITransport(app)) as client:

        async def first_lines() -> list[str]:
            lines: list[str] = []
            async with client.stream("GET", "http://sse.test/events") as response:
                assert response.status_code == 200
                async with contextlib.aclosing(response.aiter_lines()) as stream:
                    async for line in stream:
                        if line:
                            lines.append(line)
                        if len(lines) == 4:
                            return lines
            return lines

        lines = await asyncio.wait_for(first_lines(), timeout=1.0)
    assert lines == ["event: wake", 'data: {"at": "1"}', "event: wake", 'data: {"at": "2"}']
    assert app.cancelled and app.finished
    app_tasks = [
        t
        for t in asyncio.all_tasks()
        # An async generator's finalizer runs as a task too (its coroutine has no name).
        if "ASGITransport" in getattr(t.get_coro(), "__qualname__", "")
    ]
    assert app_tasks == [], "an app task outlived its response"


async def test_the_request_body_and_headers_reach_the_app() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["body"] = (await receive())["body"]
        seen["headers"] = dict(scope["headers"])
        seen["query"] = scope["query_string"]
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async with httpx.AsyncClient(transport=ASGITransport(app)) as client:
        response = await client.post(
            "http://d.test/x?a=1", json={"k": "v"}, headers={"X-Thing": "1"}
        )
    assert response.status_code == 201 and response.text == "ok"
    assert seen["body"] == b'{"k":"v"}'
    assert seen["headers"][b"x-thing"] == b"1"
    assert seen["query"] == b"a=1"


async def test_an_app_that_raises_before_answering_is_a_clear_transport_error() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    async with httpx.AsyncClient(transport=ASGITransport(app)) as client:
        with pytest.raises(
            ASGIAppError, match=r"raised RuntimeError\('boom'\) before answering GET /x"
        ):
            await client.get("http://d.test/x")


async def test_an_app_that_raises_mid_stream_fails_the_read() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise RuntimeError("mid-stream")

    async with (
        httpx.AsyncClient(transport=ASGITransport(app)) as client,
        client.stream("GET", "http://d.test/") as response,
    ):
        with pytest.raises(ASGIAppError, match="while streaming the body"):
            await response.aread()


async def test_an_app_error_is_an_httpx_transport_error_too() -> None:
    assert issubclass(ASGIAppError, httpx.TransportError)
    assert issubclass(NoRouteError, httpx.ConnectError)


async def test_routing_picks_the_transport_by_host_and_port() -> None:
    def answer(text: str) -> Any:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": text.encode()})

        return ASGITransport(app)

    routing = RoutingTransport(
        {"a.sim": answer("a"), "b.sim": answer("b"), "b.sim:9000": answer("b9000")}
    )
    async with httpx.AsyncClient(transport=routing) as client:
        assert (await client.get("http://a.sim/")).text == "a"
        assert (await client.get("http://B.SIM/")).text == "b"
        assert (await client.get("http://b.sim:9000/")).text == "b9000"
        with pytest.raises(NoRouteError, match=r"no transport for host 'c.sim' \(routes: a.sim, "):
            await client.get("http://c.sim/")


async def test_closing_a_client_leaves_a_shared_routing_transport_usable() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    routing = RoutingTransport({"a.sim": ASGITransport(app)})
    async with httpx.AsyncClient(transport=routing) as first:
        await first.get("http://a.sim/")
    async with httpx.AsyncClient(transport=routing) as second:
        assert (await second.get("http://a.sim/")).status_code == 204


def test_httpx_asgi_transport_is_not_used_anywhere() -> None:
    # Code, not prose: an attribute access `httpx.ASGITransport` or an import of the name.
    root = pathlib.Path(coreagent_sdk.__file__).parent.parent
    offenders = []
    for folder in ("coreagent_sdk", "simulator", "tests", "bench"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr == "ASGITransport"
                    and (isinstance(node.value, ast.Name) and node.value.id == "httpx")
                ):
                    offenders.append(f"{path}:{node.lineno}")
                if (
                    isinstance(node, ast.ImportFrom)
                    and node.module == "httpx"
                    and any(a.name == "ASGITransport" for a in node.names)
                ):
                    offenders.append(f"{path}:{node.lineno}")
    assert offenders == []


def _kib(i: int) -> bytes:
    return f"{i:09d}\n".encode() * 100 + b"." * 24  # 1,024 bytes, numbered


class Writer:
    """A raw ASGI app writing `chunks` 1 KiB chunks as fast as it may; counts finished writes."""

    def __init__(self, chunks: int) -> None:
        self.chunks = chunks
        self.written = 0
        self.cancelled = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            for i in range(self.chunks):
                body = _kib(i)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                self.written += 1
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def _settle(app: Writer) -> None:
    for _ in range(200):  # bounded: the writer moves in a few loop turns or not at all
        before = app.written
        await asyncio.sleep(0)
        await asyncio.sleep(0.001)
        if app.written == before:
            return


async def test_an_app_writing_to_a_client_that_stopped_reading_waits_at_256_kib() -> None:
    app = Writer(chunks=2_000)
    async with (
        httpx.AsyncClient(transport=ASGITransport(app), base_url="http://app") as client,
        client.stream("GET", "/") as response,
    ):
        await _settle(app)
        # As a socket does: writes are taken until more than 256 KiB sit unread; the
        # write that crosses the mark is taken and waits for the client.
        assert app.written == 256, app.written
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    assert app.written == 2_000
    assert body == b"".join(_kib(i) for i in range(2_000)), "every byte, in order"


async def test_a_waiting_write_resumes_once_the_client_has_read_most_of_the_backlog() -> None:
    app = Writer(chunks=2_000)
    async with (
        httpx.AsyncClient(transport=ASGITransport(app), base_url="http://app") as client,
        client.stream("GET", "/") as response,
    ):
        chunks = response.aiter_raw()
        await _settle(app)
        assert app.written == 256
        for _ in range(192):  # 257 KiB unread -> 65 KiB: still above the low mark
            await chunks.__anext__()
        await _settle(app)
        assert app.written == 256, "resumed before the backlog fell to 64 KiB"
        await chunks.__anext__()  # 64 KiB unread: the write goes on
        await _settle(app)
        assert app.written > 256


async def test_closing_a_response_whose_app_waits_to_write_cancels_the_app() -> None:
    app = Writer(chunks=2_000)
    async with (
        httpx.AsyncClient(transport=ASGITransport(app), base_url="http://app") as client,
        client.stream("GET", "/"),
    ):
        await _settle(app)
        assert app.written == 256
    assert app.cancelled


class Holder:
    """What an app's frame holds while it streams: a request's session, say."""


async def test_a_closed_response_keeps_nothing_of_the_app_while_its_body_iterator_lingers() -> None:
    # A reader that stops mid-body leaves its async iterator to be finalized by a later
    # garbage collection. Until then it holds the response's stream; the stream must not
    # hold the cancelled app, whose frames (on Python 3.10, through the task's saved
    # traceback) still hold what the app was serving.
    held: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        serving = Holder()
        held.append(weakref.ref(serving))
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await asyncio.Event().wait()  # streams on until the client goes away

    async with httpx.AsyncClient(transport=ASGITransport(app), base_url="http://app") as client:
        async with client.stream("GET", "/") as response:
            chunks = response.aiter_bytes()
            assert await anext(chunks) == b"first"
        gc.collect()
        assert held[0]() is None
        assert chunks is not None  # the iterator is still alive here, as a stopped reader's is
