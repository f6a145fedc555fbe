"""A host answering the A2A JSON-RPC transport beside its attach routes (`AgentHost(a2a=True)`).

The client in every test is the A2A SDK's own (`a2a.client`), in-process through the
SDK's streaming ASGI transport; one test runs it in another process over a loopback
socket. Hostile callers speak raw JSON-RPC with httpx.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("a2a")

from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from coreagent_sdk import ASGITransport
from coreagent_sdk.host import AgentHost, Identity, MultiAgentHost, Turn
from tests.canary import CANARY

ROOT = Path(__file__).resolve().parent.parent
BASE = "http://agent.test"
RPC = {"Content-Type": "application/json", "A2A-Version": "1.0"}
VAR = "COREAGENT_TEST_A2A_TOKEN"


async def chunks_then_answer(turn: Turn) -> None:
    for piece in ("Check", "ing ", "nodes"):
        await turn.chunk(piece)
    await turn.narrate("Asking kubectl.", tool="kubectl", args={"get": "nodes"})
    await turn.say(f"All nodes answer: {turn.prompt}")


async def forever(turn: Turn) -> None:
    await turn.chunk("started")
    await asyncio.Event().wait()


def _http(host: AgentHost, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=ASGITransport(host.app), base_url=BASE, headers=headers or {}
    )


async def _client(
    host: AgentHost, *, streaming: bool = True, headers: dict[str, str] | None = None
) -> Any:
    """The A2A SDK's client, made from the card the host serves (as a user makes one)."""
    http = _http(host, headers)
    return await ClientFactory(
        ClientConfig(streaming=streaming, httpx_client=http)
    ).create_from_url(BASE)


def _ask(text: str) -> SendMessageRequest:
    return SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))


async def _events(client: Any, text: str) -> list[StreamResponse]:
    return [event async for event in client.send_message(_ask(text))]


def _answer(task: Task) -> str:
    return "".join(part.text for artifact in task.artifacts for part in artifact.parts)


@pytest.fixture
async def host() -> AsyncIterator[AgentHost]:
    served = AgentHost("agent", behavior=chunks_then_answer, a2a=True, session_rate_limit=None)
    yield served
    await served.aclose()


