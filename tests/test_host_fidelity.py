"""The agent host answers as core-agent's Go daemon does, rule by rule.

Each test names the Go function it pins (core-agent `pkg/attach`, `pkg/agent`,
`pkg/auth`). The host is driven as its users drive it: an `AgentHost` behind
the SDK's in-process transport, raw httpx on the wire.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from coreagent_sdk import ASGITransport, FakeClock
from coreagent_sdk.host import (
    INBOX_CAP,
    AgentHost,
    Identity,
    PeerRegistry,
    SessionRateLimit,
    Turn,
)

JSON = {"Content-Type": "application/json"}
FRAME = re.compile(rb"event: ([a-z-]+)\ndata: ([^\n]+)\n\n")
TOKENS = {
    "tok-alice": Identity("alice"),
    "tok-bob": Identity("bob"),
    "tok-carol": Identity("carol"),
    "tok-root": Identity("root", admin=True),
}


def bearer(token: str) -> dict[str, str]:
    return {**JSON, "Authorization": f"Bearer {token}"}


def client(host: AgentHost) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=ASGITransport(host.app), base_url="http://agent.test")


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with client(AgentHost("agent", session_rate_limit=None)) as http:
        yield http


async def new_session(http: httpx.AsyncClient, headers: dict[str, str] = JSON) -> str:
    created = await http.post("/sessions", headers=headers)
    assert created.status_code == 201, created.text
    body = created.json()
    return f"/sessions/{body['app']}/{body['sessionID']}"


async def frames(
    http: httpx.AsyncClient,
    url: str,
    stop: Callable[[str, dict[str, Any]], bool],
    *,
    after: Any = None,
    headers: dict[str, str] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """(event, payload) pairs of a stream until `stop` says so.

    Bounded by progress, not by a total a loaded machine could outlast (257 injects and their
    frames took over 10 s): no byte for 10 s, or 100,000 frames, fails the test.
    """
    out: list[tuple[str, dict[str, Any]]] = []
    buf = b""
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, response.status_code
        chunks = response.aiter_bytes()
        while len(out) < 100_000:
            try:
                chunk = await asyncio.wait_for(anext(chunks), 10)
            except StopAsyncIteration:
                return out
            buf += chunk
            for event, data in FRAME.findall(buf):
                out.append((event.decode(), json.loads(data)))
                if after is not None and len(out) == 1:
                    await after()
                if stop(*out[-1]):
                    return out
            buf = buf[buf.rfind(b"\n\n") + 2 :]
    raise AssertionError(f"frames: no stop after {len(out)} frames")


def usage_after_turn(event: str, payload: dict[str, Any]) -> bool:
    return event == "usage-update" and "last_turn" in payload


async def one_turn(
    http: httpx.AsyncClient,
    path: str,
    message: str = "hello",
    headers: dict[str, str] = JSON,
    since: str | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """The frames of a stream opened on `path` (with `?since=`), then of one turn on it."""

    async def inject() -> None:
        answer = await http.post(f"{path}/inject", headers=headers, json={"message": message})
        assert answer.status_code == 200, answer.text

    params = {"since": since} if since is not None else None
    url = str(httpx.URL(f"{path}/events", params=params))
    return await frames(http, url, usage_after_turn, after=inject, headers=headers)


def seqs(got: list[tuple[str, dict[str, Any]]]) -> list[int]:
    return [p["seq"] for e, p in got if e == "agent"]


def split_at_turn(got: list[tuple[str, dict[str, Any]]]) -> tuple[list[int], list[int]]:
    """(replayed seqs, seqs of the live turn): the turn starts at its first `inbox` frame."""
    start = next(i for i, (e, _) in enumerate(got) if e == "inbox")
    return seqs(got[:start]), seqs(got[start:])


# --- events: since, seqs, replay, turn order ---------------------------------------------


@pytest.mark.parametrize(
    ("since", "replayed"),
    [
        ("+{first}", "rest"),  # ParseInt takes a sign
        (" {first}\t", "rest"),  # strings.TrimSpace
        ("{first}\u2003", "rest"),  # Unicode space, trimmed as Go trims it
        ("\u0661", "all"),  # a non-ASCII digit is not a number to ParseInt
        ("1_0", "all"),  # nor are digit separators
        ("9223372036854775808", "all"),  # out of int64 range: an error, so 0
        ("-{first}", "all"),  # negative: 0
        ("9223372036854775807", "none"),  # the largest cursor: nothing is after it
    ],
)
async def test_since_is_read_as_strconv_parseint_reads_it(
    http: httpx.AsyncClient, since: str, replayed: str
) -> None:
    """Pins `pkg/attach/handlers.go` `parseSince` (`strconv.ParseInt`, error or < 0 -> 0)."""
    path = await new_session(http)
    logged = seqs(await one_turn(http, path))
    assert len(logged) == 2  # the echoed prompt and the answer
    cursor = since.format(first=logged[0])
    replayed_seqs, _ = split_at_turn(await one_turn(http, path, "again", since=cursor))
    want = {"rest": logged[1:], "all": logged, "none": []}[replayed]
    assert replayed_seqs == want


async def test_a_repeated_since_is_read_from_its_first_value(http: httpx.AsyncClient) -> None:
    """Pins `pkg/attach/handlers.go` `streamEvents`: `r.URL.Query().Get("since")`, the
    first value of a repeated parameter (a host that read the last replayed nothing)."""
    path = await new_session(http)
    logged = seqs(await one_turn(http, path))

    async def inject() -> None:
        answer = await http.post(f"{path}/inject", headers=JSON, json={"message": "again"})
        assert answer.status_code == 200, answer.text

    for first, last, want in (
        ("0", "9223372036854775807", logged),
        ("9223372036854775807", "0", []),
    ):
        url = str(httpx.URL(f"{path}/events", params=[("since", first), ("since", last)]))
        replayed, _ = split_at_turn(await frames(http, url, usage_after_turn, after=inject))
        assert replayed == want, (first, last)


async def test_seqs_come_from_one_counter_across_the_hosts_sessions(
    http: httpx.AsyncClient,
) -> None:
    """Pins the daemon's event log (`pkg/attach/broadcaster.go` `Frame.Seq`): one counter for
    every session, so a session's seqs increase but neither start at 1 nor run contiguously."""
    first, second = await new_session(http), await new_session(http)
    a1 = seqs(await one_turn(http, first))
    b1 = seqs(await one_turn(http, second))
    replayed, a2 = split_at_turn(await one_turn(http, first))
    assert a1 == [1, 2] and b1 == [3, 4] and replayed == [1, 2] and a2 == [5, 6]
    replay = await frames(http, f"{first}/events", lambda e, p: e == "agent" and p["seq"] == 6)
    assert seqs(replay) == [1, 2, 5, 6]


