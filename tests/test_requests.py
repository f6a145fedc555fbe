"""The SDK's own requests: built from a parsed base URL, sent past httpx's client layers.

What `Requests.build` makes must be what httpx's `build_request` makes (same
URL, same headers in the same order, same body), and what skips httpx's
client layers must never skip a hook, an auth, a mock or httpx's log.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
import respx
from hypothesis import given, settings
from hypothesis import strategies as st

from coreagent_sdk import AttachClient
from coreagent_sdk._http._plumbing import make_http_client
from coreagent_sdk._http._requests import Requests

BASE = "http://127.0.0.1:9"  # never dialed: every test here answers in process or by a mock
READ = {"Accept-Encoding": "gzip, deflate", "Authorization": "Bearer t"}
WRITE = {**READ, "Content-Type": "application/json"}
EVENTS = {**READ, "Accept": "text/event-stream", "Accept-Encoding": "identity"}
# The daemon's answer to POST /sessions (conformance: rest-create-session-v1.json).
CREATED = {"app": "core-agent", "user": "alice", "sessionID": "s-1", "url": BASE + "/sessions/x"}


def _shape(request: httpx.Request) -> tuple[Any, ...]:
    return (
        request.method,
        str(request.url),
        request.url.raw_path,
        request.headers.raw,
        request.content,
        request.extensions,
    )


@pytest.mark.parametrize(
    ("method", "path", "headers", "content"),
    [
        ("POST", "/sessions", WRITE, b""),
        ("POST", "/sessions/app/s-1.a~b:c+d/inject", WRITE, b'{"message": "hi"}'),
        ("GET", "/sessions/s-1/events", EVENTS, None),
        ("DELETE", "/sessions/s-1", WRITE, b""),
        ("GET", "/.well-known/agent-card.json", READ, None),
    ],
)
async def test_a_request_built_from_the_parsed_base_is_the_one_httpx_builds(
    method: str, path: str, headers: dict[str, str], content: bytes | None
) -> None:
    client = make_http_client(httpx.MockTransport(lambda r: httpx.Response(204)))
    timeout = httpx.Timeout(None)
    fast = Requests(client, BASE).build(
        method, path, headers=headers, content=content, timeout=timeout
    )
    slow = client.build_request(
        method, BASE + path, headers=headers, content=content, timeout=timeout
    )
    assert fast is not None
    assert _shape(fast) == _shape(slow)
    await client.aclose()


def test_a_path_that_is_not_plain_is_left_to_httpx() -> None:
    requests = Requests(make_http_client(httpx.MockTransport(lambda r: httpx.Response(204))), BASE)
    for path in ("/sessions/a b", "/sessions/%2e%2e", "/sessions?x=1", "/sessions/é", "sessions"):
        built = requests.build("GET", path, headers=READ, content=None, timeout=httpx.Timeout(1))
        assert built is None, path


async def test_an_attach_client_sends_what_it_sent_before_through_its_own_client() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=CREATED)

    async with AttachClient(BASE, transport=httpx.MockTransport(answer), token="t") as client:
        await client.new_session()
    probe = httpx.AsyncClient().build_request("POST", BASE + "/sessions")
    assert seen[0].url == probe.url
    assert seen[0].headers["content-length"] == "0"
    assert seen[0].headers["authorization"] == "Bearer t"
    assert seen[0].headers["host"] == "127.0.0.1:9"


async def test_a_respx_mock_sees_every_request_of_a_delegation_path() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(BASE + "/sessions").respond(200, json=CREATED)
        async with AttachClient(BASE, token="t") as client:
            created = await client.new_session()
    assert created.session_id == "s-1"
    assert route.call_count == 1


class _Counting(httpx.AsyncBaseTransport):
    """Counts what reaches it; answers a new session."""

    http_version = "HTTP/1.1"

    def __init__(self) -> None:
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return httpx.Response(200, json=CREATED)


async def test_hooks_auth_and_httpxs_log_still_see_each_request_of_the_sdks_client(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from coreagent_sdk._http import _plumbing as _http

    counted = _Counting()

    async def through(self: Any, request: httpx.Request) -> httpx.Response:
        return await counted.handle_async_request(request)

    # The SDK's network transport, its sending replaced by the counter: nothing is dialed.
    monkeypatch.setattr(_http.NetworkTransport, "handle_async_request", through)
    client = make_http_client(None)
    hooked: list[str] = []

    async def hook(request: httpx.Request) -> None:
        hooked.append(request.url.path)

    client.event_hooks = {"request": [hook], "response": []}
    await client.send(client.build_request("POST", BASE + "/a"), stream=True)
    assert hooked == ["/a"]
    client.event_hooks = {"request": [], "response": []}
    client.auth = httpx.BasicAuth("u", "p")
    response = await client.send(client.build_request("POST", BASE + "/b"), stream=True)
    assert response.request.headers["authorization"].startswith("Basic ")
    client.auth = None

    # With nothing to act, the request goes straight to the transport (httpx's own
    # sending is not reached), answered and logged as httpx logs it.
    async def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("httpx's client layers were run")

    monkeypatch.setattr(httpx.AsyncClient, "_send_single_request", refused)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="httpx"):
        response = await client.send(client.build_request("POST", BASE + "/c"), stream=True)
    assert response.request.url.path == "/c"
    assert response.status_code == 200
    said = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert said == [f'HTTP Request: POST {BASE}/c "HTTP/1.1 200 OK"']
    assert counted.sent == 3
    await client.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await client.send(client.build_request("GET", BASE + "/e"), stream=True)
    await asyncio.sleep(0)


@given(
    st.from_regex(r"https?://[a-z0-9][a-z0-9.-]{0,40}(:[0-9]{1,5})?", fullmatch=True),
)
@settings(max_examples=300, deadline=None)
def test_a_plain_base_put_into_a_template_is_the_url_httpx_parses(base: str) -> None:
    from coreagent_sdk._http._requests import parsed_base

    try:
        want = httpx.URL(base)
    except httpx.InvalidURL:
        return  # refused at the endpoint check before any client is made
    got = parsed_base(base)
    assert (got, got.raw_path, str(got), got.netloc, got.port, got.host) == (
        want,
        want.raw_path,
        str(want),
        want.netloc,
        want.port,
        want.host,
    )


async def test_clients_of_one_pool_each_send_their_own_host_and_token_whatever_they_share() -> None:
    # The clients of one pool share their merged headers (_requests._MERGED), by what the
    # headers hold: each request still carries its own client's Host and bearer token.
    seen: list[tuple[str, str | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers["host"], request.headers.get("authorization")))
        return httpx.Response(200, json=CREATED)

    pool = make_http_client(httpx.MockTransport(answer))
    plan = [("127.0.0.1:9", "a"), ("127.0.0.2:9", "a"), ("127.0.0.1:9", "b"), ("127.0.0.3:9", None)]
    for _ in range(2):  # made again: merged before, by another client
        for host, token in plan:
            async with AttachClient(f"http://{host}", http_client=pool, token=token) as client:
                await client.new_session()
    await pool.aclose()
    expected = [(host, f"Bearer {token}" if token else None) for host, token in plan]
    assert seen == expected * 2