async def test_the_sdk_client_streams_the_chunks_then_the_answer_as_the_completed_tasks_artifact(
    host: AgentHost,
) -> None:
    client = await _client(host)
    events = await _events(client, "how is prod?")
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds[0] == "task"
    chunks = [
        event.artifact_update
        for event in events
        if event.HasField("artifact_update") and not event.artifact_update.last_chunk
    ]
    assert [c.artifact.parts[0].text for c in chunks] == ["Check", "ing ", "nodes"]
    assert [c.append for c in chunks] == [False, True, True]
    final = [e.artifact_update for e in events if e.HasField("artifact_update")][-1]
    assert final.last_chunk and not final.append
    # The answer by call_peer's rule: the narration and the final text, never the chunks.
    assert final.artifact.parts[0].text == "Asking kubectl.\n\nAll nodes answer: how is prod?"
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[0] == TaskState.TASK_STATE_WORKING
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    task = await client.get_task(GetTaskRequest(id=events[0].task.id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert _answer(task) == "Asking kubectl.\n\nAll nodes answer: how is prod?"
    await client.close()


async def test_send_message_answers_the_completed_task_and_the_turn_ran_in_a_fresh_session(
    host: AgentHost,
) -> None:
    client = await _client(host, streaming=False)
    before = set(host.sessions)
    (event,) = await _events(client, "one")
    (event2,) = await _events(client, "two")
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert _answer(event.task).endswith("All nodes answer: one")
    assert _answer(event2.task).endswith("All nodes answer: two")
    opened = set(host.sessions) - before
    assert len(opened) == 2  # one fresh session per message, as call_peer opens one
    sids = {a.metadata["session_id"] for e in (event, event2) for a in e.task.artifacts}
    assert sids == opened
    await client.close()


@pytest.mark.parametrize(("kind", "retryable"), [("rate_limited", True), ("auth_error", False)])
async def test_a_turn_error_is_a_failed_task_with_the_errors_kind_and_retryable_flag(
    kind: str, retryable: bool
) -> None:
    async def failing(turn: Turn) -> None:
        await turn.chunk("partial words")
        await turn.error(kind, "the model said no", retryable=retryable, hint="try later")

    host = AgentHost("agent", behavior=failing, a2a=True)
    client = await _client(host, streaming=False)
    (event,) = await _events(client, "hi")
    status = event.task.status
    assert status.state == TaskState.TASK_STATE_FAILED
    assert status.message.parts[0].text == "the model said no"
    meta = dict(status.message.metadata)
    assert meta["kind"] == kind and meta["retryable"] is retryable and meta["hint"] == "try later"
    # A failed turn's chunks are no answer: no artifact says "last chunk".
    assert all(a.parts[0].text == "partial words" for a in event.task.artifacts)
    await client.close()
    await host.aclose()


async def test_an_agent_that_raises_is_a_failed_task_of_kind_unknown() -> None:
    async def broken(turn: Turn) -> None:
        raise KeyError("oops")

    host = AgentHost("agent", behavior=broken, a2a=True)
    client = await _client(host, streaming=False)
    (event,) = await _events(client, "hi")
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    meta = dict(event.task.status.message.metadata)
    assert meta["kind"] == "unknown" and meta["retryable"] is False
    await client.close()
    await host.aclose()


async def test_cancel_task_interrupts_the_running_turn() -> None:
    host = AgentHost("agent", behavior=forever, a2a=True)
    client = await _client(host)
    stream = client.send_message(_ask("run"))
    first = await anext(stream)
    task_id = first.task.id
    async for event in stream:  # up to the turn's first chunk: the turn is running
        if event.HasField("artifact_update"):
            break
    assert host.busy() == 1
    cancelled = await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=task_id)), 5)
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert host.busy() == 0  # the turn itself was stopped, not only the task
    got = await client.get_task(GetTaskRequest(id=task_id))
    assert got.status.state == TaskState.TASK_STATE_CANCELED
    await stream.aclose()
    await client.close()
    await host.aclose()


async def test_the_card_declares_the_json_rpc_transport_at_the_url_it_was_fetched_from(
    host: AgentHost,
) -> None:
    async with _http(host) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
    assert card["supportedInterfaces"][0] == {
        "url": BASE,
        "protocolBinding": "JSONRPC",
        "protocolVersion": "1.0",
    }
    # The 0.3 fields beside them, for clients of the version the daemon's card pins.
    assert card["url"] == BASE and card["preferredTransport"] == "JSONRPC"
    assert card["capabilities"]["streaming"] is True
    assert card["name"] == "agent"


async def test_a_host_without_a2a_answers_no_json_rpc_and_its_card_declares_no_transport() -> None:
    host = AgentHost("agent", description="a daemon's card")
    async with _http(host) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
        answer = await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage"})
    assert "supportedInterfaces" not in card and card["protocolVersion"] == "0.3.0"
    assert answer.status_code in (404, 405)
    await host.aclose()


def test_importing_the_sdk_and_the_host_imports_no_a2a() -> None:
    code = (
        "import sys, coreagent_sdk, coreagent_sdk.host; "
        "from coreagent_sdk.host import AgentHost; AgentHost('x'); "
        "print(sorted(m for m in sys.modules if m == 'a2a' or m.startswith('a2a.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


async def test_the_shared_attach_token_guards_json_rpc_and_the_card_stays_public(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VAR, CANARY)
    host = AgentHost("agent", a2a=True, attach_token_env=VAR)
    before = set(host.sessions)
    async with _http(host) as http:
        card = await http.get("/.well-known/agent-card.json")
        refused = await http.post(
            "/", headers=RPC, json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}}
        )
    assert card.status_code == 200
    bearer = card.json()["securitySchemes"]["bearer"]  # A2A 1.0's spelling, and 0.3's beside it
    assert bearer["httpAuthSecurityScheme"] == {"scheme": "Bearer"} and bearer["type"] == "http"
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == 'Bearer realm="attach"'
    client = await _client(host, streaming=False, headers={"Authorization": f"Bearer {CANARY}"})
    (event,) = await _events(client, "with the token")
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(set(host.sessions) - before) == 1
    await client.close()
    await host.aclose()