async def test_a_turn_closes_with_complete_then_idle_then_usage_with_last_turn(
    http: httpx.AsyncClient,
) -> None:
    """Pins the daemon's turn order (`pkg/attach/events.go` `UsageUpdate.LastTurn`): status
    streaming, the events, turn-complete, status idle, then usage-update with last_turn."""
    path = await new_session(http)
    got = await one_turn(http, path, "twelve chars")
    events = [e for e, _ in got]
    turn = events[events.index("inbox") :]
    assert turn == [
        "inbox",
        "inbox",
        "status-update",
        "agent",
        "agent",
        "turn-complete",
        "status-update",
        "usage-update",
    ]
    payloads = [p for _, p in got]
    done, idle, usage = payloads[-3:]
    assert idle == {"turn_state": "idle"}
    assert usage["last_turn"] == {
        "tokens_in": done["tokens_in"],
        "tokens_out": done["tokens_out"],
        "cost_usd": 0.0,
        "model": done["model"],
    }
    assert usage["turns_total"] == 1
    # The snapshot a later stream opens with carries no last_turn (omitempty at stream open).
    later = await frames(http, f"{path}/events", lambda e, p: e == "usage-update")
    assert "last_turn" not in later[-1][1] and later[-1][1]["turns_total"] == 1


async def test_a_failed_turn_goes_idle_without_a_usage_update() -> None:
    """Pins the turn-error path: the daemon's tracker reports only turns that finished."""

    async def failing(turn: Turn) -> None:
        await turn.error("rate_limited", "slow down", retryable=True)

    async with client(AgentHost("agent", behavior=failing)) as http:
        path = await new_session(http)

        async def inject() -> None:
            await http.post(f"{path}/inject", headers=JSON, json={"message": "go"})

        got = await frames(
            http,
            f"{path}/events",
            lambda e, p: p == {"turn_state": "idle"},
            after=inject,
        )
    events = [e for e, _ in got]
    assert events[-2:] == ["turn-error", "status-update"]
    assert "usage-update" not in events[2:]


# --- request bodies ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        (b"", 400, "request body is empty\n"),
        (b"   ", 400, "malformed JSON: "),  # blank is not empty: Go's decoder refuses it
        (b"[]", 400, "malformed JSON: json: cannot unmarshal array into Go value of type "),
        (b'"hi"', 400, "malformed JSON: json: cannot unmarshal string into Go value of type "),
        (
            b'{"message": 5}',
            400,
            "malformed JSON: json: cannot unmarshal number into Go struct field "
            "InjectRequest.message of type string\n",
        ),
        (
            b'{"message": "x", "wake": "no"}',
            400,
            "malformed JSON: json: cannot unmarshal string into Go struct field "
            "InjectRequest.wake of type bool\n",
        ),
        (b'{"message": NaN}', 400, "malformed JSON: "),
        (b"null", 400, "inject: message is required\n"),
        (b'{"message": null}', 400, "inject: message is required\n"),
    ],
)
async def test_inject_bodies_are_refused_as_readjson_refuses_them(
    http: httpx.AsyncClient, body: bytes, status: int, text: str
) -> None:
    """Pins `pkg/attach/handlers.go` `readJSON` and `doInject` (json.Unmarshal's errors)."""
    path = await new_session(http)
    answer = await http.post(f"{path}/inject", headers=JSON, content=body)
    assert answer.status_code == status
    assert answer.text.startswith(text) and answer.text.endswith("\n")


