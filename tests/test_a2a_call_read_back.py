"""`CallPeer.read_answer` reads an A2A task's whole answer back with `GetTask`, bounded.

The agent is the A2A SDK's own server (`tests.a2a_sdk_server.app`) in process.
A call cut at its byte cap cancels a task still running, so the read-back finds
a whole answer when the task had completed (an agent that answers the message
with the completed task, or one that refuses the cancel and finishes), and says
why there is none when the task was canceled.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

pytest.importorskip("a2a.client")

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor
from a2a.server.tasks import TaskUpdater

from coreagent_sdk import A2ADirectory, ASGITransport, CallPeer, CallPeerResult, FakeClock
from coreagent_sdk.errors import (
    InvalidArgumentError,
    InvalidEndpointError,
    PeerRequestError,
    PeerTimeoutError,
    PeerTurnError,
)

from .a2a_sdk_server import app, card_of
from .test_a2a_call_cancel import Endless

URL = "http://agent.sim/"
TOKEN = "read-back-secret-4410"


class Finishing(AgentExecutor):
    """Streams `chunks` chunks of 1,000 bytes 10 ms apart, then completes; stalls a cancel."""

    def __init__(self, chunks: int = 8, letter: str = "y") -> None:
        self.chunks = chunks
        self.letter = letter

    async def execute(self, context: Any, event_queue: Any) -> None:
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        for n in range(self.chunks):
            part = new_text_part(self.letter * 1000)
            await updater.add_artifact([part], artifact_id="a", append=n > 0)
            await asyncio.sleep(0.01)
        await updater.complete()

    async def cancel(self, context: Any, event_queue: Any) -> None:
        await asyncio.sleep(3)  # past the caller's bound of its cancel: the task completes first


class Recorded(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.inner.handle_async_request(request)

    def methods(self) -> list[str]:
        return [
            str(httpx.Response(200, content=r.content).json()["method"])
            for r in self.requests
            if r.method == "POST"
        ]


def tool_for(served: Any, **kw: Any) -> tuple[CallPeer, Recorded]:
    transport = Recorded(ASGITransport(served))
    directory = A2ADirectory([URL], transport=transport, clock=kw.pop("clock", None))
    return CallPeer(directory, transport=transport, **kw), transport


async def test_a_cut_answer_of_a_completed_task_is_read_back_whole_by_get_task() -> None:
    tool, transport = tool_for(app(URL, streaming=False), max_response_bytes=1000)
    prompt = "repeat 5000"  # the agent answers the message with the completed task

    cut = await tool.acall(peer="sdk-agent", prompt=prompt)
    whole = await tool.read_answer(cut)

    assert cut.truncated and cut.response == "x" * 1000
    assert (whole.response, whole.truncated, whole.session_id) == (
        "x" * 5000,
        False,
        cut.session_id,
    )
    assert transport.methods() == ["SendMessage", "GetTask"]  # a completed task: no cancel
    await tool.aclose()


async def test_a_task_still_running_is_read_back_once_it_completes() -> None:
    tool, transport = tool_for(app(URL, executor=Finishing()), max_response_bytes=1500)

    cut = await tool.acall(peer="sdk-agent", prompt="go")  # its cancel refused: it runs on
    whole = await tool.read_answer(cut)

    assert cut.truncated and whole.response == "y" * 8000 and not whole.truncated
    assert transport.methods()[:2] == ["SendStreamingMessage", "CancelTask"]
    assert set(transport.methods()[2:]) == {"GetTask"}
    await tool.aclose()


async def test_the_read_back_has_a_byte_cap_of_its_own() -> None:
    tool, _ = tool_for(app(URL, streaming=False), max_response_bytes=100)

    cut = await tool.acall(peer="sdk-agent", prompt="repeat 5000")
    part = await tool.read_answer(cut, max_response_bytes=3000)

    assert (part.response, part.truncated, part.max_response_bytes) == ("x" * 3000, True, 3000)
    await tool.aclose()


async def test_a_task_the_cut_call_canceled_has_no_whole_answer_and_says_why() -> None:
    tool, _ = tool_for(app(URL, executor=Endless()), max_response_bytes=1500)
    cut = await tool.acall(peer="sdk-agent", prompt="go")

    with pytest.raises(PeerTurnError, match="was canceled, so it has no whole answer") as caught:
        await tool.read_answer(cut)

    assert caught.value.kind == "canceled" and "larger max_response_bytes" in str(caught.value)
    await tool.aclose()


async def test_a_task_that_never_ends_is_read_back_until_the_deadline_and_no_more() -> None:
    executor = Endless(cancel="stall", chunks=3)
    tool, transport = tool_for(app(URL, executor=executor), max_response_bytes=1500)
    cut = await tool.acall(peer="sdk-agent", prompt="go")

    with pytest.raises(PeerTimeoutError, match=rf"session {cut.session_id} .* within 0\.4 s"):
        await tool.read_answer(cut, timeout=0.4)

    assert 2 <= transport.methods().count("GetTask") <= 10  # asked again, waits growing
    await tool.aclose()


async def test_the_token_comes_from_the_environment_and_nothing_of_it_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("A2A_SERVER_TOKEN", TOKEN)
    monkeypatch.setenv("PEER_TOKEN", TOKEN)
    tool, transport = tool_for(
        app(URL, streaming=False), max_response_bytes=1000, token_env="PEER_TOKEN"
    )
    cut = await tool.acall(peer="sdk-agent", prompt="repeat 3000")

    whole = await tool.read_answer(cut)

    assert whole.response.startswith("x" * 3000) and "(you sent Bearer [redacted])" in (
        whole.response
    )
    assert TOKEN not in repr(whole)
    asked = [r for r in transport.requests if b"GetTask" in r.content]
    assert asked and all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in asked)
    monkeypatch.delenv("PEER_TOKEN")
    with pytest.raises(Exception, match="PEER_TOKEN"):
        await tool.read_answer(cut)  # read per read-back, as per call
    await tool.aclose()


async def test_a_card_that_moved_elsewhere_refuses_the_read_back_before_anything_is_sent() -> None:
    moved = {"url": URL}

    async def current(card: Any) -> Any:
        return card_of(moved["url"], streaming=False)

    clock = FakeClock()
    tool, transport = tool_for(
        app(URL, streaming=False, card_modifier=current),
        max_response_bytes=1000,
        allowed_hosts=["agent.sim"],
        clock=clock,
    )
    cut = await tool.acall(peer="sdk-agent", prompt="repeat 3000")
    moved["url"] = "http://elsewhere.sim/"
    clock.advance(5.0)  # the card is stale: the read-back reads it again

    with pytest.raises(InvalidEndpointError, match=r"elsewhere\.sim"):
        await tool.read_answer(cut)

    assert "GetTask" not in transport.methods()
    assert not any(r.url.host == "elsewhere.sim" for r in transport.requests)
    await tool.aclose()


async def test_a_task_the_agent_does_not_know_is_a_typed_error_naming_the_task() -> None:
    tool, _ = tool_for(app(URL))
    result = CallPeerResult(
        peer="sdk-agent", session_id="no-such-task", response="", duration_ms=0, truncated=True
    )

    with pytest.raises(PeerRequestError, match=r"refused GetTask \(TaskNotFoundError\)"):
        await tool.read_answer(result)
    await tool.aclose()


async def test_a_result_naming_no_task_is_refused_before_anything_is_sent() -> None:
    tool, transport = tool_for(app(URL))
    result = CallPeerResult(peer="sdk-agent", session_id="", response="", duration_ms=0)

    with pytest.raises(InvalidArgumentError, match="not a plain path segment"):
        await tool.read_answer(result)

    assert transport.requests == []
    await tool.aclose()
