"""Item 1 and 2: the token never leaks through what a server sends, nor through httpx.

Each test hands the SDK `CANARY` as its token, lets a hostile server echo it
back somewhere, and checks the error, its chain, the log and the events. The
session-wide canary watch (tests/canary.py) checks the same again at teardown.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from coreagent_sdk import (
    AttachClient,
    CallPeer,
    CallPeerEvent,
    HubDirectory,
    Peer,
    PeerRegistration,
    StaticDirectory,
)
from coreagent_sdk._attach._wire import encode_sse
from coreagent_sdk.errors import (
    CoreAgentError,
    DirectoryError,
    InvalidTokenError,
    PeerTurnError,
    ProtocolError,
    TokenUnsetError,
)

from ..canary import CANARY, exception_texts, leaked
from .servers import RawServer, daemon, one_peer, read_request, records, respond, send_json, turn

ENV = {"FLEET_TOKEN": CANARY}


def assert_clean(error: BaseException) -> None:
    dirty = [where for where, text in exception_texts(error) if leaked(text)]
    assert dirty == []


async def call(app: Any, caplog: pytest.LogCaptureFixture, **kw: Any) -> tuple[Any, list[Any]]:
    """Call the peer served by `app` with the canary as token; (error or result, events)."""
    directory, transport = one_peer(app)
    events: list[CallPeerEvent] = []
    tool = CallPeer(
        directory,
        transport=transport,
        token_env="FLEET_TOKEN",
        environ=ENV,
        on_event=events.append,
        timeout=kw.pop("timeout", 5),
        **kw,
    )
    caplog.set_level(logging.DEBUG)
    try:
        return await tool.acall(peer="evil", prompt="go"), events
    except CoreAgentError as exc:
        return exc, events
    finally:
        await tool.aclose()


def assert_nothing_leaked(
    outcome: Any, events: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    if isinstance(outcome, BaseException):
        assert_clean(outcome)
    else:
        assert not leaked(repr(outcome))
    assert events and not [e for e in events if leaked(repr(e))]
    assert not [r for r in caplog.records if leaked(logging.Formatter().format(r))]


async def test_a_reason_phrase_echoing_the_token_is_scrubbed() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(respond(f"500 Bearer {CANARY}", b"oops\n"))
        await writer.drain()

    async with RawServer(handler) as server, AttachClient(server.url, token=CANARY) as client:
        with pytest.raises(CoreAgentError) as info:
            await client.new_session()
    assert_clean(info.value)
    assert "[redacted]" in str(info.value)


async def test_a_short_token_echoed_in_a_reason_phrase_never_reaches_errors_events_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    short = "t0k"  # DESIGN.md's own example token

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, _, headers, _ = await read_request(reader)
        echo = headers.get("authorization", "").removeprefix("Bearer ")
        writer.write(respond(f"500 Bad {echo}", b"{}", {"Content-Type": "application/json"}))
        await writer.drain()

    events: list[CallPeerEvent] = []
    caplog.set_level(logging.DEBUG)  # every logger, httpx's and httpcore's included
    async with RawServer(handler) as server:
        tool = CallPeer(
            StaticDirectory([Peer("p", server.url)]),
            token_env="TOK",
            environ={"TOK": short},
            timeout=5,
            on_event=events.append,
        )
        with pytest.raises(CoreAgentError) as info:
            await tool.acall(peer="p", prompt="hi")
        await tool.aclose()
    texts = [text for _, text in exception_texts(info.value)]
    texts += [repr(e) for e in events] + [logging.Formatter().format(r) for r in caplog.records]
    assert "[redacted]" in str(info.value)
    assert [t for t in texts if short in t] == []


async def test_a_2xx_answer_that_is_not_json_is_scrubbed_before_it_is_quoted(caplog) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send_json(send, 201, f"<html>you sent Bearer {CANARY}</html>".encode())

    outcome, events = await call(app, caplog)
    assert isinstance(outcome, CoreAgentError)
    assert_nothing_leaked(outcome, events, caplog)


async def test_keys_listed_in_a_missing_field_message_are_scrubbed(caplog) -> None:
    outcome, events = await call(daemon(session={CANARY: 1, "app": "a"}), caplog)
    assert isinstance(outcome, CoreAgentError) and "[redacted]" in str(outcome)
    assert_nothing_leaked(outcome, events, caplog)


async def test_a_protocol_version_header_echoing_the_token_is_scrubbed(caplog) -> None:
    header = [(b"x-attach-protocol-version", f"2.{CANARY}".encode())]
    outcome, events = await call(daemon(stream=turn("hi"), stream_headers=header), caplog)
    assert isinstance(outcome, CoreAgentError) and "protocol" in str(outcome)
    assert_nothing_leaked(outcome, events, caplog)


async def test_a_turn_errors_message_and_hint_are_scrubbed(caplog) -> None:
    frame = encode_sse(
        "turn-error",
        {
            "kind": "auth_error",
            "message": f"bad {CANARY}",
            "hint": f"use {CANARY}",
            "retryable": False,
        },
    )
    outcome, events = await call(daemon(stream=[frame]), caplog)
    assert isinstance(outcome, PeerTurnError)
    assert outcome.message == "bad [redacted]" and outcome.hint == "use [redacted]"
    assert_nothing_leaked(outcome, events, caplog)


async def test_a_session_app_equal_to_the_token_never_reaches_a_message(caplog) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["method"] == "POST" and scope["path"] == "/sessions":
            await send_json(send, 201, {"app": CANARY, "user": "u", "sessionID": "s", "url": ""})
        else:
            await send_json(send, 404, b"no such session\n")

    outcome, events = await call(app, caplog)
    # Refused before it goes into a URL (issue 16 item 1), not sent to earn a 404.
    assert isinstance(outcome, CoreAgentError) and "credential" in str(outcome)
    assert_nothing_leaked(outcome, events, caplog)


@pytest.mark.parametrize("offset", [-20, -5, -1, 0])
async def test_a_token_straddling_the_excerpt_cut_leaves_nothing_behind(offset: int) -> None:
    body = ("x" * (512 + offset) + CANARY + "y" * 600).encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send_json(send, 503, body)

    async with AttachClient("http://evil.test", token=CANARY, transport=_asgi(app)) as client:
        with pytest.raises(CoreAgentError) as info:
            await client.new_session()
    assert_clean(info.value)


async def test_an_answer_that_echoes_the_token_is_scrubbed_from_the_result(caplog) -> None:
    outcome, events = await call(daemon(stream=turn(f"your token is {CANARY}")), caplog)
    assert not isinstance(outcome, BaseException)
    assert outcome.response == "your token is [redacted]"
    assert_nothing_leaked(outcome, events, caplog)


async def test_a_hub_echoing_the_token_fails_the_directory_and_registration_cleanly() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send_json(send, 500, f"internal: {CANARY}".encode())

    directory = HubDirectory("http://hub.test", transport=_asgi(app), token=CANARY)
    with pytest.raises(DirectoryError) as info:
        await directory.peers()
    assert_clean(info.value)
    registration = PeerRegistration(
        "http://hub.test",
        name="p",
        endpoint="http://p.test",
        transport=_asgi(app),
        token_env="FLEET_TOKEN",
        environ=ENV,
    )
    with pytest.raises(CoreAgentError) as info:
        async with registration:
            pass
    assert_clean(info.value)


def _asgi(app: Any) -> httpx.AsyncBaseTransport:
    from coreagent_sdk import ASGITransport

    return ASGITransport(app)


# --- item 2: what a token may be -------------------------------------------------------


async def test_a_token_read_from_a_secret_file_with_a_trailing_newline_is_stripped() -> None:
    seen: list[Any] = []
    directory, transport = one_peer(daemon(stream=turn("ok"), seen=seen))
    tool = CallPeer(
        directory,
        transport=transport,
        token_env="FLEET_TOKEN",
        environ={"FLEET_TOKEN": f"  {CANARY}\n"},
        timeout=5,
    )
    result = await tool.acall(peer="evil", prompt="go")
    assert result.response == "ok"
    assert {h["authorization"] for _, _, h in seen} == {f"Bearer {CANARY}"}


@pytest.mark.parametrize(
    "bad", [f"{CANARY}\nX-Evil: 1", f"{CANARY}é", f"{CANARY}\x00", f"{CANARY} {CANARY}", "\u00a0"]
)
async def test_a_token_httpx_would_refuse_is_a_typed_error_naming_the_variable(bad: str) -> None:
    sent: list[httpx.Request] = []
    directory, _ = one_peer(daemon())
    events: list[Any] = []
    tool = CallPeer(
        directory,
        transport=records(sent),
        token_env="FLEET_TOKEN",
        environ={"FLEET_TOKEN": bad},
        on_event=events.append,
    )
    with pytest.raises((InvalidTokenError, TokenUnsetError)) as info:
        await tool.acall(peer="evil", prompt="go")
    assert "$FLEET_TOKEN" in str(info.value)
    assert_clean(info.value)
    assert "é" not in str(info.value) and sent == []
    assert events[-1].kind == "failed"


@pytest.mark.parametrize("where", ["client", "directory", "registration"])
async def test_every_way_in_for_a_token_refuses_a_bad_one_typed(where: str) -> None:
    sent: list[httpx.Request] = []
    bad = f"{CANARY}\r\né"

    async def use() -> None:
        if where == "client":
            AttachClient("http://a.test", token=bad, transport=records(sent))
        elif where == "directory":
            await HubDirectory("http://a.test", token=bad, transport=records(sent)).peers()
        else:
            registration = PeerRegistration(
                "http://a.test",
                name="p",
                endpoint="http://p.test",
                transport=records(sent),
                token_env="T",
                environ={"T": bad},
            )
            async with registration:
                pass

    with pytest.raises(InvalidTokenError) as info:
        await use()
    assert_clean(info.value)
    assert sent == []


async def test_a_token_that_is_only_whitespace_counts_as_unset() -> None:
    tool = CallPeer(one_peer(daemon())[0], token_env="FLEET_TOKEN", environ={"FLEET_TOKEN": " \n"})
    with pytest.raises(TokenUnsetError, match=r"\$FLEET_TOKEN is unset or empty"):
        await tool.acall(peer="evil", prompt="go")


def test_protocol_errors_are_still_protocol_errors() -> None:
    assert issubclass(ProtocolError, CoreAgentError)
