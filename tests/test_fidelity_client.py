"""What a client reads and where it dials, as core-agent's own client does.

- A client written against the simulator with raw httpx, following only
  protocol.md (no SDK), passes the same checks in-process and on loopback.
- `CallPeer` leaves streaming (partial) chunks out of the answer (core-agent
  `pkg/tools/peer/callpeer.go`, the read loop's partial check).
- The SDK dials only `scheme://host[:port]` of an endpoint
  (`internal/attachclient`: the base URL is built from scheme and host).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest

from coreagent_sdk import CallPeer, Peer, StaticDirectory
from simulator import Fleet, behaviors

from .conftest import ReachFactory

JSON = {"Content-Type": "application/json"}
FRAME = re.compile(rb"event: ([a-z-]+)\ndata: ([^\n]+)\n\n")


# --- a raw client, written from protocol.md alone -------------------------------------


def _field(event: dict[str, Any], *names: str) -> Any:
    for name in names:  # both spellings of the event's own fields
        if name in event:
            return event[name]
    return None


async def raw_delegate(http: httpx.AsyncClient, base: str, prompt: str) -> dict[str, Any]:
    """One delegation by protocol.md's 'What a delegation reads'; what it saw, for checks."""
    created = await http.post(f"{base}/sessions", headers=JSON)
    assert created.status_code == 201, created.text
    body = created.json()
    path = f"{base}/sessions/{body['app']}/{body['sessionID']}"
    seen: dict[str, Any] = {"events": [], "pieces": []}
    headers = {"X-Attach-Protocol-Version": "1.10.0"}
    async with http.stream("GET", f"{path}/events", headers=headers) as stream:
        assert stream.status_code == 200
        seen["version"] = stream.headers["x-attach-protocol-version"]
        injected = await http.post(f"{path}/inject", headers=JSON, json={"message": prompt})
        assert injected.status_code == 200
        seen["inject"] = injected.json()
        buf = b""
        async for chunk in stream.aiter_bytes():
            buf += chunk
            while b"\n\n" in buf:
                raw, buf = buf.split(b"\n\n", 1)
                match = FRAME.fullmatch(raw + b"\n\n")
                if match is None:
                    continue
                kind, data = match.group(1).decode(), json.loads(match.group(2))
                seen["events"].append(kind)
                if kind == "turn-complete":
                    seen["done"] = data
                    return seen
                if kind == "turn-error":
                    seen["error"] = data
                    return seen
                if kind != "agent":
                    continue
                event = data["event"]
                parts = (event.get("Content") or {}).get("parts") or []
                text = "".join(p.get("text", "") for p in parts)
                author = _field(event, "Author", "author") or ""
                calls = any("functionCall" in p or "functionResponse" in p for p in parts)
                if event.get("Partial") or author in ("", "user"):
                    continue
                if text:
                    seen["pieces"].append(text)
                if event.get("TurnComplete") or (text and not calls):
                    return seen
    raise AssertionError(f"the stream ended before the turn did: {seen['events']}")


@pytest.mark.parametrize(
    ("behavior", "answer"),
    [
        (behaviors.narrate(["listing nodes"], "3 nodes ready"), "listing nodes\n\n3 nodes ready"),
        (behaviors.stream(3000, 1000), "x" * 3000),
        (behaviors.fail("rate_limited", "slow down", retryable=True), None),
    ],
)
async def test_a_raw_httpx_client_reads_the_same_turn_both_ways(
    make_reach: ReachFactory, behavior, answer
) -> None:
    fleet = Fleet()
    fleet.add_peer("peer", behavior)
    reach = await make_reach(fleet)
    async with httpx.AsyncClient(transport=reach.transport) as http:
        seen = await asyncio.wait_for(raw_delegate(http, reach.url("peer"), "status?"), 10)
        peers = (await http.get(f"{reach.url('hub')}/peers")).json()["peers"]
    assert seen["version"] == "1.10.0"
    assert seen["events"][:2] == ["capabilities", "status-update"]
    assert [p["name"] for p in peers] == ["peer"]
    assert seen["inject"]["woke"] is True
    if answer is None:
        assert seen["error"] == {"kind": "rate_limited", "message": "slow down", "retryable": True}
        return
    assert "\n\n".join(seen["pieces"]).strip() == answer
    if "done" in seen:  # not the inject's id: the turn mints its own
        assert seen["done"]["prompt_id"] != seen["inject"]["prompt_id"]


# --- item 12: partial chunks stay out of the answer -------------------------------------


async def test_streamed_partial_chunks_never_enter_the_answer(make_reach: ReachFactory) -> None:
    """A peer streams its answer in partial chunks, then sends it whole, as a daemon does."""

    async def chunked(turn: Any) -> str:
        for piece in ("The cluster ", "is ", "healthy."):
            await turn.chunk(piece)
        return "The cluster is healthy."

    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.custom(chunked))
    reach = await make_reach(fleet)
    result = await reach.call_peer(timeout=10).acall(peer="prod-1", prompt="status?")
    assert result.response == "The cluster is healthy."


