"""MCP servers live and die with the agent's runtime: started at build, restarted, closed clean.

And what a hostile or broken server does (crash, silence, 10,000 tools, clashing names, a
schema that is not an object, garbage, a grandchild, a huge answer): the agent keeps
serving, and the error names the server and the fix.
"""

from __future__ import annotations

import logging
import os
import resource
from pathlib import Path
from typing import Any

import pytest

from coreagent_sdk import AgentBuilder, AgentConfig, BuilderConfig, RuntimeCache
from coreagent_sdk.host import AgentHost, ModelAgent
from coreagent_sdk.mcp import StdioServer
from coreagent_sdk.models import ScriptedModel, Skill, when

from .test_mcp_tools import Recording, ask, children, pipes, script, tool_results, toolbox

pytest.importorskip("mcp")


def agent_with(*servers: StdioServer, model: Any = None, **options: Any) -> ModelAgent:
    model = model if model is not None else ScriptedModel(when().answer("ok"))
    return ModelAgent(model, skills=[Skill("s", mcp_servers=list(servers))], **options)


async def test_a_server_that_exits_at_start_is_reported_once_by_name_with_its_stderr(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = Recording(
        ScriptedModel(when().call("broken_lookup", q="x").call("toolbox_add", a=1, b=2))
    )
    agent = agent_with(script("broken", "raw.py", "exit"), toolbox(), model=model)
    with caplog.at_level(logging.WARNING, logger="coreagent_sdk.mcp"):
        answer, fleet = await ask(agent)
    try:
        (warning,) = [r for r in caplog.records if r.name == "coreagent_sdk.mcp"]
        said = warning.getMessage()
        assert said.startswith("mcp: server 'broken' exited (exit code 2) before it answered")
        assert "check that" in said and "raw.py" in said  # the fix: the command to check
        assert said.endswith("toolbox: cannot open the database: no such file")  # its stderr
        broken, toolbox_status = agent.mcp_status
        assert not broken.ok and broken.error == said and toolbox_status.ok
        asked, added = tool_results(model)
        assert asked["error"].startswith("broken_lookup: unavailable: mcp: server 'broken' exited")
        assert added == {"result": 3}  # the agent runs on, with the servers that started
        assert answer.endswith("toolbox_add: 3")
    finally:
        await fleet.aclose()


async def test_a_server_that_never_answers_initialize_is_given_up_after_start_timeout() -> None:
    agent = agent_with(script("silent", "raw.py", "silent", start_timeout=0.5))
    await agent.astart()
    try:
        (status,) = agent.mcp_status
        assert not status.ok and "did not start within start_timeout=0.5s" in (status.error or "")
        assert "raise start_timeout" in (status.error or "")
        assert "listening (but never answering)" in (status.error or "")  # its stderr's last line
    finally:
        await agent.aclose()
    assert children() == set()


async def test_a_listing_of_10000_tools_keeps_max_tools_and_says_so() -> None:
    agent = agent_with(script("many", "hostile.py", "many", "10000", max_tools=100))
    await agent.astart()
    try:
        (status,) = agent.mcp_status
        assert status.ok and len(status.tools) == 100 and len(agent.tools) == 101  # + call_peer
        assert status.problems == (
            "mcp: server 'many' lists 10000 tools or more; the first 100 are kept (max_tools)",
        )
    finally:
        await agent.aclose()


async def test_names_that_clash_or_do_not_fit_the_model_are_fixed_or_left_out_reported() -> None:
    agent = agent_with(script("odd-names", "hostile.py", "names"))
    await agent.astart()
    try:
        (status,) = agent.mcp_status
        names = [t.name for t in agent.mcp_tools]
        assert names[:3] == ["odd_names_read-file", "odd_names_read_file", "odd_names_h_llo_w_rld"]
        assert all(len(n) <= 64 for n in names) and len(set(names)) == len(names) == 6
        (problem,) = status.problems
        assert "'read_file' and 'read.file' are both named 'odd_names_read_file'" in problem
        # A tool with a fixed name is still called by its own name on the server.
        by_name = {t.name: t.tool for t in agent.mcp_tools}
        assert by_name["odd_names_h_llo_w_rld"] == "héllo wörld"
    finally:
        await agent.aclose()


async def test_a_name_an_agents_own_tool_has_is_left_out_of_the_servers() -> None:
    def toolbox_add(a: int, b: int) -> int:
        """The agent's own."""
        return a - b

    agent = ModelAgent(
        ScriptedModel(when().answer("ok")),
        tools=[toolbox_add],
        skills=[Skill("s", mcp_servers=[toolbox()])],
    )
    await agent.astart()
    try:
        (status,) = agent.mcp_status
        assert "toolbox_add" not in status.tools
        assert any("'add' would be named 'toolbox_add'" in p for p in status.problems)
    finally:
        await agent.aclose()


async def test_a_listing_whose_schema_is_not_an_object_names_the_server_and_the_field() -> None:
    agent = agent_with(script("raw", "raw.py", "schema"))
    await agent.astart()
    try:
        (status,) = agent.mcp_status
        assert not status.ok
        assert "mcp: server 'raw' answered with what is not MCP" in (status.error or "")
        assert "tools.1.inputSchema.type: Input should be 'object'" in (status.error or "")
    finally:
        await agent.aclose()


async def test_garbage_on_stdout_is_skipped_and_a_fleets_close_leaves_no_process_or_pipe() -> None:
    pipes_before = pipes()
    model = Recording(ScriptedModel(when().call("toolbox_add", a=4, b=4)))
    agent = agent_with(toolbox("toolbox", "garbage"), model=model)
    _, fleet = await ask(agent)
    try:
        assert tool_results(model) == [{"result": 8}]
        assert len(children()) == 1
    finally:
        await fleet.aclose()
    assert children() == set()
    assert pipes() == pipes_before


async def test_a_call_past_call_timeout_is_a_tool_error_and_the_server_answers_the_next() -> None:
    model = Recording(
        ScriptedModel(when().call("toolbox_nap", seconds=30).call("toolbox_add", a=1, b=1))
    )
    agent = agent_with(toolbox(call_timeout=0.5), model=model)
    _, fleet = await ask(agent)
    try:
        napped, added = tool_results(model)
        assert napped["error"] == (
            "toolbox_nap: mcp: server 'toolbox': tool 'nap' did not answer within "
            "call_timeout=0.5s; raise call_timeout or ask for less"
        )
        assert added == {"result": 2}
    finally:
        await fleet.aclose()


async def test_a_server_dying_mid_call_fails_that_call_and_restarts_a_bounded_number_of_times() -> (
    None
):
    model = Recording(
        ScriptedModel(
            when()
            .call("toolbox_die")
            .call("toolbox_add", a=1, b=2)
            .call("toolbox_die")
            .call("toolbox_add", a=1, b=2)
        )
    )
    agent = agent_with(toolbox(max_restarts=1), model=model)
    _, fleet = await ask(agent)
    try:
        died, restarted, died_again, refused = tool_results(model)
        assert "mcp: server 'toolbox' ended during the call" in died["error"]
        assert "it is started again on the next call" in died["error"]
        assert restarted == {"result": 3}
        assert "ended during the call" in died_again["error"]
        assert refused["error"] == (
            "toolbox_add: mcp: server 'toolbox' ended 2 times and is not started again "
            "(max_restarts=1); fix the server, or raise max_restarts"
        )
        (status,) = agent.mcp_status
        assert status.restarts == 1
    finally:
        await fleet.aclose()
    assert children() == set()


@pytest.mark.slow
async def test_a_100_mb_answer_closes_the_connection_naming_the_bound_memory_stays_bounded() -> (
    None
):
    model = Recording(
        ScriptedModel(when().call("toolbox_big", size=100_000_000).call("toolbox_add", a=2, b=2))
    )
    agent = agent_with(toolbox(max_result_bytes=100_000), model=model)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, the peak so far
    _, fleet = await ask(agent)
    try:
        huge, after = tool_results(model)
        over = "answered with a message over 1048576 bytes; the connection was closed"
        assert over in huge["error"]
        assert "raise max_result_bytes or ask for less" in huge["error"]
        assert after == {"result": 4}  # restarted on the next call
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grown < 64 * 1024  # KiB: the peak grew by less than 64 MiB for a 100 MB answer
    finally:
        await fleet.aclose()


async def test_closing_leaves_no_grandchild_a_server_forked(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    server = toolbox("toolbox", "fork", env={"TOOLBOX_GRANDCHILD_PID": str(pid_file)})
    agent = agent_with(server)
    await agent.astart()
    grandchild = int(pid_file.read_text())
    os.kill(grandchild, 0)  # alive while the server is
    await agent.aclose()
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_servers_start_when_the_runtime_is_built_and_eviction_and_close_stop_them() -> None:
    skills = {"box": Skill("box", mcp_servers=[toolbox()])}
    builder = AgentBuilder(
        BuilderConfig(
            factory=lambda spec: ModelAgent.from_spec(spec, ScriptedModel(when().answer("ok"))),
            skill_catalog=skills,
        )
    )
    configs = {n: AgentConfig(n, n, skills=("box",)) for n in ("a", "b")}

    class Loader:
        async def agent_slug(self, agent_id: str) -> str:
            return agent_id

        async def load_config(self, agent_id: str) -> AgentConfig:
            return configs[agent_id]

    pipes_before = pipes()
    cache = RuntimeCache(Loader(), builder, max_instances=1)
    async with cache.lease("a") as a:
        assert a.mcp_status[0].ok  # started by the build, before any turn
        assert len(children()) == 1
    async with cache.lease("b") as b:  # "a" is evicted: its server stops
        assert b.mcp_status[0].ok
    await cache.aclose()
    assert children() == set()
    assert pipes() == pipes_before


async def test_a_host_closing_stops_its_agents_servers_and_a_next_turn_starts_them_again() -> None:
    agent = agent_with(toolbox())
    host = AgentHost("worker", behavior=agent)
    await agent.astart()
    assert len(children()) == 1
    await host.aclose()
    assert children() == set() and agent.mcp_status == ()
    await agent.astart()
    assert agent.mcp_status[0].ok
    await agent.aclose()
    assert children() == set()


async def test_a_command_that_does_not_exist_is_reported_with_the_command_to_check() -> None:
    agent = agent_with(StdioServer("ghost", "/nonexistent/mcp-server-ghost", args=["--x"]))
    await agent.astart()
    try:
        (status,) = agent.mcp_status
        assert not status.ok and "mcp: server 'ghost' failed to start: " in (status.error or "")
        assert "No such file or directory" in (status.error or "")
        fix = "check that '/nonexistent/mcp-server-ghost' with args ['--x']"
        assert fix in (status.error or "")
    finally:
        await agent.aclose()
    assert children() == set()
