"""A fleet agent uses MCP servers' tools as the daemon does: named, gated, bounded, scoped, closed.

The servers are small scripts written with the official MCP SDK (tests/mcp_servers/), run
as real child processes over stdio: each start costs about a second, so one agent serves
several checks where that is honest, and the heaviest are marked slow.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from coreagent_sdk import AllowList
from coreagent_sdk.host import ModelAgent
from coreagent_sdk.mcp import HttpServer, StdioServer
from coreagent_sdk.models import Message, ModelReply, ScriptedModel, Skill, ToolSpec, when
from simulator import Fleet

pytest.importorskip("mcp")

# Imported with the module, as tests/test_tree_spans.py does: the SDK's import installs a log
# filter, which the suite's process-state check would otherwise see a test leave behind.
try:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
except ImportError:  # pragma: no cover - the otel extra is not installed
    TracerProvider = None  # type: ignore[assignment,misc]

SERVERS = Path(__file__).parent / "mcp_servers"
# Starting Python and the MCP SDK takes about a second; on a loaded machine, more.
START = 60.0


def toolbox(name: str = "toolbox", *args: str, **options: Any) -> StdioServer:
    options.setdefault("start_timeout", START)
    return StdioServer(name, sys.executable, args=[str(SERVERS / "toolbox.py"), *args], **options)


def script(name: str, path: str, *args: str, **options: Any) -> StdioServer:
    options.setdefault("start_timeout", START)
    return StdioServer(name, sys.executable, args=[str(SERVERS / path), *args], **options)


def children() -> set[int]:
    """The pids of this process's live children (zombies count: they are not reaped)."""
    me = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me:
            found.add(int(entry))
    return found


def pipes() -> int:
    """How many pipes this process holds open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
        except OSError:
            continue
    return count


class Recording:
    """A model that plays `inner` and keeps the tools it was offered and what it was sent."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.offered: list[ToolSpec] = []
        self.sent: list[Message] = []

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        self.offered = list(tools)
        self.sent = list(messages)
        return await self.inner.complete(messages, tools)


def tool_results(model: Recording) -> list[dict[str, Any]]:
    """What the model read back from each tool, in order."""
    return [json.loads(m.text) for m in model.sent if m.role == "tool"]


def exported(fleet: Fleet) -> dict[str, dict[str, Any]]:
    """Each span the fleet's call tree exports, by name: its attributes."""
    if TracerProvider is None:
        pytest.skip("needs opentelemetry-sdk (the otel extra)")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # the test's own: the global one is never set
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    fleet.calls.tree().export_spans(provider)
    return {span.name: dict(span.attributes or {}) for span in exporter.get_finished_spans()}


async def ask(agent: ModelAgent, prompt: str = "go") -> tuple[str, Fleet]:
    fleet = Fleet()
    fleet.add_peer("worker", agent)
    result = await fleet.call_peer(timeout=120).acall(peer="worker", prompt=prompt)
    return result.response, fleet


async def test_a_servers_tools_reach_the_model_namespaced_with_their_schemas_and_answer() -> None:
    model = Recording(
        ScriptedModel(
            when().call("toolbox_add", a=2, b=3).call("toolbox_look").call("toolbox_echo", text=7)
        )
    )
    agent = ModelAgent(model, skills=[Skill("box", mcp_servers=[toolbox()])])
    answer, fleet = await ask(agent)
    try:
        offered = {spec.name: spec for spec in model.offered}
        assert {"call_peer", "toolbox_add", "toolbox_look", "toolbox_getenv"} <= set(offered)
        add = offered["toolbox_add"]
        assert add.description == "Add two integers."
        assert add.parameters["properties"]["a"]["type"] == "integer"
        assert add.parameters["required"] == ["a", "b"]
        lines = answer.splitlines()
        assert lines[0] == "toolbox_add: 5" and lines[1] == "toolbox_look: seen"
        # The server checks arguments against its schema: a refusal is a tool error.
        assert lines[2].startswith("toolbox_echo failed: toolbox_echo: ")
        assert "echoArguments" in lines[2]
        # read_only: the tool's own readOnlyHint, else the server's word (false here).
        read_only = {t.name: t.read_only for t in agent.mcp_tools}
        assert read_only["toolbox_look"] is True and read_only["toolbox_add"] is False
        (record,) = fleet.calls.records()
        tools = [s for s in record.steps if s.kind == "tool"]
        assert [(s.name, s.server) for s in tools][:2] == [
            ("toolbox_add", "toolbox"),
            ("toolbox_look", "toolbox"),
        ]
        assert tools[0].sent == '{"a": 2, "b": 3}' and tools[0].received == '{"result": 5}'
        assert tools[2].error is not None and tools[2].error.startswith("toolbox_echo: ")
        spans = exported(fleet)
        add_span = spans["execute_tool toolbox_add"]
        assert add_span["gen_ai.tool.type"] == "extension"  # an MCP tool, not a function
        assert add_span["mcp.method.name"] == "tools/call"
        assert add_span["gen_ai.tool.name"] == "toolbox_add"
    finally:
        await fleet.aclose()


async def test_a_servers_read_only_marks_every_tool_that_does_not_say_otherwise() -> None:
    agent = ModelAgent(
        ScriptedModel(when().answer("ok")),
        skills=[Skill("box", mcp_servers=[toolbox(read_only=True)])],
    )
    await agent.astart()
    try:
        assert all(t.read_only for t in agent.mcp_tools) and len(agent.mcp_tools) > 5
        assert agent.mcp_tools[0].server == "toolbox"
    finally:
        await agent.aclose()


