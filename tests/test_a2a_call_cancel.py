"""A call that stops reading an A2A task before it ends cancels it: bounded, best effort.

The agent is the A2A SDK's own server (`tests.a2a_sdk_server.app`) in process,
with executors that stream without end, never finish, or stall (or refuse) the
cancel. What the task became is read back with the A2A SDK's own client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
import pytest

pytest.importorskip("a2a")

from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor
from a2a.server.tasks import TaskUpdater
from a2a.types import GetTaskRequest, TaskState

from coreagent_sdk import A2ADirectory, ASGITransport, CallPeer
from coreagent_sdk.errors import PeerTimeoutError, PeerTurnError

from .a2a_sdk_server import app, card_of

URL = "http://agent.sim/"
CANCEL_SECONDS = 1.0  # the documented bound of the cancel
CHUNK = "x" * 1000


async def working(context: Any, event_queue: Any) -> TaskUpdater:
    """The message's task, made and set working: what every executor here starts with."""
    task = context.current_task or new_task_from_user_message(context.message)
    await event_queue.enqueue_event(task)
    updater = TaskUpdater(event_queue, task.id, task.context_id)
    await updater.start_work()
    return updater


class Endless(AgentExecutor):
    """Streams chunks of 1,000 bytes (at most 2,000 of them) until canceled; `cancel` as told."""

    def __init__(self, cancel: str = "cancel", chunks: int = 2000) -> None:
        self.how = cancel
        self.chunks = chunks
        self.canceled = asyncio.Event()

    async def execute(self, context: Any, event_queue: Any) -> None:
        updater = await working(context, event_queue)
        for n in range(self.chunks):
            await updater.add_artifact([new_text_part(CHUNK)], artifact_id="a", append=n > 0)
            await asyncio.sleep(0.005)
        await asyncio.sleep(30)  # a task that never completes (bounded: the test ends first)

    async def cancel(self, context: Any, event_queue: Any) -> None:
        self.canceled.set()
        if self.how == "stall":
            await asyncio.sleep(30)  # longer than any bound here: the caller must not wait
        if self.how == "refuse":
            raise RuntimeError("will not cancel")
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


async def state_of(transport: httpx.AsyncBaseTransport, task_id: str) -> str:
    """The task's state, as the A2A SDK's own client reads it."""
    async with httpx.AsyncClient(transport=transport) as http:
        client = ClientFactory(ClientConfig(httpx_client=http)).create(card_of(URL))
        task = await client.get_task(GetTaskRequest(id=task_id))
        return str(TaskState.Name(task.status.state))


async def until_state(transport: httpx.AsyncBaseTransport, task_id: str, want: str) -> str:
    """The task's state once it is `want`, or after 2 s (the cancel is processed on the agent)."""
    got = ""
    for _ in range(100):
        got = await state_of(transport, task_id)
        if got == want:
            break
        await asyncio.sleep(0.02)
    return got


def tool_for(executor: AgentExecutor, **kw: Any) -> tuple[CallPeer, A2ADirectory, Any]:
    transport = ASGITransport(app(URL, executor=executor))
    directory = A2ADirectory([URL], transport=transport)
    return CallPeer(directory, transport=transport, **kw), directory, transport


async def test_a_task_cut_at_the_byte_cap_is_canceled_on_the_agent() -> None:
    executor = Endless()
    tool, directory, transport = tool_for(executor, max_response_bytes=2500)

    result = await tool.acall(peer="sdk-agent", prompt="go")

    assert result.truncated and len(result.response) == 2500
    assert executor.canceled.is_set()
    assert await until_state(transport, result.session_id, "TASK_STATE_CANCELED") == (
        "TASK_STATE_CANCELED"
    )
    await tool.aclose()
    await directory.aclose()


async def test_a_task_past_the_calls_deadline_is_canceled_on_the_agent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    executor = Endless(chunks=1)
    # 1 s, not 0.3: the message names the task only once the agent made it, and at a load
    # of 10 (a CI run beside other work) 0.3 s passed before it had (seen once).
    tool, directory, transport = tool_for(executor, timeout=1.0)

    with pytest.raises(PeerTimeoutError, match=r"within 1 s \(session ") as caught:
        await tool.acall(peer="sdk-agent", prompt="go")

    task_id = str(caught.value).split("(session ")[1].split(")")[0]
    assert executor.canceled.is_set()
    assert await until_state(transport, task_id, "TASK_STATE_CANCELED") == "TASK_STATE_CANCELED"
    assert "could not cancel" not in caplog.text
    await tool.aclose()
    await directory.aclose()