async def test_per_caller_tokens_keep_each_callers_tasks_and_sessions_their_own() -> None:
    tokens = {CANARY: Identity("alice"), "bob-token-" + "9" * 12: Identity("bob")}
    host = AgentHost("agent", a2a=True, tokens=tokens)
    alice = await _client(host, streaming=False, headers={"Authorization": f"Bearer {CANARY}"})
    bob = await _client(
        host, streaming=False, headers={"Authorization": "Bearer bob-token-" + "9" * 12}
    )
    (event,) = await _events(alice, "mine")
    task_id = event.task.id
    sid = event.task.artifacts[0].metadata["session_id"]
    assert host.sessions[sid].user == "alice"
    with pytest.raises(TaskNotFoundError):  # bob learns nothing of alice's task
        await bob.get_task(GetTaskRequest(id=task_id))
    assert (await alice.get_task(GetTaskRequest(id=task_id))).id == task_id
    async with _http(host) as http:
        anonymous = await http.post(
            "/",
            headers=RPC,
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
        )
    assert anonymous.status_code == 401
    await alice.close()
    await bob.close()
    await host.aclose()


async def _rpc(host: AgentHost, body: bytes) -> dict[str, Any]:
    async with _http(host) as http:
        answer = await http.post("/", headers=RPC, content=body)
    assert answer.status_code == 200
    result: dict[str, Any] = answer.json()
    return result


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", -32700),
        (b"[]", -32600),
        (json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}]).encode(), -32600),
        (json.dumps({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}).encode(), -32600),
        (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod"}).encode(), -32601),
        (
            json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": 7}}
            ).encode(),
            -32602,
        ),
        (
            json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": "no-such"}}
            ).encode(),
            -32001,
        ),
    ],
)
async def test_malformed_json_rpc_is_a_typed_error_and_opens_no_session(
    host: AgentHost, body: bytes, code: int
) -> None:
    before = set(host.sessions)
    answer = await _rpc(host, body)
    assert answer["error"]["code"] == code
    assert set(host.sessions) == before


async def test_a_body_past_the_cap_stops_being_read_and_opens_no_session(host: AgentHost) -> None:
    from coreagent_sdk.host._a2a import MAX_A2A_REQUEST_BYTES

    before = set(host.sessions)
    text = "x" * MAX_A2A_REQUEST_BYTES
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": text}]}
            },
        }
    ).encode()
    answer = await _rpc(host, body)
    assert answer["error"]["code"] == -32600 and "too large" in answer["error"]["message"]

    async def trickle() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        for i in range(0, len(body), 4096):
            yield body[i : i + 4096]

    async with _http(host) as http:
        chunked = await http.post("/", headers=RPC, content=trickle())
    assert chunked.json()["error"]["code"] == -32600
    assert set(host.sessions) == before


async def test_a_message_at_the_cap_is_answered(host: AgentHost) -> None:
    from coreagent_sdk.host._a2a import MAX_A2A_REQUEST_BYTES

    envelope = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": ""}]}},
    }
    room = MAX_A2A_REQUEST_BYTES - len(json.dumps(envelope).encode())
    envelope["params"]["message"]["parts"][0]["text"] = "y" * room
    body = json.dumps(envelope).encode()
    assert len(body) == MAX_A2A_REQUEST_BYTES
    answer = await _rpc(host, body)
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_message_without_text_is_rejected_before_any_session_opens(host: AgentHost) -> None:
    before = set(host.sessions)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"data": {"a": 1}}]}
            },
        }
    ).encode()
    answer = await _rpc(host, body)
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_REJECTED"
    assert set(host.sessions) == before


async def test_a_multi_agent_host_serves_each_agent_on_a2a() -> None:
    hosts = MultiAgentHost({"triage": chunks_then_answer}, a2a=True)
    host = hosts.host("triage")
    client = await _client(host, streaming=False)
    (event,) = await _events(client, "route me")
    assert _answer(event.task).endswith("All nodes answer: route me")
    await client.close()
    await hosts.aclose()