@pytest.mark.parametrize(
    ("body", "woke"),
    [
        ({"message": "x"}, True),
        ({"message": "x", "wake": None}, True),  # a *bool: null is nil, nil is true
        ({"message": "x", "wake": False}, False),
        ({"Message": "x", "WAKE": False}, False),  # Go matches keys case-insensitively
        ({"message": "x", "wake": False, "extra": [1]}, False),  # unknown keys are ignored
    ],
)
async def test_wake_omitted_or_null_means_true(
    http: httpx.AsyncClient, body: dict[str, Any], woke: bool
) -> None:
    """Pins `pkg/attach/handlers.go` `InjectRequest.Wake` (`*bool`: nil means wake)."""
    path = await new_session(http)
    answer = await http.post(f"{path}/inject", headers=JSON, json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["woke"] is woke and answer.json()["injected"] == "x"


async def test_a_wake_naming_a_target_is_not_implemented(http: httpx.AsyncClient) -> None:
    """Pins `pkg/attach/handlers.go` `doWake`: a per-subagent target is 501."""
    path = await new_session(http)
    answer = await http.post(f"{path}/wake", headers=JSON, json={"target": "sub-1"})
    assert answer.status_code == 501
    assert answer.text.startswith("wake: per-subagent target is not yet implemented")


async def test_json_bodies_end_in_a_newline_with_go_html_safe_escapes(
    http: httpx.AsyncClient,
) -> None:
    """Pins `pkg/attach/handlers.go` `writeJSON` (`json.NewEncoder(w).Encode`): compact JSON,
    `<`, `>` and `&` escaped as Go escapes them, and a trailing newline."""
    created = await http.post("/sessions", headers=JSON)
    assert created.text.endswith("}\n") and created.text.count("\n") == 1
    path = await new_session(http)
    answer = await http.post(f"{path}/inject", headers=JSON, json={"message": "<b> & \u2028"})
    assert '"injected":"\\u003cb\\u003e \\u0026 \\u2028"' in answer.text
    assert answer.text.endswith("}\n")
    assert answer.json()["injected"] == "<b> & \u2028"
    listed = await http.get("/sessions")
    assert listed.text.endswith("]}\n")


# --- sessions: create body, ACL, rate limit ----------------------------------------------


async def test_create_session_refuses_an_owner_other_than_the_caller() -> None:
    """Pins `pkg/attach/handlers_create_session.go` `createSession`: `owner` is not settable."""
    async with client(AgentHost("agent", tokens=TOKENS)) as http:
        refused = await http.post("/sessions", headers=bearer("tok-alice"), json={"owner": "bob"})
        assert refused.status_code == 400
        assert refused.text == (
            "create session: owner is not settable (the new session is owned by the "
            'authenticated caller "alice", request said "bob"); omit the field\n'
        )
        same = await http.post("/sessions", headers=bearer("tok-alice"), json={"owner": "alice"})
        assert same.status_code == 201 and same.json()["user"] == "alice"
        empty = await http.post("/sessions", headers=bearer("tok-alice"), content=b"")
        assert empty.status_code == 201
        bad = await http.post("/sessions", headers=bearer("tok-alice"), json={"viewers": "bob"})
        assert bad.status_code == 400
        assert bad.text.startswith("create session: json: cannot unmarshal string into Go ")


async def test_viewers_read_contributors_write_and_others_see_nothing() -> None:
    """Pins `pkg/auth/authorize.go` `Authorize` with the ACL `createSession` stamps."""
    async with client(AgentHost("agent", tokens=TOKENS, session_rate_limit=None)) as http:
        path = await new_session(http, bearer("tok-alice"))
        acl = {"viewers": [" bob ", "", "bob"], "contributors": ["carol"]}
        created = await http.post("/sessions", headers=bearer("tok-alice"), json=acl)
        shared = f"/sessions/{created.json()['app']}/{created.json()['sessionID']}"

        def listed(token: str) -> set[str]:
            return {f"/sessions/{r['app']}/{r['sessionID']}" for r in rows[token]}

        rows: dict[str, list[dict[str, Any]]] = {}
        for token in ("tok-alice", "tok-bob", "tok-carol"):
            rows[token] = (await http.get("/sessions", headers=bearer(token))).json()["sessions"]
        assert {path, shared} <= listed("tok-alice")
        assert shared in listed("tok-bob") and path not in listed("tok-bob")
        assert shared in listed("tok-carol") and path not in listed("tok-carol")

        inject = {"message": "hi"}
        # bob (a viewer, trimmed) reads but may not write: a denial is a 404, as on a daemon.
        denied = await http.post(f"{shared}/inject", headers=bearer("tok-bob"), json=inject)
        assert denied.status_code == 404
        got = await one_turn(http, shared, headers=bearer("tok-carol"))  # carol contributes
        assert [e for e, _ in got][-1] == "usage-update"
        async with http.stream("GET", f"{shared}/events", headers=bearer("tok-bob")) as stream:
            assert stream.status_code == 200
        # Only the owner (or an admin) may delete; nobody else may touch her own session.
        assert (await http.delete(shared, headers=bearer("tok-carol"))).status_code == 404
        other = await http.post(f"{path}/inject", headers=bearer("tok-bob"), json=inject)
        assert other.status_code == 404
        assert (await http.delete(shared, headers=bearer("tok-root"))).status_code == 204


async def test_the_session_rate_limit_is_on_by_default() -> None:
    """Pins `pkg/attach/rate_limit.go` as a daemon runs it: POST /sessions is limited per
    caller unless the operator turns it off (burst 5, then 10 a minute)."""
    clock = FakeClock()
    async with client(AgentHost("agent", clock=clock)) as http:
        answers = [(await http.post("/sessions", headers=JSON)).status_code for _ in range(6)]
        assert answers == [201] * 5 + [429]
        clock.advance(6)  # one token back at 10 a minute
        assert (await http.post("/sessions", headers=JSON)).status_code == 201
        assert (await http.post("/sessions", headers=JSON)).status_code == 429
    async with client(AgentHost("agent", clock=clock, session_rate_limit=None)) as http:
        answers = [(await http.post("/sessions", headers=JSON)).status_code for _ in range(20)]
        assert set(answers) == {201}
    assert AgentHost("x").rate_limiter is not None
    assert AgentHost("x", session_rate_limit=SessionRateLimit(burst=1)).rate_limiter is not None


# --- the browser write guard -------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        ("https://attacker.invalid", 403),
        ("null", 403),  # a sandboxed page
        ("not a url", 403),
        ("http://localhost:3000", 201),
        ("https://LOCALHOST", 201),
        ("http://127.0.0.1:9", 201),
        ("http://[::1]:8080", 201),
        ("https://agent.test", 201),  # this listener itself (the scheme is not compared)
        ("http://agent.test:81", 403),  # another port is another listener
    ],
)
async def test_a_write_from_a_foreign_browser_origin_is_refused(
    http: httpx.AsyncClient, origin: str, status: int
) -> None:
    """Pins `pkg/attach/csrf.go` `browserWriteGuard` / `originAllowed`."""
    answer = await http.post("/sessions", headers={**JSON, "Origin": origin})
    assert answer.status_code == status, answer.text
    if status == 403:
        assert answer.text.startswith(f"cross-origin request rejected: Origin {json.dumps(origin)}")
    listed = await http.get("/sessions", headers={"Origin": origin})  # reads are not guarded
    assert listed.status_code == 200


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("application/json", 201),
        ("Application/JSON", 201),
        ("application/json; charset=utf-8", 201),
        ("application/json;", 201),  # Go ignores a trailing semicolon
        ("application/json; charset", 415),  # a parameter that is not key=value
        ("application/jsonx", 415),
        ("text/plain", 415),
        ("", 415),
    ],
)
async def test_a_write_is_json_as_mime_parsemediatype_reads_it(
    http: httpx.AsyncClient, content_type: str, status: int
) -> None:
    """Pins `pkg/attach/csrf.go` `isJSONContentType` (`mime.ParseMediaType`)."""
    headers = {"Content-Type": content_type} if content_type else {}
    answer = await http.post("/sessions", headers=headers)
    assert answer.status_code == status, answer.text
    if status == 415:
        assert answer.text.startswith("unsupported media type: state-changing attach endpoints")


