"""An A2A task the host answered for is kept in its session store (`AgentHost(a2a=True)`).

The project's rule: what the host acknowledges survives a `kill -9`, and a failed write
fails the request that caused it. Over A2A the host acknowledges a task when the SDK
sends its id (the first event of `SendStreamingMessage`, the answer of `SendMessage`):
each save of the task is committed to the store before the SDK sends what it saved.
The client in every test is the A2A SDK's own; the crash test kills a real host process
on loopback with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
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
from a2a.types import GetTaskRequest, Role, SendMessageRequest, Task, TaskState
from a2a.utils.errors import InternalError, TaskNotFoundError

from coreagent_sdk import ASGITransport
from coreagent_sdk.host import AgentHost, Identity, Turn
from tests.processes import reap
from tests.test_host_durability import small_disk

ROOT = Path(__file__).resolve().parent.parent
BASE = "http://agent.test"
FULL = "database or disk is full"
ALICE, BOB = "alice-token-" + "1" * 12, "bob-token-" + "2" * 12
TOKENS = {ALICE: Identity("alice"), BOB: Identity("bob")}


async def answer(turn: Turn) -> None:
    await turn.chunk("work")
    if turn.prompt.startswith("hang"):
        await asyncio.Event().wait()
    if turn.prompt.startswith("slow"):
        await asyncio.sleep(0.02)
    await turn.say(f"answer to {turn.prompt}")


def disk_full() -> None:
    raise sqlite3.OperationalError(FULL)


def _ask(text: str) -> SendMessageRequest:
    return SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))


def _answer(task: Task) -> str:
    return "".join(part.text for artifact in task.artifacts for part in artifact.parts)


@contextlib.asynccontextmanager
async def sdk_client(
    base: str, token: str | None = None, *, streaming: bool = False, app: Any = None
) -> AsyncIterator[Any]:
    """The A2A SDK's client from the card at `base` (in process when given `app`)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = ASGITransport(app) if app is not None else None
    async with httpx.AsyncClient(
        transport=transport, base_url=base, headers=headers, timeout=10
    ) as http:
        client = await ClientFactory(
            ClientConfig(streaming=streaming, httpx_client=http)
        ).create_from_url(base)
        try:
            yield client
        finally:
            await client.close()


async def _send(client: Any, text: str) -> Task:
    (event,) = [event async for event in client.send_message(_ask(text))]
    task: Task = event.task
    return task


def host_on(store: Path, **options: Any) -> AgentHost:
    return AgentHost(
        "agent", behavior=answer, a2a=True, store=store, session_rate_limit=None, **options
    )


async def test_a_completed_task_is_found_after_a_restart_with_its_artifact_and_owner(
    tmp_path: Path,
) -> None:
    store = tmp_path / "sessions.sqlite3"
    host = host_on(store, tokens=TOKENS)
    async with sdk_client(BASE, ALICE, app=host.app) as alice:
        done = await _send(alice, "one")
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    await host.aclose()

    again = host_on(store, tokens=TOKENS)
    async with sdk_client(BASE, ALICE, app=again.app) as alice:
        found = await alice.get_task(GetTaskRequest(id=done.id))
    assert found.status.state == TaskState.TASK_STATE_COMPLETED
    assert _answer(found) == "answer to one"
    assert found.artifacts[0].metadata["session_id"] == done.artifacts[0].metadata["session_id"]
    async with sdk_client(BASE, BOB, app=again.app) as bob:
        with pytest.raises(TaskNotFoundError):  # still alice's alone
            await bob.get_task(GetTaskRequest(id=done.id))
    await again.aclose()


async def test_each_agent_of_a_multi_agent_host_finds_its_own_tasks_after_a_restart(
    tmp_path: Path,
) -> None:
    from coreagent_sdk.host import MultiAgentHost

    store = tmp_path / "agents.sqlite3"
    agents = {"triage": answer, "billing": answer}
    hosts = MultiAgentHost(agents, a2a=True, store=store, session_rate_limit=None)
    async with sdk_client(BASE, app=hosts.host("triage").app) as client:
        done = await _send(client, "route me")
    await hosts.aclose()
    again = MultiAgentHost(agents, a2a=True, store=store, session_rate_limit=None)
    async with sdk_client(BASE, app=again.host("triage").app) as client:
        found = await client.get_task(GetTaskRequest(id=done.id))
        assert _answer(found) == "answer to route me"
    async with sdk_client(BASE, app=again.host("billing").app) as client:
        with pytest.raises(TaskNotFoundError):  # another agent's part of the file
            await client.get_task(GetTaskRequest(id=done.id))
    await again.aclose()