_LOOPBACK_CLIENT = r"""
import asyncio, json, sys
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import Role, SendMessageRequest

async def main():
    client = await ClientFactory(ClientConfig(streaming=True)).create_from_url(sys.argv[1])
    seen = []
    async for event in client.send_message(
        SendMessageRequest(message=new_text_message("over the wire", role=Role.ROLE_USER))
    ):
        kind = event.WhichOneof("payload")
        if kind == "artifact_update":
            u = event.artifact_update
            seen.append([kind, u.artifact.parts[0].text, u.last_chunk])
        elif kind == "status_update":
            seen.append([kind, event.status_update.status.state])
        else:
            seen.append([kind])
    await client.close()
    print(json.dumps(seen))

asyncio.run(asyncio.wait_for(main(), 30))
"""


async def test_the_sdk_client_in_another_process_reads_stream_and_artifact_on_loopback() -> None:
    host = AgentHost("agent", behavior=chunks_then_answer, a2a=True)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        host.serve(on_ready=ready.set_result, handle_signals=False, grace=0)
    )
    url = await asyncio.wait_for(ready, 10)
    assert url.startswith("http://127.0.0.1:")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _LOOPBACK_CLIENT, url, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        host.stop()
        await serving
    assert proc.returncode == 0, err.decode()[-2000:]
    seen = json.loads(out)
    assert seen[0] == ["task"]
    assert ["artifact_update", "Check", False] in seen
    assert seen[-2] == [
        "artifact_update",
        "Asking kubectl.\n\nAll nodes answer: over the wire",
        True,
    ]
    assert seen[-1] == ["status_update", TaskState.TASK_STATE_COMPLETED]


def test_the_command_line_a2a_flag_serves_an_agent_or_every_agent_of_a_host_on_a2a(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coreagent_sdk.host.__main__ import build, parser

    monkeypatch.setattr(sys, "path", list(sys.path))  # the command line puts its cwd first

    one = build(parser().parse_args(["tests.host_agents:echo", "--a2a"]))
    assert isinstance(one, AgentHost) and one.a2a and one.name == "echo"
    plain = build(parser().parse_args(["tests.host_agents:echo"]))
    assert isinstance(plain, AgentHost) and not plain.a2a
    many = build(parser().parse_args(["tests.host_agents:many", "--a2a"]))
    assert isinstance(many, MultiAgentHost)
    assert many.host("triage").a2a
    many.host_options.pop("a2a")  # the module's host is shared by every test of this process


def test_the_command_line_refuses_a2a_for_a_host_configured_in_its_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coreagent_sdk.host.__main__ import build, parser

    (tmp_path / "a2a_made_host.py").write_text(
        "from coreagent_sdk.host import AgentHost\nhost = AgentHost('made')\n"
    )
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    try:
        with pytest.raises(SystemExit, match="--a2a to AgentHost"):
            build(parser().parse_args(["a2a_made_host:host", "--a2a"]))
    finally:
        sys.modules.pop("a2a_made_host", None)


async def test_the_task_store_keeps_at_most_its_limit_letting_the_oldest_finished_go() -> None:
    from coreagent_sdk.host._a2a import BoundedTaskStore

    host = AgentHost("agent", behavior=chunks_then_answer, a2a=True, session_rate_limit=None)
    assert host._a2a is not None
    store = host._a2a.tasks
    assert isinstance(store, BoundedTaskStore)
    store.limit = 3
    client = await _client(host, streaming=False)
    ids = [(await _events(client, f"ask {i}"))[0].task.id for i in range(5)]
    assert len(store) == 3
    for gone in ids[:2]:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=gone))
    for kept in ids[2:]:
        assert (await client.get_task(GetTaskRequest(id=kept))).id == kept
    await client.close()
    await host.aclose()