async def test_each_call_asks_the_agents_gate_under_the_daemons_mcp_namespace() -> None:
    asked: list[tuple[str, str]] = []
    allow = AllowList(["mcp:toolbox_add"])

    def gate(tool: str, name: str) -> None:
        asked.append((tool, name))
        allow(tool, name)

    model = ScriptedModel(when().call("toolbox_add", a=1, b=1).call("toolbox_pid"))
    agent = ModelAgent(model, skills=[Skill("box", mcp_servers=[toolbox()])], gate=gate)
    answer, fleet = await ask(agent)
    try:
        assert asked == [("mcp", "toolbox_add"), ("mcp", "toolbox_pid")]
        assert answer.splitlines()[0] == "toolbox_add: 2"
        refused = answer.splitlines()[1]
        assert "not allowed" in refused and "'mcp:toolbox_pid'" in refused
    finally:
        await fleet.aclose()


async def test_two_agents_get_two_processes_each_with_only_its_own_skills_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coreagent_sdk import CallPeer, StaticDirectory

    monkeypatch.setenv("FLEET_TOKEN_FOR_MCP_TEST", "fleet-credential-5b2e7d")
    caller = CallPeer(StaticDirectory([]), token_env="FLEET_TOKEN_FOR_MCP_TEST")
    secrets = {"alice": "alice-key-8c41f0e2d9", "bob": "bob-key-17a5c3e6b0"}

    models = {
        who: Recording(
            ScriptedModel(
                when()
                .call("toolbox_digest", name="API_KEY")
                .call("toolbox_env_names")
                .call("toolbox_pid")
                .call("toolbox_getenv", name="API_KEY")
            )
        )
        for who in secrets
    }

    def agent(who: str) -> ModelAgent:
        skills = [
            Skill("box", mcp_servers=[toolbox()], secrets=["API_KEY"]),
            Skill("other", secrets=["OTHER"]),
        ]
        return ModelAgent(
            models[who],
            skills=skills,
            secrets={"API_KEY": secrets[who], "OTHER": f"{who}-other-0f9d"},
        )

    (a_answer, a_fleet), (b_answer, b_fleet) = await asyncio.gather(
        ask(agent("alice")), ask(agent("bob"))
    )
    try:
        pids = set()
        for who, model in models.items():
            digest, names, pid, echoed = tool_results(model)
            assert digest["result"] == hashlib.sha256(secrets[who].encode()).hexdigest()
            assert "API_KEY" in names["result"]
            assert "OTHER" not in names["result"]  # another skill's secret: not given
            assert "FLEET_TOKEN_FOR_MCP_TEST" not in names["result"]  # the fleet's: never
            assert echoed == {"result": "[redacted]"}  # echoed back: scrubbed
            pids.add(pid["result"])
        assert len(pids) == 2
        shown = repr(a_fleet.calls.records()) + repr(b_fleet.calls.records()) + a_answer + b_answer
        assert all(secret not in shown for secret in secrets.values())
    finally:
        await asyncio.gather(a_fleet.aclose(), b_fleet.aclose(), caller.aclose())


async def test_a_result_over_max_result_bytes_is_cut_and_says_how_much_there_was() -> None:
    model = Recording(
        ScriptedModel(when().call("toolbox_big", size=5000).call("toolbox_big", size=1000))
    )
    agent = ModelAgent(model, skills=[Skill("box", mcp_servers=[toolbox(max_result_bytes=1000)])])
    _, fleet = await ask(agent)
    try:
        cut, whole = tool_results(model)
        assert cut["result"] == "x" * 1000 and cut["truncated"] is True
        assert "5000 bytes; the first 1000 are shown (max_result_bytes)" in cut["note"]
        assert whole == {"result": "x" * 1000}  # at the bound: whole, structured as sent
    finally:
        await fleet.aclose()


async def test_an_http_server_is_sent_its_headers_with_the_skills_secret_expanded() -> None:
    from .mcp_servers.http_box import served

    token = "http-secret-2f7c9a1e55"
    async with served() as url:
        model = Recording(
            ScriptedModel(when().call("box_add", a=20, b=22).call("box_authorization"))
        )
        server = HttpServer(
            "box", url, headers={"Authorization": "Bearer ${env:BOX_TOKEN}"}, start_timeout=START
        )
        agent = ModelAgent(
            model,
            skills=[Skill("box", mcp_servers=[server], secrets=["BOX_TOKEN"])],
            secrets={"BOX_TOKEN": token},
        )
        _, fleet = await ask(agent)
        try:
            added, authorization = tool_results(model)
            assert added == {"result": 42}
            expected = hashlib.sha256(f"Bearer {token}".encode()).hexdigest()
            assert authorization == {"result": expected}
            assert agent.mcp_status[0].transport == "http"
            assert token not in repr(fleet.calls.records()) + repr(server)
        finally:
            await fleet.aclose()


def test_the_guides_example_runs_as_a_user_runs_it() -> None:
    import subprocess

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "mcp" / "fleet_with_notes.py")],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "['notes_topics', 'notes_read', 'notes_add']"
    assert "notes_add: noted under deploys" in done.stdout
    assert "└── keeper finished" in done.stdout and "2 tool calls" in done.stdout
