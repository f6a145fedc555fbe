"""Items 7, 9 and 13: whatever a peer or hub answers, what leaves the SDK is a typed error.

Hostile ASGI apps answer each step of a delegation with the wrong JSON type,
numbers out of range, deep nesting, ids that would change the URL, bodies cut
short; the call must fail as a `CallPeerError`, and after a refused id nothing
more is sent.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from coreagent_sdk import AttachClient, CallPeer, HubDirectory, Peer, StaticDirectory
from coreagent_sdk._attach._wire import encode_sse
from coreagent_sdk.errors import (
    CallPeerError,
    CoreAgentError,
    DirectoryError,
    InvalidEndpointError,
    PeerTurnError,
    ProtocolError,
    TransportFailure,
)

from .servers import RawServer, daemon, one_peer, read_request, send_json, turn

DEEP = b"[" * 50_000 + b"]" * 50_000


async def ask(app: Any, **kw: Any) -> Any:
    directory, transport = one_peer(app)
    tool = CallPeer(directory, transport=transport, timeout=kw.pop("timeout", 5), **kw)
    try:
        return await tool.acall(peer="evil", prompt="go")
    finally:
        await tool.aclose()


@pytest.mark.parametrize(
    "session",
    [
        [],
        None,
        {"app": 1, "sessionID": "x"},
        {"app": "a", "sessionID": None},
        {"app": {"x": 1}, "sessionID": "x"},
        b'{"app": "a", "sessionID": 1e999}',
        DEEP,
    ],
    ids=["array", "null", "number-app", "null-id", "object-app", "1e999", "deep"],
)
async def test_a_session_answer_of_the_wrong_shape_fails_the_call_typed(session: Any) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send_json(send, 201, session if session is not None else b"null")

    with pytest.raises(CallPeerError):
        await ask(app)


async def test_a_session_id_that_would_change_the_url_is_refused_and_nothing_more_is_sent() -> None:
    seen: list[Any] = []
    app = daemon(session={"app": "../../../admin", "sessionID": "x?steal=1#"}, seen=seen)
    with pytest.raises(CallPeerError, match="path segment"):
        await ask(app)
    assert [(m, p) for m, p, _ in seen] == [("POST", "/sessions")]


@pytest.mark.parametrize(
    "answer", [b"null", b"[]", {"session": 5}, {"session": "s", "woke": "yes"}], ids=str
)
async def test_an_inject_answer_of_the_wrong_shape_fails_the_call_typed(answer: Any) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"].endswith("/inject"):
            await send_json(send, 200, answer)
        else:
            await daemon(stream=turn("hi"))(scope, receive, send)

    with pytest.raises(CallPeerError):
        await ask(app)


async def test_frames_of_the_wrong_shape_are_skipped_and_the_turn_still_ends() -> None:
    bad = [
        encode_sse("agent", {"seq": "x", "event": {"Content": {"parts": [{"text": 5}]}}}),
        encode_sse("agent", {"seq": 1, "event": {"Content": {"parts": [{"text": {"a": 1}}]}}}),
        encode_sse("agent", {"seq": 1, "event": {"Author": 7, "TurnComplete": True}}),
        encode_sse("turn-complete", {"tokens_in": "many"}),
        encode_sse("turn-complete", {"latency_ms": float("inf")}),
        b"event: agent\ndata: " + DEEP + b"\n\n",
    ]
    result = await ask(daemon(stream=[*bad, *turn("fine")]))
    assert result.response == "fine"


async def test_a_turn_error_with_a_null_message_reads_as_empty() -> None:
    frame = encode_sse("turn-error", {"kind": "watchdog", "message": None, "retryable": True})
    with pytest.raises(PeerTurnError) as info:
        await ask(daemon(stream=[frame]))
    assert info.value.message == "" and info.value.kind == "watchdog"


@pytest.mark.parametrize(
    "roster",
    [{"peers": [{"name": 5, "endpoint": "http://a.test"}]}, {"peers": {}}, [], {"peers": [None]}],
    ids=["numeric-name", "object-peers", "array", "null-peer"],
)
async def test_a_roster_of_the_wrong_shape_is_a_directory_error(roster: Any) -> None:
    async def hub(scope: Any, receive: Any, send: Any) -> None:
        await send_json(send, 200, roster)

    from coreagent_sdk import ASGITransport

    directory = HubDirectory("http://hub.test", transport=ASGITransport(hub))
    with pytest.raises(DirectoryError):
        await directory.peers()


async def test_a_directory_error_carries_the_hubs_status_code() -> None:
    async def hub(scope: Any, receive: Any, send: Any) -> None:
        await send_json(send, 503, b"overloaded\n")

    from coreagent_sdk import ASGITransport

    directory = HubDirectory("http://hub.test", transport=ASGITransport(hub))
    with pytest.raises(DirectoryError) as info:
        await directory.peers()
    assert info.value.status_code == 503


async def test_a_body_cut_short_is_a_transport_failure() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n" + b'{"app": "a"')
        await writer.drain()

    async with RawServer(handler) as server, AttachClient(server.url) as client:
        with pytest.raises(TransportFailure):
            await client.new_session()


async def test_a_html_answer_on_events_fails_at_once_not_at_the_deadline() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"].endswith("/events"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/html")],
                }
            )
            await send({"type": "http.response.body", "body": b"<html>", "more_body": True})
            await asyncio.Event().wait()  # held open
        else:
            await daemon()(scope, receive, send)

    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(CallPeerError, match="text/html"):
        await ask(app, timeout=30)
    assert loop.time() - started < 5


async def test_an_endpoint_httpx_cannot_encode_is_refused_before_dialing() -> None:
    sent: list[httpx.Request] = []
    from .servers import records

    tool = CallPeer(StaticDirectory([Peer("p", "http://xn--zz.test")]), transport=records(sent))
    with pytest.raises(InvalidEndpointError, match="httpx cannot encode it"):
        await tool.acall(peer="p", prompt="go")
    assert sent == []


def test_every_error_here_is_a_core_agent_error() -> None:
    assert issubclass(ProtocolError, CoreAgentError) and issubclass(DirectoryError, CallPeerError)