async def test_the_task_store_never_lets_a_running_task_go() -> None:
    host = AgentHost("agent", behavior=forever, a2a=True, session_rate_limit=None)
    assert host._a2a is not None
    host._a2a.tasks.limit = 1
    client = await _client(host)
    streams = [client.send_message(_ask(f"run {i}")) for i in range(2)]
    ids = [(await anext(stream)).task.id for stream in streams]
    for stream in streams:  # each turn is running
        async for event in stream:
            if event.HasField("artifact_update"):
                break
    assert len(host._a2a.tasks) == 2  # over the limit: neither has finished
    for task_id in ids:
        assert (await client.get_task(GetTaskRequest(id=task_id))).status.state == (
            TaskState.TASK_STATE_WORKING
        )
    for stream in streams:
        await stream.aclose()
    await client.close()
    await host.aclose()


def test_a2a_without_the_sdk_installed_names_the_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['a2a'] = None\n"  # as if a2a-sdk were not installed
        "from coreagent_sdk.host import AgentHost\n"
        "AgentHost('x')\n"  # without a2a it never needs it
        "try:\n    AgentHost('x', a2a=True)\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'coreagent-sdk[host,a2a]'" in out.stdout


async def test_a_fleets_peer_added_with_a2a_answers_the_sdk_client_and_call_peer_alike() -> None:
    from simulator import Fleet

    fleet = Fleet()
    fleet.add_peer("prod-1", chunks_then_answer, a2a=True)
    fleet.add_peer("prod-2", chunks_then_answer)  # attach only
    http = httpx.AsyncClient(transport=fleet.transport)
    client = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(
        "http://prod-1.sim"
    )
    events = await _events(client, "from outside")
    final = [e.artifact_update for e in events if e.HasField("artifact_update")][-1]
    assert final.artifact.parts[0].text == "Asking kubectl.\n\nAll nodes answer: from outside"
    result = await fleet.call_peer().acall(peer="prod-1", prompt="from inside")
    assert result.response == "Asking kubectl.\n\nAll nodes answer: from inside"
    plain = await http.get("http://prod-2.sim/.well-known/agent-card.json")
    assert plain.status_code == 404  # no description, no A2A: no card, as before
    await client.close()
    await http.aclose()
    await fleet.aclose()


async def _drain(queue: asyncio.Queue[Any], done: Any) -> list[Any]:
    """What a queue is handed until `done(item)` holds for one (each within 5 s)."""
    items: list[Any] = []
    while not items or not done(items[-1]):
        items.append(await asyncio.wait_for(queue.get(), 5))
    return items


def _kind(frame: bytes) -> str:
    return frame.partition(b"\n")[0][7:].decode()


def _ends(item: Any) -> bool:
    return isinstance(item, bytes) and _kind(item) == "turn-complete"


async def test_a_tap_is_handed_what_an_event_stream_of_the_same_turn_is_sent() -> None:
    """The executor's tap gets each `agent` event as the object its stream frame encodes, in
    the stream's order, with the turn's end, and none of the status, inbox or usage frames."""
    from coreagent_sdk._attach._wire import AgentEvent, TurnComplete, decode_frame
    from coreagent_sdk.host._session_handlers import open_session

    host = AgentHost("prod-1", behavior=chunks_then_answer, description="Answers.", a2a=True)
    session = await open_session(host, "")
    stream = session.subscribe()  # an event stream's subscriber: every frame, as bytes
    tap = session.tap()
    session.enqueue("from both")
    sent = await _drain(stream.queue, lambda f: _kind(f) == "usage-update")
    tapped = await _drain(tap.queue, _ends)
    assert {_kind(f) for f in sent} >= {"inbox", "status-update", "usage-update"}
    wanted = [f for f in sent if _kind(f) in ("agent", "turn-complete", "turn-error")]
    assert len(tapped) == len(wanted) == 7  # the prompt, 3 chunks, the narration, answer, end
    for item, frame in zip(tapped, wanted, strict=True):
        _, _, rest = frame.partition(b"\n")
        decoded = decode_frame(_kind(frame), rest[6:].rstrip(b"\n").decode())
        if isinstance(item, AgentEvent):
            assert decoded.event == item  # type: ignore[union-attr]
        else:
            assert item == frame and isinstance(decoded, TurnComplete)
    session.unsubscribe(stream)
    session.unsubscribe(tap)
    await host.aclose()


