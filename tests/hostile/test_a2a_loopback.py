"""A hostile A2A agent on a loopback socket: compressed bombs and wrong JSON types.

The agent is a few lines of raw HTTP/1.1 over `asyncio.start_server` on
127.0.0.1 (one request per connection), so what `CallPeer` meets is what a
real socket carries: a gzip body that inflates a thousandfold, and task and
artifact fields of the wrong JSON type. Each call ends typed, and fast.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

pytest.importorskip("a2a.client")

from coreagent_sdk import A2ADirectory, CallPeer
from coreagent_sdk.errors import DirectoryError, PeerRequestError, StreamEndedError

from .test_a2a_peers import card  # the A2A 1.0 card a hostile agent serves

# 16 MiB of zeros, 16 KiB on the wire: a body whose size on the wire says nothing.
BOMB = gzip.compress(b"\0" * (16 * 1024 * 1024), compresslevel=9)

Reply = tuple[dict[str, str], bytes]


def sse(*results: dict[str, Any]) -> Reply:
    body = b"".join(
        b"data: " + json.dumps({"jsonrpc": "2.0", "id": "1", "result": r}).encode() + b"\n\n"
        for r in results
    )
    return {"content-type": "text/event-stream"}, body


class Agent:
    """Serves `card_reply(url)` for the card and `message_reply()` for every POST."""

    def __init__(self, message: Callable[[], Reply], the_card: Callable[[str], Reply]) -> None:
        self.message = message
        self.the_card = the_card
        self.url = ""
        self.posts = 0
        self.sent = 0  # body bytes written, all requests

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            lines = head.decode("latin-1").split("\r\n")
            method, _path, _ = lines[0].split(" ", 2)
            length = next(
                (
                    int(v)
                    for k, _, v in (h.partition(":") for h in lines[1:])
                    if k.lower() == "content-length"
                ),
                0,
            )
            if length:
                await asyncio.wait_for(reader.readexactly(length), 5)
            if method == "POST":
                self.posts += 1
                headers, body = self.message()
            else:
                headers, body = self.the_card(self.url)
            top = ["HTTP/1.1 200 OK", f"content-length: {len(body)}", "connection: close"]
            top += [f"{k}: {v}" for k, v in headers.items()]
            writer.write(("\r\n".join(top) + "\r\n\r\n").encode() + body)
            self.sent += len(body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    servers: list[asyncio.Server] = []

    async def start(
        message: Callable[[], Reply],
        the_card: Callable[[str], Reply] | None = None,
    ) -> Agent:
        agent = Agent(
            message,
            the_card
            or (lambda url: ({"content-type": "application/json"}, json.dumps(card(url)).encode())),
        )
        server = await asyncio.start_server(agent.handle, "127.0.0.1", 0)
        servers.append(server)
        agent.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
        return agent

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def ask(agent: Agent) -> Any:
    directory = A2ADirectory([agent.url], allowed_hosts=["127.0.0.1"])
    tool = CallPeer(directory, allowed_hosts=["127.0.0.1"], timeout=10)
    try:
        return await tool.acall(peer="evil", prompt="go")
    finally:
        await tool.aclose()
        await directory.aclose()


async def test_a_gzip_bomb_of_an_answer_is_refused_unread(serve: Any) -> None:
    agent = await serve(
        lambda: ({"content-type": "text/event-stream", "content-encoding": "gzip"}, BOMB)
    )
    started = time.perf_counter()

    with pytest.raises(PeerRequestError, match="'gzip'-encoded"):
        await ask(agent)

    assert time.perf_counter() - started < 5 and agent.posts == 1


async def test_a_gzip_bomb_of_a_card_is_refused_and_no_message_is_sent(serve: Any) -> None:
    agent = await serve(
        lambda: sse({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"}}}),
        lambda url: ({"content-type": "application/json", "content-encoding": "gzip"}, BOMB),
    )

    with pytest.raises(DirectoryError, match="'gzip'-encoded"):
        await ask(agent)

    assert agent.posts == 0


WRONG_TYPES: dict[str, dict[str, Any]] = {
    "a task id that is a number": {"task": {"id": 5, "status": {"state": "TASK_STATE_WORKING"}}},
    "a status that is text": {"task": {"id": "t", "status": "done"}},
    "a state that is no state": {"task": {"id": "t", "status": {"state": ["COMPLETED"]}}},
    "artifacts that are text": {"task": {"id": "t", "status": {}, "artifacts": "answer"}},
    "parts that are an object": {
        "artifactUpdate": {"taskId": "t", "artifact": {"artifactId": "a", "parts": {"text": "x"}}}
    },
    "a text part that is a number": {
        "artifactUpdate": {"taskId": "t", "artifact": {"artifactId": "a", "parts": [{"text": 7}]}}
    },
    "append that is text": {
        "artifactUpdate": {"taskId": "t", "append": "yes", "artifact": {"parts": [{"text": "x"}]}}
    },
    "metadata that is a list": {
        "statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_FAILED"}, "metadata": [1]}
    },
    "a result that is a list": [],  # type: ignore[dict-item]
}


@pytest.mark.parametrize("what", list(WRONG_TYPES))
async def test_task_and_artifact_fields_of_the_wrong_json_type_fail_typed(
    serve: Any, what: str
) -> None:
    agent = await serve(lambda: sse(WRONG_TYPES[what]))

    # Refused where the SDK parses it, or skipped by the SDK so the stream ends without the
    # task's end: a typed error either way, never a partial answer or a TypeError.
    with pytest.raises((PeerRequestError, StreamEndedError)) as caught:
        await ask(agent)
    assert isinstance(caught.value, StreamEndedError) or re.search(
        r"could not read|cannot be read|not an id", str(caught.value)
    )


async def test_a_card_of_the_wrong_json_types_is_a_directory_error_naming_the_card(
    serve: Any,
) -> None:
    def wrong(url: str) -> Reply:
        bad = {**card(url), "supportedInterfaces": "everywhere", "capabilities": []}
        return {"content-type": "application/json"}, json.dumps(bad).encode()

    agent = await serve(lambda: sse(), wrong)

    with pytest.raises(DirectoryError, match=r"agent card http://127\.0\.0\.1"):
        await ask(agent)
    assert agent.posts == 0