async def test_a_task_a_temporary_store_would_lose_anyway_is_not_written(tmp_path: Path) -> None:
    host = AgentHost("agent", behavior=answer, a2a=True, session_rate_limit=None)
    async with sdk_client(BASE, app=host.app) as client:
        done = await _send(client, "one")
        assert (await client.get_task(GetTaskRequest(id=done.id))).id == done.id
    path = host.store.path or host.store.file._db[0].path
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT count(*) FROM a2a_tasks").fetchone() == (0,)
    await host.aclose()


async def test_a_task_whose_save_cannot_be_stored_fails_its_request_and_is_not_completed(
    tmp_path: Path,
) -> None:
    """The disk fills between the task's first save and its answer: the SDK's client gets
    the store's error, the task reads as failed saying it was not stored (never completed),
    and after a restart it is failed too: its turn was not run on."""
    store = tmp_path / "sessions.sqlite3"
    host = host_on(store)
    async with sdk_client(BASE, app=host.app, streaming=True) as client:
        stream = client.send_message(_ask("two"))
        first = await anext(stream)
        task_id = first.task.id
        host.store.file.write_fault = disk_full
        with pytest.raises(InternalError, match=FULL):
            async for _ in stream:
                pass
        host.store.file.write_fault = None
        now = await client.get_task(GetTaskRequest(id=task_id))
        assert now.status.state == TaskState.TASK_STATE_FAILED
        assert "could not be stored" in now.status.message.parts[0].text
        assert now.status.message.metadata["kind"] == "unknown"
    async with sdk_client(BASE, app=host.app) as client:
        later = await _send(client, "three")  # room again: the next message is answered
        assert later.status.state == TaskState.TASK_STATE_COMPLETED
    await host.aclose()
    again = host_on(store)
    async with sdk_client(BASE, app=again.app) as client:
        after = await client.get_task(GetTaskRequest(id=task_id))
        assert after.status.state == TaskState.TASK_STATE_FAILED
        assert _answer(after) != "answer to two"
        assert (await client.get_task(GetTaskRequest(id=later.id))).status.state == (
            TaskState.TASK_STATE_COMPLETED
        )
    await again.aclose()


async def test_a_message_whose_task_cannot_be_stored_is_refused_and_runs_no_turn(
    tmp_path: Path,
) -> None:
    host = host_on(tmp_path / "sessions.sqlite3")
    async with sdk_client(BASE, app=host.app) as client:
        await _send(client, "one")
        sessions = set(host.sessions)
        host.store.file.write_fault = disk_full
        with pytest.raises(InternalError, match=FULL):
            await _send(client, "two")
        host.store.file.write_fault = None
        assert set(host.sessions) == sessions  # no session opened, no turn ran
    await host.aclose()


async def test_a_full_disk_fails_a2a_messages_and_they_are_answered_again_with_room(
    tmp_path: Path,
) -> None:
    """A real 1 MiB tmpfs filled to its last byte: messages fail with SQLite's words, what
    was answered before is in the file after a restart, and with room again messages
    complete."""
    from tests.test_host_durability import fill

    with small_disk(tmp_path / "disk", "1m") as disk:
        store = disk / "sessions.sqlite3"
        host = host_on(store)
        async with sdk_client(BASE, app=host.app) as client:
            kept = await _send(client, "before")
            filler = fill(disk)
            refused = ""
            for i in range(50):  # bounded: the full disk refuses a write well before this
                try:
                    await _send(client, f"while full {i}" + "x" * 2000)
                except InternalError as exc:
                    refused = str(exc)
                    break
            assert FULL in refused
            filler.unlink()
            after = await _send(client, "after")
            assert after.status.state == TaskState.TASK_STATE_COMPLETED
        await host.aclose()
        again = host_on(store)
        async with sdk_client(BASE, app=again.app) as client:
            for task in (kept, after):
                found = await client.get_task(GetTaskRequest(id=task.id))
                assert found.status.state == TaskState.TASK_STATE_COMPLETED
                assert _answer(found) == _answer(task)
        await again.aclose()


# --- a real host process, killed with SIGKILL -------------------------------------------

_HOST = r"""
import asyncio, json, os, sys
from coreagent_sdk.host import AgentHost, Identity
from tests.test_a2a_host_durability import TOKENS, answer

host = AgentHost("agent", behavior=answer, a2a=True, store=sys.argv[1], tokens=TOKENS,
                 session_rate_limit=None)
def ready(url):
    os.write(1, (json.dumps({"pid": os.getpid(), "url": url}) + "\n").encode())
asyncio.run(host.serve("127.0.0.1", 0, on_ready=ready, grace=0))
"""