async def test_the_write_guard_runs_after_the_token_check() -> None:
    """Pins `Server.Bind`'s order: the token middleware (401) before the write guard."""
    async with client(AgentHost("agent", tokens=TOKENS)) as http:
        answer = await http.post("/sessions", headers={"Origin": "https://attacker.invalid"})
        assert answer.status_code == 401


# --- the A2A discovery card --------------------------------------------------------------


async def test_a_host_with_a_description_serves_its_agent_card_without_auth() -> None:
    """Pins `pkg/attach/agentcard.go` `buildAgentCard` / `agentCardHandler` and
    `pkg/attach/server.go` `cardBypass`: public, protocol 0.3.0, skills sorted by id."""
    host = AgentHost(
        "triage",
        tokens=TOKENS,
        description="Triages <cluster> alerts",
        skills={"kubectl": "Reads the cluster", "alerts": "Reads the pager"},
    )
    async with client(host) as http:
        answer = await http.get(
            "/.well-known/agent-card.json", headers={"X-Forwarded-Proto": "https"}
        )
        assert answer.status_code == 200  # no token: the card is discovery metadata
        assert answer.headers["content-type"] == "application/json; charset=utf-8"
        assert answer.text.startswith('{\n  "protocolVersion": "0.3.0",\n  "name": "triage",')
        assert "\\u003ccluster\\u003e" in answer.text and answer.text.endswith("}\n")
        card = answer.json()
        assert card["url"] == "https://agent.test"
        assert card["capabilities"] == {
            "streaming": True,
            "pushNotifications": False,
            "stateTransitionHistory": False,
        }
        assert "securitySchemes" not in card  # per-caller tokens: see deriveSecurity below
        assert [s["id"] for s in card["skills"]] == ["alerts", "kubectl"]
        assert card["skills"][1] == {
            "id": "kubectl",
            "name": "kubectl",
            "description": "Reads the cluster",
            "tags": ["skill"],
        }
        head = await http.head("/.well-known/agent-card.json")
        assert head.status_code == 200 and head.content == b""
        post = await http.post("/.well-known/agent-card.json", headers=JSON)
        assert post.status_code == 405 and post.headers["allow"] == "GET, HEAD"
        # Everything else still needs the token.
        assert (await http.get("/sessions")).status_code == 401


async def test_the_card_url_is_the_forwarded_scheme_and_host_else_the_requests_own() -> None:
    """Pins `pkg/attach/agentcard.go` `resolveCardURL`: `X-Forwarded-Proto` and
    `X-Forwarded-Host` win over the request's scheme and Host, each on its own."""
    async with client(AgentHost("triage", description="Triages alerts")) as http:

        async def url(headers: dict[str, str]) -> str:
            answer = await http.get("/.well-known/agent-card.json", headers=headers)
            assert answer.status_code == 200, answer.text
            return str(answer.json()["url"])

        assert await url({}) == "http://agent.test"
        assert await url({"Host": "127.0.0.1:7001"}) == "http://127.0.0.1:7001"
        assert await url({"X-Forwarded-Host": "127.0.0.1:7002"}) == "http://127.0.0.1:7002"
        both = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "127.0.0.1:7003"}
        assert await url(both) == "https://127.0.0.1:7003"


async def test_a_created_sessions_url_is_built_from_the_host_it_was_reached_by(
    http: httpx.AsyncClient,
) -> None:
    """Pins `pkg/attach/handlers_create_session.go` `sessionURL`: scheme and the request's
    Host, then the qualified path; forwarded headers are not read there."""
    headers = {**JSON, "Host": "127.0.0.1:7004", "X-Forwarded-Host": "127.0.0.1:7005"}
    created = await http.post("/sessions", headers=headers)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["url"] == f"http://127.0.0.1:7004/sessions/{body['app']}/{body['sessionID']}"


async def test_every_session_route_answers_under_the_qualified_and_the_shortcut_form(
    http: httpx.AsyncClient,
) -> None:
    """Pins `pkg/attach/handlers.go` `routeSession`: each session endpoint is registered under
    `/sessions/{app}/{sid}` (`lookupQualifiedAuth`, which misses for another app's name) and
    `/sessions/{sid}` (`lookupShortcutAuth`), the same session either way."""
    qualified = await new_session(http)
    shortcut = "/sessions/" + qualified.rsplit("/", 1)[1]
    other_app = qualified.replace("/core-agent/", "/another-app/")
    for path in (qualified, shortcut):
        said = await http.post(f"{path}/inject", headers=JSON, json={"message": "hi"})
        assert said.status_code == 200, (path, said.text)
        woke = await http.post(f"{path}/wake", headers=JSON, json={})
        assert woke.status_code in (200, 202), (path, woke.text)
    missed = await http.post(f"{other_app}/inject", headers=JSON, json={"message": "hi"})
    assert missed.status_code == 404, missed.text
    assert (await http.delete(other_app, headers=JSON)).status_code == 404
    assert (await http.delete(shortcut, headers=JSON)).status_code == 204
    assert (await http.delete(qualified, headers=JSON)).status_code == 404  # gone under both forms


async def test_a_host_without_a_description_serves_no_card() -> None:
    """Pins `AgentCardConfig.Enabled`: no description, no card (and no auth bypass)."""
    async with client(AgentHost("agent", tokens=TOKENS)) as http:
        assert (await http.get("/.well-known/agent-card.json")).status_code == 401
    async with client(AgentHost("agent")) as http:
        assert (await http.get("/.well-known/agent-card.json")).status_code == 404
    open_card = AgentHost("agent", description="Answers")
    async with client(open_card) as http:
        assert "securitySchemes" not in (await http.get("/.well-known/agent-card.json")).json()