async def test_a_turn_only_a_tap_reads_is_whole_and_a_stream_reads_it_back_later() -> None:
    """With no event stream subscribed, the tap still gets the whole turn (the frames only a
    stream reads are not made), and every event of it is in the store for a later replay."""
    from coreagent_sdk._attach._wire import AgentEvent
    from coreagent_sdk.host._session_handlers import open_session

    host = AgentHost("prod-1", behavior=chunks_then_answer, description="Answers.", a2a=True)
    session = await open_session(host, "")
    tap = session.tap()
    session.enqueue("tap only")
    items = await _drain(tap.queue, _ends)
    events = [i for i in items if isinstance(i, AgentEvent)]
    assert len(events) == len(items) - 1 == 6
    assert [e.text for e in events if not e.partial][-1] == "All nodes answer: tap only"
    session.unsubscribe(tap)
    _, stored = await host.store.page(session.session_id, 0, session.seq, True)
    assert [frame.count(b"event: agent\n") for _, frame in stored] == [1] * len(events)
    assert [json.loads(f.partition(b"data: ")[2])["event"]["ID"] for _, f in stored] == [
        e.id for e in events
    ]
    await host.aclose()


async def test_a_turn_knows_the_call_of_this_process_that_asked_for_it_over_a2a_or_attach() -> None:
    from coreagent_sdk import A2ADirectory, CallPeer, Peer, StaticDirectory

    asked: list[int | None] = []

    async def note_caller(turn: Turn) -> None:
        asked.append(turn.call_id)
        await turn.say("noted")

    served = AgentHost("agent", behavior=note_caller, a2a=True, session_rate_limit=None)
    transport = ASGITransport(served.app)
    started: list[int] = []

    def on_event(event: Any) -> None:
        if event.kind == "started":
            started.append(event.call_id)

    cards = A2ADirectory([BASE], transport=transport)
    over_a2a = CallPeer(cards, transport=transport, on_event=on_event)
    over_attach = CallPeer(
        StaticDirectory([Peer("agent", BASE)]), transport=transport, on_event=on_event
    )
    await over_a2a.acall(peer="agent", prompt="one")
    await over_attach.acall(peer="agent", prompt="two")
    client = await _client(served)
    await _events(client, "three")  # the A2A SDK's own client: no call of this process
    assert asked == [*started, None]
    assert started[0] != started[1]
    await client.close()
    for closing in (over_a2a, over_attach, cards):
        await closing.aclose()
    await served.aclose()


class Proxy(httpx.AsyncBaseTransport):
    """A reverse proxy at `proxy.test` in front of `host`, in process: it sends the upstream's
    own Host, as nginx does unless told otherwise, and no forwarded headers. Dials nothing."""

    def __init__(self, host: AgentHost) -> None:
        self.upstream = ASGITransport(host.app)
        self.hosts: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.hosts.append(request.url.host)
        # TLS ends here: the upstream is asked over plain http, at its own address.
        request.url = request.url.copy_with(scheme="http", host="127.0.0.1", port=8000)
        request.headers["host"] = "127.0.0.1:8000"
        return await self.upstream.handle_async_request(request)


async def test_a_host_behind_a_proxy_names_its_external_url_on_its_card_so_callers_reach_it() -> (
    None
):
    from coreagent_sdk import A2ADirectory, CallPeer
    from coreagent_sdk.errors import InvalidEndpointError

    outcomes = []
    for external in (None, "https://proxy.test"):
        host = AgentHost(
            "agent",
            behavior=chunks_then_answer,
            a2a=True,
            session_rate_limit=None,
            external_url=external,
        )
        proxy = Proxy(host)
        cards = A2ADirectory(["https://proxy.test"], transport=proxy)
        tool = CallPeer(cards, transport=proxy, timeout=10)
        try:
            outcomes.append((await tool.acall(peer="agent", prompt="through")).response)
        except InvalidEndpointError as exc:  # the card named the upstream's own address
            outcomes.append(str(exc))
        finally:
            await tool.aclose()
            await cards.aclose()
            await host.aclose()
        assert set(proxy.hosts) == {"proxy.test"}  # every request went to the proxy only

    refused, answered = outcomes
    assert "at another origin, 'http://127.0.0.1:8000'" in refused
    assert answered == "Asking kubectl.\n\nAll nodes answer: through"


