"""AttachClient: every call against respx (codes, headers, token hygiene), then a real app."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from coreagent_sdk import AttachClient, SessionCreated
from coreagent_sdk._attach import _wire as wire
from coreagent_sdk.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    NotImplementedByServerError,
    PayloadTooLargeError,
    ProtocolError,
    ServerError,
    TransportFailure,
    UnsupportedMediaTypeError,
)
from simulator import Fleet, behaviors

from .conftest import load_fixture

BASE = "http://daemon.test:8844"
TOKEN = "tok-s3cret-value"
SESSION = "/sessions/core-agent/s-1a2b3c"


@pytest.fixture
def mock() -> respx.MockRouter:
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        yield router


@pytest.fixture
async def client() -> AttachClient:
    async with AttachClient(BASE, token=TOKEN) as made:
        yield made


async def test_new_session_posts_json_with_the_bearer_token(mock, client) -> None:
    route = mock.post("/sessions").respond(201, json=load_fixture("rest-create-session-v1.json"))
    created = await client.new_session()
    assert created == SessionCreated(
        "core-agent",
        "alice@example.com",
        "s-1a2b3c",
        "http://daemon.example.com:8844/sessions/core-agent/s-1a2b3c",
    )
    request = route.calls.last.request
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["content-type"] == "application/json"  # even with no body
    assert request.content == b""


async def test_new_session_on_a_daemon_without_multi_session_names_the_setting(
    mock, client
) -> None:
    mock.post("/sessions").respond(501, text="not implemented\n")
    with pytest.raises(NotImplementedByServerError, match=r"multi_session\.enabled") as info:
        await client.new_session()
    assert info.value.status_code == 501


async def test_a_401_is_an_authentication_error_with_the_echoed_token_scrubbed(
    mock, client
) -> None:
    mock.post("/sessions").respond(
        401, text=f"bad token {TOKEN}", headers={"WWW-Authenticate": 'Bearer realm="attach"'}
    )
    with pytest.raises(AuthenticationError) as info:
        await client.new_session()
    assert TOKEN not in str(info.value) and TOKEN not in info.value.body
    assert "[redacted]" in info.value.body
    assert info.value.status_code == 401


async def test_an_error_body_is_cut_to_a_bounded_excerpt(mock, client) -> None:
    mock.get("/sessions").respond(500, text="x" * 100_000)
    with pytest.raises(ServerError) as info:
        await client.list_sessions()
    assert len(info.value.body) <= 512 + 3
    assert len(str(info.value)) < 1000


async def test_list_sessions_reads_both_fixture_versions(mock, client) -> None:
    mock.get("/sessions").respond(200, json=load_fixture("rest-sessions-list-v2.json"))
    sessions = await client.list_sessions()
    assert [s.session_id for s in sessions] == ["s-1a2b3c", "s-9z8y7x"]
    assert sessions[0].title == "Debug the payment webhook retries" and sessions[1].title is None


async def test_inject_sends_the_message_and_reads_the_answer(mock, client) -> None:
    route = mock.post(f"{SESSION}/inject").respond(200, json=load_fixture("rest-inject-v2.json"))
    result = await client.inject(SESSION, "second alert corroborates the first", wake=True)
    assert result.prompt_id == "0199c3a1-6b2e-7f04-9c11-2d8ae4f01b73"
    request = route.calls.last.request
    assert json.loads(request.content) == {
        "message": "second alert corroborates the first",
        "wake": True,
    }
    assert request.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, BadRequestError),
        (404, NotFoundError),
        (413, PayloadTooLargeError),
        (415, UnsupportedMediaTypeError),
        (503, ServerError),
    ],
)
async def test_inject_maps_each_status_to_its_error(mock, client, status, error) -> None:
    mock.post(f"{SESSION}/inject").respond(status, text="no")
    with pytest.raises(error) as info:
        await client.inject(SESSION, "hi")
    assert info.value.status_code == status
    assert f"answered {status}" in str(info.value)


async def test_events_declares_the_protocol_version_and_yields_typed_frames(mock, client) -> None:
    body = (
        wire.encode_sse("capabilities", load_fixture("capabilities-v1.4.0.json"))
        + b"event: brand-new\ndata: {}\n\n"
        + b"event: agent\ndata: {not json\n\n"
        + wire.encode_sse("wake", load_fixture("wake-v1.7.0.json"))
    )
    route = mock.get(f"{SESSION}/events").respond(
        200,
        content=body,
        headers={"content-type": "text/event-stream", "X-Attach-Protocol-Version": "1.10.0"},
    )
    async with client.events(SESSION, since=4) as frames:
        got = [frame async for frame in frames]
    assert [type(f).__name__ for f in got] == ["Capabilities", "Wake"]
    request = route.calls.last.request
    assert request.headers["x-attach-protocol-version"] == "1.10.0"
    assert request.url.params["since"] == "4"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"


async def test_events_refuses_a_daemon_of_another_major_version(mock, client) -> None:
    mock.get(f"{SESSION}/events").respond(
        200,
        content=b"",
        headers={"content-type": "text/event-stream", "X-Attach-Protocol-Version": "2.0.0"},
    )
    with pytest.raises(ProtocolError, match=r"speaks protocol 2\.0\.0"):
        async with client.events(SESSION):
            pass


@pytest.mark.parametrize(
    ("status", "error"), [(404, NotFoundError), (409, ConflictError), (400, BadRequestError)]
)
async def test_events_maps_refusals_to_errors(mock, client, status, error) -> None:
    mock.get(f"{SESSION}/events").respond(status, text="refused")
    with pytest.raises(error):
        async with client.events(SESSION):
            pass


@pytest.mark.parametrize(
    "path",
    [
        "http://evil.test/sessions/x",
        "@evil.test/sessions/x",
        "/sessions//evil",
        "/sessions/a?x=1",
        "/other/a",
    ],
)
async def test_a_session_path_cannot_change_the_host_or_smuggle_a_query(client, path) -> None:
    with pytest.raises(ValueError, match="session path must look like"):
        await client.inject(path, "hi")


async def test_list_peers_sends_one_label_parameter_per_pair(mock, client) -> None:
    route = mock.get("/peers").respond(200, json={"peers": []})
    assert await client.list_peers({"env": "prod", "cluster": "prod-1"}) == ()
    assert route.calls.last.request.url.params.get_list("label") == ["cluster=prod-1", "env=prod"]


async def test_list_peers_on_a_daemon_without_a_registry_points_at_the_hub(mock, client) -> None:
    mock.get("/peers").respond(404, text="404 page not found")
    with pytest.raises(NotFoundError, match="point at the fleet's hub"):
        await client.list_peers()


async def test_register_peer_sends_the_record_and_reads_it_back(mock, client) -> None:
    record = {
        "registration_id": "r-1",
        "name": "prod-1",
        "endpoint": "http://prod-1:8844",
        "labels": {"cluster": "prod-1"},
        "registered_at": "2026-08-19T14:32:05Z",
        "last_heartbeat": "2026-08-19T14:32:05Z",
        "lease_expires_at": "2026-08-19T14:33:05Z",
    }
    route = mock.post("/peers").respond(201, json=record)
    got = await client.register_peer("prod-1", "http://prod-1:8844", {"cluster": "prod-1"}, ttl=60)
    assert got.to_dict() == record
    assert json.loads(route.calls.last.request.content) == {
        "name": "prod-1",
        "endpoint": "http://prod-1:8844",
        "labels": {"cluster": "prod-1"},
        "heartbeat_ttl_sec": 60,
    }


async def test_register_peer_refuses_a_hostile_endpoint_without_sending(mock, client) -> None:
    route = mock.post("/peers").respond(201, json={})
    with pytest.raises(ValueError, match="'javascript:alert\\(1\\)' for peer 'x' is refused"):
        await client.register_peer("x", "javascript:alert(1)")
    assert not route.called


async def test_heartbeat_of_a_forgotten_registration_says_to_register_again(mock, client) -> None:
    mock.post("/peers/r-1/heartbeat").respond(404, text="unknown")
    with pytest.raises(NotFoundError, match="register again"):
        await client.heartbeat("r-1")


async def test_deregister_accepts_204_and_maps_403(mock, client) -> None:
    mock.delete("/peers/r-1").respond(204)
    mock.delete("/peers/r-2").respond(403, text="not yours")
    assert await client.deregister("r-1") is None
    with pytest.raises(ForbiddenError):
        await client.deregister("r-2")


async def test_whoami_reads_the_fixture(mock, client) -> None:
    mock.get("/whoami").respond(200, json=load_fixture("rest-whoami-v1.json"))
    who = await client.whoami()
    assert (who.identity, who.admin, who.proxy_by) == (
        "release-bot@example.com",
        True,
        "gateway-svc@example.com",
    )


async def test_an_answer_that_is_not_json_is_a_protocol_error(mock, client) -> None:
    mock.get("/whoami").respond(200, text="<html>login</html>")
    with pytest.raises(ProtocolError, match="is not JSON"):
        await client.whoami()


async def test_an_unreachable_daemon_is_a_transport_failure_naming_the_url(mock, client) -> None:
    mock.get("/whoami").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(TransportFailure, match=r"could not reach http://daemon\.test:8844"):
        await client.whoami()


def test_the_repr_never_shows_the_token() -> None:
    shown = repr(AttachClient(BASE, token=TOKEN))
    assert TOKEN not in shown and "token=set" in shown


@pytest.mark.parametrize("url", ["javascript:alert(1)", "daemon:8844", "/relative", "http://"])
def test_a_base_url_that_is_not_absolute_http_is_refused(url) -> None:
    with pytest.raises(ValueError, match=r"attach: URL .* is refused"):
        AttachClient(url)


async def test_a_whole_turn_through_the_streaming_transport() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.reply("cluster is healthy"))
    async with AttachClient("http://prod-1.sim", transport=fleet.transport) as client:
        session = await client.new_session()
        async with client.events(session) as frames:
            injected = await client.inject(session, "how is the cluster?")
            kinds: list[str] = []
            async for frame in frames:
                kinds.append(type(frame).__name__)
                if isinstance(frame, wire.UsageUpdate):
                    break
        listed = await client.list_sessions()
    assert injected.session == session.session_id
    assert kinds == [
        "Capabilities",
        "StatusUpdate",
        "Inbox",
        "Inbox",
        "StatusUpdate",
        "AgentFrame",
        "AgentFrame",
        "TurnComplete",
        "StatusUpdate",
        "UsageUpdate",
    ]
    assert [s.session_id for s in listed] == ["default", session.session_id]
    await fleet.aclose()


async def test_events_can_keep_only_some_event_types(mock, client) -> None:
    body = (
        wire.encode_sse("capabilities", load_fixture("capabilities-v1.4.0.json"))
        + wire.encode_sse("wake", load_fixture("wake-v1.7.0.json"))
        + b'data: {"seq": 1, "event": {"Author": "a"}}\n\n'
    )
    mock.get(f"{SESSION}/events").respond(
        200, content=body, headers={"content-type": "text/event-stream"}
    )
    async with client.events(SESSION, types={"agent"}) as frames:
        got = [frame async for frame in frames]
    assert [type(f).__name__ for f in got] == ["AgentFrame"]


async def test_a_host_with_no_route_is_not_chained_to_itself() -> None:
    from coreagent_sdk import RoutingTransport
    from coreagent_sdk.errors import NoRouteError

    http = httpx.AsyncClient(transport=RoutingTransport())
    async with AttachClient("http://nowhere.sim", http_client=http) as attach:
        with pytest.raises(NoRouteError) as info:
            await attach.whoami()
    await http.aclose()
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__ or info.value.__context__ is None