@pytest.mark.parametrize("via", ["inject", "wake"])
async def test_wake_loop_frames_even_one_drained_message_as_the_inbox_bundle(via: str) -> None:
    """Pins `pkg/runner/wakeloop.go` `WakeLoop` (every turn is `Run(ctx, "")`) with
    `pkg/agent/inbox.go` `prependInboxMessages`: with no operator text the drained batch is
    the turn, framed by `formatInboxBundle("[Inbox]", ...)` even when it holds one message.
    A behaviour still gets the message itself as `turn.prompt`."""
    seen: list[tuple[str, str, tuple[str, ...]]] = []

    async def look(turn: Turn) -> None:
        seen.append((turn.prompt, turn.model_prompt, turn.messages))
        await turn.say("ok")

    async with client(AgentHost("agent", behavior=look, session_rate_limit=None)) as http:
        path = await new_session(http)

        async def ask() -> None:
            if via == "inject":
                sent = await http.post(f"{path}/inject", json={"message": "hello"}, headers=JSON)
            else:
                sent = await http.post(f"{path}/wake", json={"prompt": "hello"}, headers=JSON)
            assert sent.status_code == 200

        got = await frames(http, f"{path}/events", lambda e, _: e == "turn-complete", after=ask)
    users = [
        p["event"]["Content"]["parts"][0]["text"]
        for e, p in got
        if e == "agent" and p["event"]["Author"] == "user"
    ]
    assert len(users) == 1
    assert users[0].startswith("[Inbox]\n- hello\n\nHow to handle the bundle:\n- Variants of ")
    assert users[0].endswith("treat the bundle as the next request and respond once.")
    assert seen == [("hello", users[0], ("hello",))]


@pytest.mark.parametrize("queued", [INBOX_CAP, INBOX_CAP + 1])
@pytest.mark.parametrize("woken_by", ["inject", "wake"])
async def test_an_inbox_past_the_daemons_cap_drops_its_oldest_message(
    queued: int, woken_by: str
) -> None:
    """Pins `pkg/agent/inbox.go` `inbox.push`: past `defaultInboxCap` (256) queued messages
    the oldest is dropped (never dequeued) and the inject still answers 200; `wake: false`
    pushes to the same queue (`Agent.injectAs` with the quiet mode of `QueueAsContextWithID`),
    so it counts the same. The messages queue while a turn runs (part of the inbox is
    spent on it): waking and quiet ones alternating, or all quiet and then one `POST /wake`."""
    release = asyncio.Event()
    drained: list[tuple[str, ...]] = []

    async def held(turn: Turn) -> None:
        drained.append(turn.messages)
        if len(drained) == 1:
            await release.wait()  # the first turn runs while the inbox fills
        await turn.say("ok")

    host = AgentHost("agent", behavior=held, session_rate_limit=None)
    answered: list[str] = []
    async with client(host) as http:
        path = await new_session(http)

        async def fill() -> None:
            first = await http.post(f"{path}/inject", headers=JSON, json={"message": "first"})
            answered.append(first.json()["prompt_id"])
            for _ in range(100):  # bounded: the first turn starts within a few loop turns
                if drained:
                    break
                await asyncio.sleep(0)
            for i in range(queued):
                wake = woken_by == "inject" and i % 2 == 0
                sent = await http.post(
                    f"{path}/inject", headers=JSON, json={"message": f"m{i}", "wake": wake}
                )
                assert sent.status_code == 200, sent.text
                assert sent.json()["woke"] is wake
                answered.append(sent.json()["prompt_id"])
            if woken_by == "wake":
                assert (await http.post(f"{path}/wake", headers=JSON)).status_code == 200
            release.set()

        filling: list[asyncio.Task[None]] = []
        turns_done = 0

        def second_usage(event: str, payload: dict[str, Any]) -> bool:
            nonlocal turns_done
            turns_done += event == "usage-update" and "last_turn" in payload
            return turns_done == 2

        async def start() -> None:
            filling.append(asyncio.create_task(fill()))

        got = await frames(http, f"{path}/events", second_usage, after=start)
        await filling[0]
    await host.aclose()
    kept = [f"m{i}" for i in range(queued)][-INBOX_CAP:]
    assert drained == [("first",), tuple(kept)]
    assert len(drained[1]) == INBOX_CAP
    states = [(p["state"], p["prompt_id"]) for e, p in got if e == "inbox"]
    assert [i for s, i in states if s == "queued"] == answered  # every inject was queued
    dequeued = [i for s, i in states if s == "dequeued"]
    assert dequeued == answered[:1] + answered[1:][-INBOX_CAP:]  # the dropped one never was


# --- the hub registry --------------------------------------------------------------------


ENDPOINT_INVALID = "attach: peer Endpoint must be an absolute http or https URL with a host: "


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/peers", "GET, HEAD, POST"),  # the interop harness's put_peers_405
        ("DELETE", "/peers", "GET, HEAD, POST"),
        ("GET", "/peers/reg-1", "DELETE"),
        ("GET", "/peers/reg-1/heartbeat", "POST"),
        ("PUT", "/sessions", "GET, HEAD, POST"),
        ("POST", "/whoami", "GET, HEAD"),
        ("POST", "/sessions/core-agent/s-1/events", "GET, HEAD"),
        # Both `DELETE /sessions/{app}/{sid}` and `POST /sessions/{sid}/inject` match.
        ("GET", "/sessions/s-1/inject", "DELETE, POST"),
    ],
)
async def test_a_method_no_route_takes_is_405_allowing_every_method_the_path_has(
    method: str, path: str, allow: str
) -> None:
    """Pins Go's `http.ServeMux` (`matchingMethods`: the methods of every pattern matching
    the path, HEAD with GET, sorted; `http.Error`'s body) over the daemon's patterns
    (`peerHandlers.register`, `handlers.register`, `routeSession`)."""
    hub = AgentHost("hub", registry=PeerRegistry())
    async with client(hub) as http:
        answer = await http.request(method, path, headers=JSON)
    assert answer.status_code == 405
    assert answer.headers["allow"] == allow
    assert answer.text == "Method Not Allowed\n"
    assert answer.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"endpoint": "http://a:1"}, "attach: peer Name is required\n"),
        ({"name": "", "endpoint": "http://a:1"}, "attach: peer Name is required\n"),
        ({"name": "a"}, "attach: peer Endpoint is required\n"),
        ({"name": "a", "endpoint": ""}, "attach: peer Endpoint is required\n"),
        ({"name": "a", "endpoint": "ftp://a:1"}, ENDPOINT_INVALID + '"ftp://a:1": '),
        ({"name": "a", "endpoint": "http://"}, ENDPOINT_INVALID + '"http://": '),
        ({"name": "a", "endpoint": "ftp://u:pw@a:1"}, ENDPOINT_INVALID + '"ftp://u:***@a:1": '),
    ],
)
async def test_a_registration_is_refused_400_in_the_daemons_words(
    body: dict[str, Any], said: str
) -> None:
    """Pins `pkg/attach/peers_handlers.go` `registerPeer` (a refused registration is 400 with
    the error's text) and `pkg/attach/peers.go` `RegisterOwned` / `validatePeerEndpoint`
    (`ErrPeerNameRequired`, `ErrPeerEndpointRequired`, `ErrPeerEndpointInvalid` and the
    endpoint `%q`; the host masks a userinfo password in it and says what is wrong)."""
    hub = AgentHost("hub", registry=PeerRegistry(), session_rate_limit=None)
    async with client(hub) as http:
        answer = await http.post("/peers", headers=JSON, json=body)
        assert answer.status_code == 400
        assert answer.text.startswith(said), answer.text
        assert "pw" not in answer.text
        assert (await http.get("/peers")).json() == {"peers": []}