async def test_the_external_url_is_the_url_of_both_cards_and_must_be_an_absolute_url() -> None:
    daemon_card = AgentHost("agent", description="d", external_url="https://agents.example/")
    a2a_card = AgentHost("agent", a2a=True, external_url="https://agents.example")
    async with _http(daemon_card) as plain, _http(a2a_card) as full:
        plain_card = (await plain.get("/.well-known/agent-card.json")).json()
        full_card = (await full.get("/.well-known/agent-card.json")).json()
    assert plain_card["url"] == "https://agents.example"
    assert {i["url"] for i in full_card["supportedInterfaces"]} == {"https://agents.example"}
    for host in (daemon_card, a2a_card):
        await host.aclose()
    with pytest.raises(ValueError, match="AgentHost external_url: URL '/agents' is refused"):
        AgentHost("agent", external_url="/agents")


def test_the_command_line_sets_the_external_url_of_one_agent_and_refuses_it_for_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coreagent_sdk.host.__main__ import build, parser

    monkeypatch.setattr(sys, "path", list(sys.path))  # the command line puts its cwd first
    flag = "--agent-card-external-url"
    one = build(parser().parse_args(["tests.host_agents:echo", flag, "https://agents.example"]))
    assert isinstance(one, AgentHost) and one.external_url == "https://agents.example"
    with pytest.raises(SystemExit, match="serves each agent on its own port") as many:
        build(parser().parse_args(["tests.host_agents:many", flag, "https://agents.example"]))
    with pytest.raises(SystemExit) as bad:
        build(parser().parse_args(["tests.host_agents:echo", flag, "ftp://s3cr3t-value"]))
    assert "absolute http(s) URL" in str(bad.value) and "s3cr3t" not in str(bad.value)
    assert "https://agents.example" not in str(many.value)


async def test_a_turn_that_starts_after_its_a2a_caller_gave_up_has_no_time_to_delegate() -> None:
    from coreagent_sdk import A2ADirectory, CallPeer, Peer, StaticDirectory
    from coreagent_sdk.errors import PeerTimeoutError

    helper = AgentHost("helper", behavior=chunks_then_answer)
    asked = CallPeer(
        StaticDirectory([Peer("helper", "http://helper.test")]),
        transport=ASGITransport(helper.app),  # in process: nothing is dialed
        timeout=5,
    )
    outcome: list[str] = []

    async def delegates(turn: Turn) -> None:
        try:
            outcome.append((await asked.acall(peer="helper", prompt="x")).response)
        except PeerTimeoutError as exc:
            outcome.append(str(exc))
        await turn.say("done")

    def slow_messages(app: Any) -> Any:
        async def delayed(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["method"] != "POST":
                return await app(scope, receive, send)
            read = [await receive()]  # the message, in hand before its caller gives up
            while read[-1].get("more_body"):
                read.append(await receive())
            await asyncio.sleep(0.6)  # a busy host: the message is handled late

            async def replay() -> Any:
                return read.pop(0) if read else await receive()

            await app(scope, replay, send)

        return delayed

    host = AgentHost(
        "agent", behavior=delegates, a2a=True, session_rate_limit=None, middleware=slow_messages
    )
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        host.serve(on_ready=ready.set_result, handle_signals=False, grace=0)
    )
    url = await asyncio.wait_for(ready, 10)
    cards = A2ADirectory([url])
    tool = CallPeer(cards, timeout=0.3)
    try:
        with pytest.raises(PeerTimeoutError):
            await tool.acall(peer="agent", prompt="go")
        for _ in range(300):  # the turn runs on, late: bounded wait for what it did
            if outcome:
                break
            await asyncio.sleep(0.01)
    finally:
        for closing in (tool, cards, asked):
            await closing.aclose()
        host.stop()
        await serving
        await helper.aclose()
    # It inherited its caller's deadline, already passed: its own call is not made.
    assert len(outcome) == 1 and 'peer "helper" was not asked' in outcome[0]