def _spawn(store: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _HOST, str(store)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


@contextlib.asynccontextmanager
async def host_process(store: Path) -> AsyncIterator[tuple[str, int]]:
    """A host serving `store` over loopback in another process: (URL, pid); killed with
    SIGKILL after, if the test did not."""
    proc = _spawn(store)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        assert line, "the host process ended before serving"
        started = json.loads(line)
        assert started["url"].startswith("http://127.0.0.1:")
        yield str(started["url"]), int(started["pid"])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        reap(proc)


@pytest.mark.slow
async def test_tasks_a_killed_host_answered_for_are_found_after_it_restarts(
    tmp_path: Path,
) -> None:
    """SIGKILL with one task completed and two running: after the restart on the same store
    the completed one is there with its artifact, the running ones are failed saying the
    host stopped mid-turn (naming their sessions), and each is its caller's alone."""
    store = tmp_path / "sessions.sqlite3"
    async with host_process(store) as (url, pid):
        async with sdk_client(url, ALICE) as alice:
            done = await _send(alice, "one")
        async with sdk_client(url, BOB, streaming=True) as bob:
            running = []
            for i in range(2):
                stream = bob.send_message(_ask(f"hang {i}"))
                running.append((await anext(stream)).task.id)
                async for event in stream:  # the turn is running: its first chunk came
                    if event.HasField("artifact_update"):
                        break
            os.kill(pid, signal.SIGKILL)  # the streams still open
    async with host_process(store) as (url, _):
        async with sdk_client(url, ALICE) as alice:
            found = await alice.get_task(GetTaskRequest(id=done.id))
            assert found.status.state == TaskState.TASK_STATE_COMPLETED
            assert _answer(found) == "answer to one"
            with pytest.raises(TaskNotFoundError):
                await alice.get_task(GetTaskRequest(id=running[0]))
        async with sdk_client(url, BOB) as bob:
            for task_id in running:
                cut = await bob.get_task(GetTaskRequest(id=task_id))
                assert cut.status.state == TaskState.TASK_STATE_FAILED
                text = cut.status.message.parts[0].text
                assert "the host stopped (or was killed) while this task's turn ran" in text
                assert cut.metadata["session_id"] in text
                assert cut.status.message.metadata["kind"] == "unknown"
            with pytest.raises(TaskNotFoundError):
                await bob.get_task(GetTaskRequest(id=done.id))


async def _client_loop(url: str, seen: dict[str, tuple[int, str]], rng: random.Random) -> None:
    """Stream messages until the host is killed; `seen`: task id -> (last state, answer)."""
    async with sdk_client(url, ALICE, streaming=True) as client:
        for i in range(200):  # bounded: the host is killed long before
            prompt = f"{'slow' if rng.random() < 0.5 else 'quick'} {rng.random():.6f} {i}"
            async for event in client.send_message(_ask(prompt)):
                if event.HasField("task"):
                    seen[event.task.id] = (event.task.status.state, "")
                    task_id = event.task.id
                elif event.HasField("status_update"):
                    state = event.status_update.status.state
                    seen[task_id] = (state, seen[task_id][1])
                elif event.HasField("artifact_update") and event.artifact_update.last_chunk:
                    text = event.artifact_update.artifact.parts[0].text
                    seen[task_id] = (seen[task_id][0], text)


@pytest.mark.slow
async def test_a_host_killed_at_random_moments_keeps_every_task_it_answered_for(
    tmp_path: Path,
) -> None:
    """Clients streaming messages, the host killed with SIGKILL at 4 seeded random moments
    and restarted on its store: every task whose id a client was sent is found; one seen
    completed is completed with the answer seen; every other one is completed or failed."""
    rng = random.Random(36)
    store = tmp_path / "sessions.sqlite3"
    seen: dict[str, tuple[int, str]] = {}
    for _ in range(4):
        async with host_process(store) as (url, pid):
            before = len(seen)
            clients = [
                asyncio.create_task(_client_loop(url, seen, random.Random(rng.random())))
                for _ in range(3)
            ]
            for _ in range(2000):  # bounded: 20 s until this round's clients were told a task
                if len(seen) > before or all(c.done() for c in clients):
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(rng.uniform(0, 0.3))
            os.kill(pid, signal.SIGKILL)
            for result in await asyncio.gather(*clients, return_exceptions=True):
                if isinstance(result, BaseException) and not isinstance(
                    result, (httpx.TransportError, asyncio.TimeoutError)
                ):
                    assert "A2AClient" in type(result).__name__ or isinstance(
                        result, InternalError
                    ), repr(result)
    assert len(seen) > 8, "the clients were told too little to prove anything"
    async with host_process(store) as (url, _), sdk_client(url, ALICE) as client:
        for task_id, (state, text) in seen.items():
            found = await client.get_task(GetTaskRequest(id=task_id))
            if state == TaskState.TASK_STATE_COMPLETED:
                assert found.status.state == state, task_id
                assert _answer(found) == text
            else:
                assert found.status.state in (
                    TaskState.TASK_STATE_COMPLETED,
                    TaskState.TASK_STATE_FAILED,
                ), found