async def test_only_an_owner_or_an_admin_deregisters_and_an_unknown_id_is_204() -> None:
    """Pins `pkg/attach/peers_handlers.go` `deregisterPeer` with `canManage` (an admin or the
    owner; anyone else is 403 in the daemon's words, and the registration stays) and an
    unknown id answered 204 (`Lookup` misses: nothing to do)."""
    hub = AgentHost("hub", registry=PeerRegistry(), tokens=TOKENS, session_rate_limit=None)
    async with client(hub) as http:
        rids = []
        for _ in range(2):
            made = await http.post(
                "/peers", headers=bearer("tok-bob"), json={"name": "b", "endpoint": "http://b:1"}
            )
            rids.append(made.json()["registration_id"])
        refused = await http.delete(f"/peers/{rids[1]}", headers=bearer("tok-alice"))
        assert refused.status_code == 403
        assert refused.text == (
            "forbidden: peer registrations may only be deregistered by their owner or an admin\n"
        )
        assert [
            p["name"]
            for p in (await http.get("/peers", headers=bearer("tok-alice"))).json()["peers"]
        ] == ["b"]
        assert (
            await http.delete(f"/peers/{rids[1]}", headers=bearer("tok-root"))
        ).status_code == 204
        assert (await http.get("/peers", headers=bearer("tok-alice"))).json() == {"peers": []}
        for rid in (rids[0], rids[1], "reg-unknown"):  # replaced, deleted, never made
            gone = await http.delete(f"/peers/{rid}", headers=bearer("tok-alice"))
            assert gone.status_code == 204


@pytest.mark.parametrize(
    ("token", "said"),
    [
        (None, '{"identity":"anon","source":"anonymous"}\n'),
        ("tok-alice", '{"identity":"alice","source":"bearer"}\n'),
        ("tok-root", '{"identity":"root","admin":true,"source":"bearer"}\n'),
    ],
)
async def test_whoami_leaves_admin_out_for_a_caller_who_is_not_one(
    token: str | None, said: str
) -> None:
    """Pins `pkg/attach/handlers_whoami.go` `doWhoAmI` (`whoAmIResponse`: `admin` is
    `omitempty`, in field order identity, admin, source) on an open host and a protected one,
    `source` as `pkg/attach/caller_middleware.go` `credentialSource` tags it (anonymous for the
    open host's authenticator, bearer for a token's)."""
    host = AgentHost("agent", tokens=TOKENS if token else None, session_rate_limit=None)
    async with client(host) as http:
        answer = await http.get("/whoami", headers=bearer(token) if token else {})
        assert answer.status_code == 200
        assert answer.text == said


async def test_a_new_stream_gets_the_boot_snapshots_then_only_the_event_logs_frames(
    http: httpx.AsyncClient,
) -> None:
    """Pins `pkg/attach/broadcaster.go` `deliverBootFrames` (capabilities, the status snapshot
    of `statusSnapshot`, the usage snapshot of `usageSnapshot` with no `last_turn`), then
    `replayThenTail` (the log's entries only): a finished turn's typed frames (`inbox`,
    `status-update` streaming, `turn-complete`, `usage-update` with `last_turn`) went out
    live through `sendTyped` and are not replayed."""
    path = await new_session(http)
    logged = seqs(await one_turn(http, path))
    got = await frames(http, f"{path}/events", lambda e, p: e == "agent" and p["seq"] == logged[-1])
    assert [e for e, _ in got] == [
        "capabilities",
        "status-update",
        "usage-update",
        "agent",
        "agent",
    ]
    assert got[1][1] == {"model": "sim-model", "turn_state": "idle"}
    assert "last_turn" not in got[2][1] and got[2][1]["turns_total"] == 1
    assert seqs(got) == logged


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"X-Attach-Token": "tok-alice"}, 201),
        ({"Authorization": "Bearer tok-alice"}, 201),
        ({"Authorization": "Bearer   tok-alice  "}, 201),  # TrimSpace after the prefix
        ({"X-Attach-Token": "tok-alice", "Authorization": "Bearer wrong"}, 201),
        ({"X-Attach-Token": "wrong", "Authorization": "Bearer tok-alice"}, 401),
        ({"Authorization": "Basic tok-alice"}, 401),
        # The prefix is "Bearer " as written: a daemon refuses a lower-case scheme.
        ({"Authorization": "bearer tok-alice"}, 401),
        ({"Authorization": "BEARER tok-alice"}, 401),
        ({"Authorization": "Bearer\ttok-alice"}, 401),
        ({"Authorization": "Bearer"}, 401),
        ({"Authorization": "tok-alice"}, 401),
        ({}, 401),
    ],
)
async def test_the_token_is_read_from_x_attach_token_first_then_the_bearer_header(
    headers: dict[str, str], status: int
) -> None:
    """Pins `pkg/auth/authenticator.go` `extractToken` (a non-empty `X-Attach-Token` decides
    alone, else `Authorization: Bearer <token>` trimmed, the prefix matched as written) with
    `BearerTokenAuth.Authenticate` (an unknown or missing token is 401)."""
    host = AgentHost("agent", tokens=TOKENS, session_rate_limit=None)
    async with client(host) as http:
        answer = await http.post("/sessions", headers={**JSON, **headers})
        assert answer.status_code == status, answer.text
        if status == 201:
            assert answer.json()["user"] == "alice"