# --- item 10: where the client dials ------------------------------------------------------


class Recording(httpx.AsyncBaseTransport):
    """Records every request, then hands it to the fleet's in-process transport."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.inner.handle_async_request(request)


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://prod-1.sim/prefix",
        "http://prod-1.sim/?a=b",
        "http://prod-1.sim/#frag",
        "http://user:pw@prod-1.sim",
        "HTTP://prod-1.sim/x/y?z#w",
    ],
)
async def test_the_sdk_dials_only_the_scheme_and_host_of_an_endpoint(endpoint) -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.reply("ok"))
    recording = Recording(fleet.transport)
    tool = CallPeer(
        StaticDirectory([Peer("prod-1", endpoint)]),
        transport=recording,
        token_env="TOK",
        environ={"TOK": "s3cret"},
        timeout=10,
    )
    assert (await tool.acall(peer="prod-1", prompt="hi")).response == "ok"
    await tool.aclose()
    await fleet.aclose()
    assert [r.method for r in recording.requests] == ["POST", "GET", "POST"]
    for request in recording.requests:
        url = request.url
        assert (url.scheme, url.host, url.query, url.fragment) == ("http", "prod-1.sim", b"", "")
        assert url.path.startswith("/sessions")
        assert request.headers["authorization"] == "Bearer s3cret"


async def test_the_hub_accepts_endpoints_with_a_path_query_fragment_or_userinfo() -> None:
    fleet = Fleet()
    async with httpx.AsyncClient(transport=fleet.transport) as http:
        for endpoint in ("http://a/p", "http://a/?q=1", "http://a/#f", "http://u:p@a"):
            body = {"name": "x", "endpoint": endpoint}
            assert (
                await http.post(f"{fleet.hub_url}/peers", headers=JSON, json=body)
            ).status_code == 201
    await fleet.aclose()


# --- deliberate choices on call_peer, each beside the Go behaviour ------------------------


def _agent(author: str, text: str, *, turn_complete: bool = False, thought: bool = False) -> bytes:
    part: dict[str, Any] = {"text": text}
    if thought:
        part["thought"] = True
    event = {
        "Content": {"role": "user" if author == "user" else "model", "parts": [part]},
        "Partial": False,
        "TurnComplete": turn_complete,
        "Author": author,
        "ID": "e-1",
    }
    return b"event: agent\ndata: " + json.dumps({"seq": 1, "event": event}).encode() + b"\n\n"


def scripted_peer(frames: list[bytes]) -> Any:
    """A minimal ASGI daemon: one session, whose stream sends `frames` after inject."""
    injected = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        path, method = scope["path"], scope["method"]

        async def answer(status: int, body: bytes, ctype: bytes = b"application/json") -> None:
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", ctype)],
                }
            )
            await send({"type": "http.response.body", "body": body})

        if method == "POST" and path == "/sessions":
            body = {
                "app": "a",
                "user": "u",
                "sessionID": "s-1",
                "url": "http://peer/sessions/a/s-1",
            }
            await answer(201, json.dumps(body).encode())
        elif path.endswith("/inject"):
            injected.set()
            await answer(200, b'{"injected":"x","session":"s-1","woke":true}')
        else:
            start = {"type": "http.response.start", "status": 200}
            await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
            await injected.wait()
            for frame in frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    return app


async def test_a_turn_complete_on_the_echoed_prompt_does_not_end_the_turn() -> None:
    """Go's call_peer ignores TurnComplete on user or author-less events; so does CallPeer."""
    from coreagent_sdk import ASGITransport

    frames = [
        _agent("user", "status?", turn_complete=True),
        _agent("", "", turn_complete=True),
        _agent("peer", "all good"),
    ]
    tool = CallPeer(
        StaticDirectory([Peer("peer", "http://peer")]),
        transport=ASGITransport(scripted_peer(frames)),
        timeout=5,
    )
    assert (await tool.acall(peer="peer", prompt="status?")).response == "all good"
    await tool.aclose()


async def test_thought_parts_stay_out_of_the_answer() -> None:
    """Go counts thought parts as answer text; CallPeer leaves a model's reasoning out."""
    from coreagent_sdk import ASGITransport

    frames = [_agent("peer", "let me think", thought=True), _agent("peer", "all good")]
    tool = CallPeer(
        StaticDirectory([Peer("peer", "http://peer")]),
        transport=ASGITransport(scripted_peer(frames)),
        timeout=5,
    )
    assert (await tool.acall(peer="peer", prompt="status?")).response == "all good"
    await tool.aclose()