async def test_an_agent_that_stalls_the_cancel_holds_a_timed_out_call_one_bound_at_most(
    caplog: pytest.LogCaptureFixture,
) -> None:
    executor = Endless(cancel="stall", chunks=1)
    tool, directory, _ = tool_for(executor, timeout=0.3)
    caplog.set_level(logging.INFO, logger="coreagent_sdk")
    started = time.perf_counter()

    with pytest.raises(PeerTimeoutError, match=r"within 0\.3 s"):
        await tool.acall(peer="sdk-agent", prompt="go")

    took = time.perf_counter() - started
    assert executor.canceled.is_set()
    assert CANCEL_SECONDS <= took < 0.3 + CANCEL_SECONDS + 0.5
    assert f"no answer within {CANCEL_SECONDS:g} s" in caplog.text
    await tool.aclose()
    await directory.aclose()


async def test_an_agent_that_stalls_the_cancel_of_a_cut_answer_still_gives_the_answer() -> None:
    executor = Endless(cancel="stall")
    tool, directory, _ = tool_for(executor, max_response_bytes=1500)
    started = time.perf_counter()

    result = await tool.acall(peer="sdk-agent", prompt="go")

    assert result.truncated and result.response == "x" * 1500
    assert time.perf_counter() - started < CANCEL_SECONDS + 1.0
    await tool.aclose()
    await directory.aclose()


async def test_a_refused_cancel_changes_nothing_of_the_calls_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    executor = Endless(cancel="refuse")
    tool, directory, _ = tool_for(executor, max_response_bytes=1500)
    caplog.set_level(logging.INFO, logger="coreagent_sdk")

    result = await tool.acall(peer="sdk-agent", prompt="go")

    assert result.truncated and result.response == "x" * 1500
    assert executor.canceled.is_set() and "could not cancel task" in caplog.text
    await tool.aclose()
    await directory.aclose()


async def test_a_task_that_completes_is_not_canceled() -> None:
    executor = Endless(chunks=2)

    class Completes(Endless):
        async def execute(self, context: Any, event_queue: Any) -> None:
            task = context.current_task or new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            await updater.add_artifact([new_text_part("done")], artifact_id="a")
            await updater.complete()

    executor = Completes()
    tool, directory, transport = tool_for(executor)

    result = await tool.acall(peer="sdk-agent", prompt="go")

    assert (result.response, result.truncated) == ("done", False)
    assert not executor.canceled.is_set()
    assert await state_of(transport, result.session_id) == "TASK_STATE_COMPLETED"
    await tool.aclose()
    await directory.aclose()


class Waits(AgentExecutor):
    """Asks back (for input, or to be authorized) and leaves the task waiting for the answer."""

    def __init__(self, state: str, cancel: str = "cancel") -> None:
        self.state = state
        self.how = cancel
        self.canceled = asyncio.Event()

    async def execute(self, context: Any, event_queue: Any) -> None:
        updater = await working(context, event_queue)
        asked = updater.new_agent_message([new_text_part("which cluster?")])
        if self.state == "input-required":
            await updater.requires_input(asked)
        else:
            await updater.requires_auth(asked)

    async def cancel(self, context: Any, event_queue: Any) -> None:
        self.canceled.set()
        if self.how == "stall":
            await asyncio.sleep(30)  # longer than any bound here: the caller must not wait
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


@pytest.mark.parametrize(
    ("state", "fix"),
    [
        ("input-required", "make the prompt self-contained"),
        ("auth-required", "authorize this caller with the agent beforehand"),
    ],
)
async def test_a_task_left_waiting_for_what_a_call_cannot_send_is_canceled_on_the_agent(
    state: str, fix: str
) -> None:
    executor = Waits(state)
    tool, directory, transport = tool_for(executor, timeout=10)

    with pytest.raises(PeerTurnError) as caught:
        await tool.acall(peer="sdk-agent", prompt="scale it")

    said = str(caught.value)
    assert f"left the task {state}" in said and fix in said
    assert "the call cancels the task on the agent (best effort)" in said
    assert caught.value.message == "which cluster?"
    assert executor.canceled.is_set()
    task_id = caught.value.session_id
    assert task_id is not None
    assert await until_state(transport, task_id, "TASK_STATE_CANCELED") == "TASK_STATE_CANCELED"
    await tool.aclose()
    await directory.aclose()


async def test_an_agent_that_stalls_the_cancel_of_a_waiting_task_holds_the_error_one_bound_at_most(
    caplog: pytest.LogCaptureFixture,
) -> None:
    executor = Waits("input-required", cancel="stall")
    tool, directory, _ = tool_for(executor, timeout=10)

    caplog.set_level(logging.INFO, logger="coreagent_sdk")
    started = time.perf_counter()
    with pytest.raises(PeerTurnError, match="left the task input-required"):
        await tool.acall(peer="sdk-agent", prompt="scale it")
    took = time.perf_counter() - started

    assert executor.canceled.is_set()
    assert CANCEL_SECONDS <= took < CANCEL_SECONDS + 1.5
    assert "could not cancel task" in caplog.text and "no answer within 1 s" in caplog.text
    await tool.aclose()
    await directory.aclose()