# --- session listing and the shortcut form -----------------------------------------------


async def test_a_caller_lists_only_the_sessions_it_may_read() -> None:
    """Pins `pkg/attach/registry.go` `SessionRegistry.ListAuthorized` (what `listSessions`
    lists with per-caller auth): each session the caller may read (`Authorize`,
    `ActionSessionRead`), an admin sees every one, the startup session included."""
    async with client(AgentHost("agent", tokens=TOKENS, session_rate_limit=None)) as http:
        alices = await new_session(http, bearer("tok-alice"))
        shared = await http.post(
            "/sessions", headers=bearer("tok-bob"), json={"viewers": ["carol"]}
        )
        bobs = f"/sessions/{shared.json()['app']}/{shared.json()['sessionID']}"

        async def listed(token: str) -> list[str]:
            answer = await http.get("/sessions", headers=bearer(token))
            assert answer.status_code == 200, answer.text
            rows = answer.json()["sessions"]
            return sorted(f"/sessions/{r['app']}/{r['sessionID']}" for r in rows)

        assert await listed("tok-alice") == [alices]
        assert await listed("tok-bob") == [bobs]
        assert await listed("tok-carol") == [bobs]  # a viewer reads
        assert await listed("tok-root") == sorted([alices, bobs, "/sessions/core-agent/default"])


async def test_an_error_is_plain_text_with_nosniff_as_http_error_writes_it(
    http: httpx.AsyncClient,
) -> None:
    """Pins net/http `http.Error`, which every daemon refusal goes through: the message and a
    newline as `text/plain; charset=utf-8`, with `X-Content-Type-Options: nosniff`."""
    answer = await http.get("/sessions/core-agent/s-none/events")
    assert answer.status_code == 404
    assert answer.text == "session not found\n"
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert answer.headers["x-content-type-options"] == "nosniff"


async def test_the_sessions_in_memory_are_listed_by_app_then_user_then_id() -> None:
    """Pins `pkg/attach/registry.go` `SessionRegistry.List` (`sort.Slice` by AppName, UserID,
    SessionID), the in-memory half of `listSessions`, whatever order they were made in."""
    async with client(AgentHost("agent", tokens=TOKENS, session_rate_limit=None)) as http:
        for token in ("tok-carol", "tok-alice", "tok-bob", "tok-alice", "tok-carol"):
            await new_session(http, bearer(token))
        answer = await http.get("/sessions", headers=bearer("tok-root"))
        assert answer.status_code == 200, answer.text
        rows = [(r["app"], r["user"], r["sessionID"]) for r in answer.json()["sessions"]]
    assert len(rows) == 6  # five and the startup session
    assert rows == sorted(rows), rows
    users = [user for _, user, sid in rows if sid != "default"]
    assert users == ["alice", "alice", "bob", "carol", "carol"]


async def test_the_shortcut_form_resumes_a_stored_session_for_a_caller_who_may_read_it(
    tmp_path: Path,
) -> None:
    """Pins `pkg/attach/handlers.go` `lookupShortcutAuth` with `registry.go`
    `SessionRegistry.LookupSingle` (`lookupSingleGated`): `/sessions/{sid}` finds a session by
    its id alone; on a miss the stored row is gated first (a caller who may not read it gets
    the 404 of a miss and causes no resume), then the session is resumed."""
    store = tmp_path / "sessions.sqlite3"
    first = AgentHost("agent", tokens=TOKENS, store=store, session_rate_limit=None)
    async with client(first) as http:
        qualified = await new_session(http, bearer("tok-alice"))
        sid = qualified.rsplit("/", 1)[1]
        live = await http.post(
            f"/sessions/{sid}/inject", headers=bearer("tok-alice"), json={"message": "a"}
        )
        assert live.status_code == 200 and live.json()["session"] == sid
    await first.aclose()
    again = AgentHost("agent", tokens=TOKENS, store=store, session_rate_limit=None)
    async with client(again) as http:
        denied = await http.post(
            f"/sessions/{sid}/inject", headers=bearer("tok-bob"), json={"message": "b"}
        )
        assert (denied.status_code, denied.text) == (404, "session not found\n")
        assert sid not in again.sessions  # the gate ran before any resume
        resumed = await http.post(
            f"/sessions/{sid}/inject", headers=bearer("tok-alice"), json={"message": "c"}
        )
        assert resumed.status_code == 200, resumed.text
        assert sid in again.sessions
        deleted = await http.delete(f"/sessions/{sid}", headers=bearer("tok-alice"))
        assert deleted.status_code == 204
        gone = await http.post(
            f"/sessions/{sid}/inject", headers=bearer("tok-alice"), json={"message": "d"}
        )
        assert gone.status_code == 404
    await again.aclose()


