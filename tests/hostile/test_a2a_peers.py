"""Hostile A2A agents: whatever a card or a stream says, a call ends bounded and typed.

Each agent here is a raw ASGI app (or a pull-based body) that breaks the A2A
transport on purpose: endless streams, huge artifacts, a task that never
completes, a card that points elsewhere, a peer that echoes the token. What
an agent got to send before the SDK stopped reading is counted exactly.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

# The A2A SDK's client, imported now: its import (up to 2 s on a loaded machine) would
# otherwise fall inside the first call's 0.3 s deadline when this module runs alone.
pytest.importorskip("a2a.client")

from coreagent_sdk import A2ADirectory, CallPeer
from coreagent_sdk.errors import (
    DirectoryError,
    InvalidEndpointError,
    PeerRequestError,
    PeerTimeoutError,
    PeerTurnError,
    StreamEndedError,
)

from .streams import CHUNK, Pulled

TOKEN = "hostile-a2a-secret-9431"
TASK = "task-1"
HOST = "evil.test"


def card(url: str = f"http://{HOST}/", streaming: bool = True, **extra: Any) -> dict[str, Any]:
    """An agent card as an A2A 1.0 agent serves it (camelCase JSON)."""
    return {
        "name": "evil",
        "description": "a hostile agent",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": streaming},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
        **extra,
    }


def frame(result: dict[str, Any]) -> bytes:
    return (
        b"data: " + json.dumps({"jsonrpc": "2.0", "id": "1", "result": result}).encode() + b"\n\n"
    )


def task(state: str = "TASK_STATE_SUBMITTED", task_id: str = TASK) -> bytes:
    return frame({"task": {"id": task_id, "contextId": "c", "status": {"state": state}}})


def status(state: str, text: str | None = None, task_id: str = TASK) -> bytes:
    body: dict[str, Any] = {"state": state}
    if text is not None:
        body["message"] = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": text}]}
    return frame({"statusUpdate": {"taskId": task_id, "contextId": "c", "status": body}})


def artifact(text: str, append: bool = False) -> bytes:
    return frame(
        {
            "artifactUpdate": {
                "taskId": TASK,
                "contextId": "c",
                "artifact": {"artifactId": "a", "parts": [{"text": text}]},
                "append": append,
            }
        }
    )


class Agent(httpx.AsyncBaseTransport):
    """A hostile agent at `HOST`: its card, and `answer()` as the body of every message.

    Any request to another host is recorded and answered 599: nothing is dialed.
    """

    def __init__(
        self,
        answer: Callable[[], Iterator[bytes]],
        the_card: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        limit: int = 100_000,
    ) -> None:
        self.card = card() if the_card is None else the_card
        self.answer = answer
        self.headers = {"content-type": "text/event-stream", **(headers or {})}
        self.limit = limit
        self.requests: list[httpx.Request] = []
        self.elsewhere: list[httpx.Request] = []
        self.body: Pulled | None = None
        self.card_body: Pulled | None = None
        self.cancels: list[str] = []  # the task ids a caller asked to cancel

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host != HOST:
            self.elsewhere.append(request)
            return httpx.Response(599)
        self.requests.append(request)
        if request.url.path.endswith("agent-card.json"):
            # Streamed, as a server sends it (a body given whole is read before any bound).
            data = json.dumps(self.card).encode()
            chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
            self.card_body = Pulled(lambda: iter(chunks))
            return httpx.Response(
                200, headers={"content-type": "application/json"}, stream=self.card_body
            )
        sent = json.loads(await request.aread())
        if sent.get("method") == "CancelTask":  # the caller stopped reading: it cancels
            self.cancels.append(sent["params"]["id"])
            canceled = {"id": sent["params"]["id"], "contextId": "c"}
            canceled["status"] = {"state": "TASK_STATE_CANCELED"}  # type: ignore[assignment]
            return httpx.Response(
                200, json={"jsonrpc": "2.0", "id": sent["id"], "result": canceled}
            )
        self.body = Pulled(self.answer, self.limit)
        return httpx.Response(200, headers=self.headers, stream=self.body)


async def ask(agent: Agent, **kw: Any) -> Any:
    directory = A2ADirectory([f"http://{HOST}"], transport=agent)
    tool = CallPeer(directory, transport=agent, timeout=kw.pop("timeout", 5), **kw)
    try:
        return await tool.acall(peer="evil", prompt="go")
    finally:
        await tool.aclose()


def forever(*frames: bytes) -> Callable[[], Iterator[bytes]]:
    repeated = frames or (status("TASK_STATE_WORKING"),)

    def chunks() -> Iterator[bytes]:
        yield task("TASK_STATE_WORKING")
        while True:
            yield from repeated

    return chunks


async def test_an_endless_stream_of_text_is_cut_at_the_cap_after_reading_little_more() -> None:
    agent = Agent(forever(artifact("x" * 1000, append=True)))

    result = await ask(agent, max_response_bytes=4096)

    assert result.truncated and result.response == "x" * 4096
    assert result.session_id == TASK
    assert agent.body is not None and agent.body.pulled < 10_000  # five artifact frames
    assert agent.cancels == [TASK]  # and the task left running is canceled


async def test_an_endless_stream_that_says_nothing_ends_at_the_body_bound() -> None:
    agent = Agent(forever(status("TASK_STATE_WORKING")), limit=10_000_000)

    with pytest.raises(PeerRequestError, match="over 16777216 bytes; stopped reading"):
        await ask(agent, max_response_bytes=1024)

    # 16 times the bound of one event (1 MiB at this cap), and not a frame more.
    assert agent.body is not None and agent.body.pulled <= 16 * 1024 * 1024 + 200


async def test_a_slow_endless_stream_that_says_nothing_ends_at_the_deadline() -> None:
    class Slow(Pulled):
        async def __aiter__(self) -> Any:
            async for chunk in super().__aiter__():
                await asyncio.sleep(0.01)
                yield chunk

    agent = Agent(forever(status("TASK_STATE_WORKING")))
    original = agent.handle_async_request

    async def handle(request: httpx.Request) -> httpx.Response:
        response = await original(request)
        if response.headers["content-type"] == "text/event-stream":  # the message's, no other
            response.stream = agent.body = Slow(agent.answer, 1000)
        return response

    agent.handle_async_request = handle  # type: ignore[method-assign]

    with pytest.raises(PeerTimeoutError, match=f"session {TASK}"):
        await ask(agent, timeout=0.3)

    assert agent.body is not None and 0 < agent.body.pulled < 100 * 200


async def test_an_endless_line_is_cut_at_the_event_bound_and_fails_typed() -> None:
    def endless() -> Iterator[bytes]:
        yield task("TASK_STATE_WORKING")
        yield b'data: {"jsonrpc": "2.0", "id": "1", "result": {"artifactUpdate": {"x": "'
        while True:
            yield b"y" * CHUNK

    agent = Agent(endless)

    with pytest.raises(PeerRequestError, match=r"one line .* over") as caught:
        await ask(agent, max_response_bytes=1024)

    assert agent.body is not None and agent.body.pulled < 1024 * 1024 + 3 * CHUNK
    assert "no partial answer" in str(caught.value)


async def test_a_huge_artifact_in_one_event_is_refused_without_reading_it_whole() -> None:
    agent = Agent(
        lambda: iter([task(), artifact("z" * (8 * 1024 * 1024)), status("TASK_STATE_COMPLETED")])
    )

    with pytest.raises(PeerRequestError, match="cannot be read"):
        await ask(agent)

    assert len(agent.requests) == 3  # the card, the message and its CancelTask; nothing after
    assert agent.cancels == [TASK]


async def test_an_unstreamed_answer_past_the_body_bound_is_refused() -> None:
    def huge() -> Iterator[bytes]:
        while True:
            yield b"[" + b" " * (CHUNK - 2) + b"\n"

    agent = Agent(
        huge, the_card=card(streaming=False), headers={"content-type": "application/json"}
    )

    with pytest.raises(PeerRequestError, match=r"over .* bytes"):
        await ask(agent, max_response_bytes=1024)

    assert agent.body is not None and agent.body.pulled <= 16 * 1024 * 1024 + CHUNK


async def test_a_task_that_never_completes_ends_at_the_deadline_naming_the_task() -> None:
    def stalled() -> Iterator[bytes]:
        yield task("TASK_STATE_WORKING")

    class Stalling(Pulled):
        async def __aiter__(self) -> Any:
            async for chunk in super().__aiter__():
                yield chunk
            await asyncio.Event().wait()

    agent = Agent(stalled)
    original = agent.handle_async_request

    async def handle(request: httpx.Request) -> httpx.Response:
        response = await original(request)
        if response.headers["content-type"] == "text/event-stream":  # the message's, no other
            response.stream = Stalling(stalled)
        return response

    agent.handle_async_request = handle  # type: ignore[method-assign]

    with pytest.raises(PeerTimeoutError, match=f"within 0.3 s \\(session {TASK}\\)"):
        await ask(agent, timeout=0.3)
    assert agent.cancels == [TASK]


async def test_a_stream_that_ends_before_the_task_does_fails_rather_than_answer_half() -> None:
    agent = Agent(lambda: iter([task("TASK_STATE_WORKING"), artifact("half")]))

    with pytest.raises(StreamEndedError, match=f"task {TASK}"):
        await ask(agent)


async def test_a_card_pointing_at_a_host_not_allowed_is_refused_before_anything_is_sent() -> None:
    agent = Agent(forever(status("TASK_STATE_WORKING")), the_card=card("http://169.254.169.254/"))

    with pytest.raises(
        InvalidEndpointError, match=r"'169\.254\.169\.254', which is not in allowed_hosts"
    ):
        await ask(agent, allowed_hosts=[HOST])

    assert agent.elsewhere == []  # proven on a transport that records, not by dialing
    assert [r.url.path for r in agent.requests] == ["/.well-known/agent-card.json"]


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://other.test/a2a", "http://other.test"),
        ("http://evil.test:8080/", "http://evil.test:8080"),  # the card's host, another port
        ("http://localhost:9999/", "http://localhost:9999"),  # an agent behind a proxy, as
        # the A2A SDK's samples declare it: followed, it would dial the caller's own machine
    ],
)
async def test_a_card_pointing_at_another_origin_is_refused_naming_both_and_nothing_is_sent(
    url: str, origin: str
) -> None:
    agent = Agent(forever(status("TASK_STATE_WORKING")), the_card=card(url))

    with pytest.raises(InvalidEndpointError) as caught:
        await ask(agent)

    said = str(caught.value)
    assert f"read from origin 'http://{HOST}'" in said
    assert f"at another origin, '{origin}'; nothing was sent" in said
    assert f"allowed_hosts=['{origin.partition('://')[2]}', ...]" in said
    assert agent.elsewhere == []  # proven on a transport that records, not by dialing
    assert [r.url.path for r in agent.requests] == ["/.well-known/agent-card.json"]


async def test_another_origin_is_asked_once_allowed_hosts_lists_it_and_not_before() -> None:
    agent = Agent(forever(status("TASK_STATE_WORKING")), the_card=card("http://other.test/a2a"))

    with pytest.raises(InvalidEndpointError, match="another origin"):
        await ask(agent)
    assert agent.elsewhere == []
    with pytest.raises(PeerRequestError, match="599"):  # the recording transport's answer
        await ask(agent, allowed_hosts=[HOST, "other.test"])

    # Recorded, never dialed: the message went where the card said, as the caller allowed.
    assert [(r.method, str(r.url)) for r in agent.elsewhere] == [("POST", "http://other.test/a2a")]


async def test_a_hub_peers_card_may_point_at_its_own_hosts_https_not_at_another_host() -> None:
    from coreagent_sdk import Peer, StaticDirectory

    answered = Agent(
        lambda: iter([task(), artifact("fine"), status("TASK_STATE_COMPLETED")]),
        the_card=card(f"https://{HOST}/"),  # read over http, pointing at https on its host
    )
    moved = Agent(forever(status("TASK_STATE_WORKING")), the_card=card("http://other.test/"))
    found = StaticDirectory([Peer("evil", f"http://{HOST}", {"protocol": "a2a"})])
    for agent in (answered, moved):
        tool = CallPeer(found, transport=agent, timeout=5)
        try:
            if agent is answered:
                assert (await tool.acall(peer="evil", prompt="go")).response == "fine"
            else:
                with pytest.raises(InvalidEndpointError, match=r"'http://other\.test'"):
                    await tool.acall(peer="evil", prompt="go")
        finally:
            await tool.aclose()

    assert [r.url.scheme for r in answered.requests] == ["http", "https"]
    assert moved.elsewhere == [] and len(moved.requests) == 1


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "javascript:alert(1)", "/relative/path", "http://a b/"]
)
async def test_a_card_pointing_at_no_http_url_is_refused_before_anything_is_sent(url: str) -> None:
    agent = Agent(forever(status("TASK_STATE_WORKING")), the_card=card(url))

    with pytest.raises(InvalidEndpointError, match="refused"):
        await ask(agent)

    assert agent.elsewhere == [] and len(agent.requests) == 1


async def test_a_card_with_no_json_rpc_interface_names_what_it_declares() -> None:
    the_card = card()
    the_card["supportedInterfaces"][0]["protocolBinding"] = "GRPC"
    agent = Agent(forever(), the_card=the_card)

    with pytest.raises(DirectoryError, match=r"no JSON-RPC interface .*GRPC"):
        await ask(agent)


async def test_a_huge_card_is_refused_at_its_bound() -> None:
    agent = Agent(forever(), the_card=card(description="d" * (1024 * 1024)))

    with pytest.raises(DirectoryError, match="agent card"):
        await ask(agent)

    assert agent.card_body is not None and agent.card_body.pulled <= 256 * 1024 + CHUNK
    assert len(agent.requests) == 1  # no message was sent to an agent whose card was refused


async def test_a_compressed_answer_is_refused_unread() -> None:
    body = gzip.compress(task("TASK_STATE_COMPLETED"))
    agent = Agent(lambda: iter([body]), headers={"content-encoding": "gzip"})

    with pytest.raises(PeerRequestError, match="'gzip'-encoded"):
        await ask(agent)

    assert agent.requests[-1].headers["accept-encoding"] == "identity"


async def test_an_agent_echoing_the_token_everywhere_shows_none_of_it() -> None:
    echoed = f"Bearer {TOKEN}"
    agent = Agent(
        lambda: iter([task(), artifact(f"here: {echoed}"), status("TASK_STATE_COMPLETED")])
    )

    result = await ask(agent, token_env="T", environ={"T": TOKEN})

    assert agent.requests[-1].headers["authorization"] == echoed
    assert TOKEN not in result.response and TOKEN not in repr(result)
    assert TOKEN not in json.dumps(result.to_dict())

    failing = Agent(lambda: iter([task(), status("TASK_STATE_FAILED", f"auth was {echoed}")]))
    with pytest.raises(PeerTurnError) as caught:
        await ask(failing, token_env="T", environ={"T": TOKEN})
    assert TOKEN not in str(caught.value) and TOKEN not in caught.value.message


async def test_a_token_echoed_split_across_two_streamed_chunks_is_scrubbed_whole() -> None:
    half = len(TOKEN) // 2
    agent = Agent(
        lambda: iter(
            [
                task(),
                artifact(f"here: {TOKEN[:half]}"),
                artifact(f"{TOKEN[half:]} there", append=True),
                status("TASK_STATE_COMPLETED"),
            ]
        )
    )

    result = await ask(agent, token_env="T", environ={"T": TOKEN})

    assert result.response.startswith("here: ") and result.response.endswith(" there")
    assert TOKEN not in result.response and TOKEN[:half] + TOKEN[half:] not in repr(result)


async def test_an_error_answer_echoing_the_token_is_scrubbed() -> None:
    error = {"jsonrpc": "2.0", "id": "1", "error": {"code": -32603, "message": f"bad {TOKEN}"}}
    agent = Agent(
        lambda: iter([json.dumps(error).encode()]), headers={"content-type": "application/json"}
    )

    with pytest.raises(PeerRequestError) as caught:
        await ask(agent, token_env="T", environ={"T": TOKEN})

    assert TOKEN not in str(caught.value)
    assert "refused the message" in str(caught.value)


async def test_a_task_id_that_is_no_id_is_refused() -> None:
    agent = Agent(lambda: iter([task(task_id="x\n" * 500)]))

    with pytest.raises(PeerRequestError, match="not an id this SDK takes"):
        await ask(agent)


async def test_events_of_another_task_in_the_stream_are_refused() -> None:
    agent = Agent(lambda: iter([task(), status("TASK_STATE_COMPLETED", task_id="other")]))

    with pytest.raises(PeerRequestError, match="task 'other' in the stream of task task-1"):
        await ask(agent)


async def test_a_task_asking_for_input_is_a_turn_error_saying_to_self_contain_the_prompt() -> None:
    agent = Agent(lambda: iter([task(), status("TASK_STATE_INPUT_REQUIRED", "which one?")]))

    with pytest.raises(PeerTurnError, match="self-contained") as caught:
        await ask(agent)

    assert caught.value.message == "which one?" and caught.value.session_id == TASK


async def test_a_failed_task_carries_the_hosts_turn_error_kind_and_retryable_flag() -> None:
    failed = frame(
        {
            "statusUpdate": {
                "taskId": TASK,
                "contextId": "c",
                "status": {
                    "state": "TASK_STATE_FAILED",
                    "message": {
                        "messageId": "m",
                        "role": "ROLE_AGENT",
                        "parts": [{"text": "slow down"}],
                        "metadata": {
                            "kind": "rate_limited",
                            "retryable": True,
                            "code": "429",
                            "hint": "wait a minute",
                        },
                    },
                },
            }
        }
    )
    agent = Agent(lambda: iter([task(), failed]))

    with pytest.raises(PeerTurnError) as caught:
        await ask(agent)

    error = caught.value
    assert (error.kind, error.retryable) == ("rate_limited", True)
    assert (error.code, error.hint, error.message) == ("429", "wait a minute", "slow down")