async def test_the_shortcut_form_resumes_only_sessions_of_the_hosts_own_app(
    tmp_path: Path,
) -> None:
    """Pins `SessionRegistry.LookupSingle`'s resume under one fixed app (`resumerDefaultApp`,
    the daemon's app): a shortcut miss resumes a stored session of the host's `app_name`
    only; one stored under another app is resumed by its qualified form alone (`Lookup`).
    Go's fixed app is "core-agent"; the host's is its own `app_name` (docs/differences.md)."""
    store = tmp_path / "sessions.sqlite3"
    old = AgentHost("agent", app_name="old", store=store, session_rate_limit=None)
    async with client(old) as http:
        theirs = await new_session(http)
    await old.aclose()
    new = AgentHost("agent", app_name="new", store=store, session_rate_limit=None)
    async with client(new) as http:
        ours = await new_session(http)
    await new.aclose()
    again = AgentHost("agent", app_name="new", store=store, session_rate_limit=None)
    inject = {"message": "hi"}
    async with client(again) as http:
        their_sid, our_sid = theirs.rsplit("/", 1)[1], ours.rsplit("/", 1)[1]
        missed = await http.post(f"/sessions/{their_sid}/inject", headers=JSON, json=inject)
        assert (missed.status_code, missed.text) == (404, "session not found\n")
        assert their_sid not in again.sessions
        resumed = await http.post(f"/sessions/{our_sid}/inject", headers=JSON, json=inject)
        assert resumed.status_code == 200, resumed.text
        assert (await http.post(f"{theirs}/inject", headers=JSON, json=inject)).status_code == 200
        assert theirs.startswith("/sessions/old/")
        # Once in memory, the shortcut finds it by id whatever its app, as LookupSingle does.
        found = await http.post(f"/sessions/{their_sid}/inject", headers=JSON, json=inject)
        assert found.status_code == 200
    await again.aclose()


# --- the card's skills and security --------------------------------------------------------


async def test_the_cards_skills_are_the_agents_named_skills_sorted_by_id() -> None:
    """Pins `pkg/attach/agentcard.go` `registrySkills` (a skill without a name is left out;
    id and name are the skill's name, tagged `skill`) and `mergeSkills` (sorted by id as
    `sort.Strings` sorts: bytes, so capitals first; no `examples` when there are none)."""
    skills = {"b": "Bee", "é": "Accented", "B": "Capital", "a": "Ay", "": "Nameless"}
    async with client(AgentHost("agent", description="Answers", skills=skills)) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
    assert [s["id"] for s in card["skills"]] == ["B", "a", "b", "é"]
    first = {"id": "B", "name": "B", "description": "Capital", "tags": ["skill"]}
    assert card["skills"][0] == first


# --- 401: the per-caller answer -------------------------------------------------------------

MULTISESSION_REALM = 'Bearer realm="attach-multisession"'


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/sessions"),
        ("POST", "/sessions"),
        ("POST", "/sessions/core-agent/default/inject"),
        ("POST", "/sessions/default/wake"),
        ("GET", "/whoami"),
        ("GET", "/peers"),
    ],
)
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"X-Attach-Token": "wrong"}, {"Authorization": "x"}],
)
async def test_a_caller_without_a_valid_token_gets_the_per_caller_401(
    method: str, path: str, headers: dict[str, str]
) -> None:
    """Pins `pkg/attach/caller_middleware.go` `callerMiddlewareWithConfig` (per-caller
    `BearerTokenAuth`, enforceAuthentication) and `writeUnauthorized` for
    `auth.ErrUnauthenticated`: a host's `tokens` are a per-caller daemon's users, so a missing
    or unknown token is `realm="attach-multisession"`, "unauthorized: no valid credential".
    (`checkAttachToken`'s `realm="attach"` is a single shared `--attach-token`'s answer; a
    host has no such token.)"""
    host = AgentHost("agent", tokens=TOKENS, registry=PeerRegistry(), session_rate_limit=None)
    async with client(host) as http:
        answer = await http.request(method, path, headers={**JSON, **headers})
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == MULTISESSION_REALM
        assert answer.headers["content-type"] == "text/plain; charset=utf-8"
        assert answer.text == "unauthorized: no valid credential\n"
        allowed = await http.request(method, path, headers=bearer("tok-root"))
        assert allowed.status_code != 401


@pytest.mark.parametrize("tokens", [TOKENS, None], ids=["per-caller", "open"])
async def test_a_caller_asserting_another_identity_is_refused(
    tokens: dict[str, Identity] | None,
) -> None:
    """Pins `callerMiddlewareWithConfig`'s proxy path and `resolveProxyAssertion`: a request
    carrying `X-Asserted-Caller` is 401 (`writeUnauthorized`, `ErrAssertedCallerForbidden`)
    unless its caller may proxy; a host has no proxy allowlist, and an open host's anonymous
    caller (`AnonymousAuth`) cannot proxy either. The credential is checked first."""
    host = AgentHost("agent", tokens=tokens, session_rate_limit=None)
    valid = bearer("tok-root") if tokens else JSON
    async with client(host) as http:
        for method, path in (("GET", "/sessions"), ("POST", "/sessions"), ("GET", "/whoami")):
            asserted = {**valid, "X-Asserted-Caller": "bob"}
            answer = await http.request(method, path, headers=asserted)
            assert answer.status_code == 401, answer.text
            assert answer.headers["www-authenticate"] == MULTISESSION_REALM
            assert answer.text == (
                "asserted-caller header rejected: caller is not permitted to proxy\n"
            )
            empty = await http.request(method, path, headers={**valid, "X-Asserted-Caller": ""})
            assert empty.status_code in (200, 201)  # an empty header asserts nothing
        assert len(host.sessions) == 2  # the refused creations made none
        if tokens:
            stranger = {**JSON, "Authorization": "Bearer wrong", "X-Asserted-Caller": "bob"}
            refused = await http.get("/sessions", headers=stranger)
            assert refused.text == "unauthorized: no valid credential\n"


async def test_the_card_declares_no_security_scheme_for_per_caller_tokens() -> None:
    """Pins `pkg/attach/agentcard.go` `deriveSecurity`: the card declares `bearer` for the
    transport token (`AuthConfig.BearerToken`) and `mtls` for a client CA, nothing for
    per-caller users; a host's `tokens` are per-caller, so its card declares no scheme, and
    no `security` either."""
    host = AgentHost("agent", tokens=TOKENS, description="Answers")
    async with client(host) as http:
        answer = await http.get("/.well-known/agent-card.json")
    assert answer.status_code == 200
    card = answer.json()
    assert "securitySchemes" not in card and "security" not in card
    assert list(card) == [
        "protocolVersion",
        "name",
        "description",
        "url",
        "version",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
    ]
