"""`python -m coreagent_sdk.mcp` as an MCP host runs it: a process on stdio, or on HTTP.

Each test starts the command in a process of its own, talks to it with the official SDK's
client (or, for bytes no client would send, with bytes), and checks with `ps` that nothing
it started outlives it: after its stdin closes, after SIGTERM, after its parent is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("mcp")
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp_types.jsonrpc import JSONRPCNotification, JSONRPCRequest
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from tests.processes import reap as reap_outputs

pytestmark = pytest.mark.slow  # processes of their own: seconds each on a busy machine

ROOT = pathlib.Path(__file__).resolve().parent.parent
SERVE = [sys.executable, "-m", "coreagent_sdk.mcp"]


def reap(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process if it still runs, and close all three of its pipes."""
    reap_outputs(proc)  # type: ignore[arg-type]
    if proc.stdin is not None:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()


def marker() -> str:
    """A tool name no other process on the machine has in its command line."""
    return f"mcp-test-{uuid.uuid4().hex[:12]}"


def processes_named(mark: str) -> list[str]:
    # -ww: every argument, however wide (ps cuts lines to $COLUMNS, which pytest sets).
    command = ["ps", "-ww", "-eo", "pid,ppid,stat,args"]
    shown = subprocess.run(command, capture_output=True, text=True, check=True)
    return [row for row in shown.stdout.splitlines() if mark in row and "ps -ww" not in row]


def none_left(mark: str, within: float = 10.0) -> list[str]:
    """The processes still named `mark` once `within` seconds passed (or none was left)."""
    deadline = time.monotonic() + within
    while True:  # bounded by the deadline
        left = [line for line in processes_named(mark) if " Z" not in line]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def started(mark: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*SERVE, "tests.mcp_agents:helper", "--name", mark, *extra],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def read_line(proc: subprocess.Popen[bytes], within: float = 10.0) -> bytes:
    """One line of the process's stdout, or AssertionError after `within` seconds."""
    assert proc.stdout is not None
    fd, got = proc.stdout.fileno(), b""
    deadline = time.monotonic() + within
    while not got.endswith(b"\n"):  # bounded by the deadline
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        if not ready:
            raise AssertionError(f"no line within {within} s (got {got!r})")
        more = os.read(fd, 1)
        if not more:
            raise AssertionError(f"stdout closed (got {got!r})")
        got += more
    return got


def line(message: object) -> bytes:
    return message.model_dump_json(by_alias=True, exclude_none=True).encode() + b"\n"  # type: ignore[attr-defined]


INITIALIZE = JSONRPCRequest(
    jsonrpc="2.0",
    id=1,
    method="initialize",
    params=types.InitializeRequestParams(
        protocol_version=LATEST_HANDSHAKE_VERSION,
        capabilities=types.ClientCapabilities(),
        client_info=types.Implementation(name="raw-test", version="1"),
    ).model_dump(by_alias=True, exclude_none=True),
)


async def test_the_sdks_stdio_client_calls_the_command_as_an_mcp_host_configures_it() -> None:
    mark = marker()
    progress: list[str | None] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "coreagent_sdk.mcp", "tests.mcp_agents:helper", "--name", mark],
        cwd=str(ROOT),
    )
    async with Client(params, mode="legacy") as client:
        (tool,) = (await client.list_tools()).tools
        result = await client.call_tool(tool.name, {"request": "hi"}, progress_callback=on_progress)
    assert tool.name == mark
    assert result.content[0].text == "you asked: hi"
    assert result.structured_content["truncated"] is False
    assert progress == ["thinking ", "harder"]
    assert await asyncio.to_thread(none_left, mark) == []


def test_a_line_that_is_not_json_rpc_is_dropped_and_the_server_goes_on() -> None:
    # The SDK's stdio transport drops a line it cannot parse (JSON-RPC 2.0 would answer it
    # with -32700 and id null; docs/differences.md): the next request is answered as usual.
    mark = marker()
    proc = started(mark)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"{this is not json\n" + line(INITIALIZE))
        proc.stdin.flush()
        first = json.loads(read_line(proc))
        proc.stdin.close()  # the host goes away: the server exits by itself
        code = proc.wait(10)
    finally:
        reap(proc)
    assert first["id"] == 1 and first["result"]["serverInfo"]["name"] == mark
    assert code == 0
    assert none_left(mark) == []


def test_sigterm_ends_the_stdio_server_cleanly_with_nothing_left() -> None:
    mark = marker()
    proc = started(mark)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(line(INITIALIZE))
        proc.stdin.flush()
        assert json.loads(read_line(proc))["id"] == 1  # serving
        assert processes_named(mark)  # the check below can see it
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(10)
        stderr = proc.stderr.read().decode() if proc.stderr else ""
    finally:
        reap(proc)
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert none_left(mark) == []


def test_a_server_whose_parent_was_killed_exits_with_nothing_left() -> None:
    mark = marker()
    parent_code = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen({[*SERVE, 'tests.mcp_agents:helper', '--name', mark]!r}, "
        "stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        child = int(read_line(parent))
        seen = processes_named(mark)
        assert any(row.split()[0] == str(child) for row in seen), (child, seen)
        os.kill(parent.pid, signal.SIGKILL)  # its pipes close: the server's stdin ends
        parent.wait(10)
        left = none_left(mark)
    finally:
        reap(parent)
    assert left == []


def test_the_http_command_refuses_a_token_it_was_not_given_in_one_line() -> None:
    mark = marker()
    env = {k: v for k, v in os.environ.items() if k != "MCP_TEST_UNSET_TOKEN"}
    done = subprocess.run(
        [
            *SERVE,
            "tests.mcp_agents:helper",
            "--name",
            mark,
            "--http",
            "--token-env",
            "MCP_TEST_UNSET_TOKEN",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stdout == ""
    (said,) = done.stderr.strip().splitlines()
    assert said.startswith("mcp: token_env names $MCP_TEST_UNSET_TOKEN, which is unset")


async def test_the_printed_host_config_starts_a_server_the_sdks_client_calls_from_elsewhere(
    tmp_path: pathlib.Path,
) -> None:
    mark = marker()
    printed = await asyncio.to_thread(
        subprocess.run,
        [*SERVE, "tests.mcp_agents:helper", "--name", mark, "--print-config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (entry,) = json.loads(printed.stdout)["mcpServers"].values()
    params = StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env={**os.environ, **entry["env"]},
        cwd=str(tmp_path),  # as a host starts it: not from the project's directory
    )
    async with Client(params, mode="legacy") as client:
        result = await client.call_tool(mark, {"request": "from the config"})
    assert entry["args"] == ["-m", "coreagent_sdk.mcp", "tests.mcp_agents:helper", "--name", mark]
    assert result.content[0].text == "you asked: from the config"
    assert await asyncio.to_thread(none_left, mark) == []


def test_a_stray_print_in_an_agent_goes_to_stderr_and_never_into_the_protocol() -> None:
    mark = marker()
    proc = subprocess.Popen(
        [*SERVE, "tests.mcp_agents:prints", "--name", mark],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    initialized = JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")
    call = JSONRPCRequest(
        jsonrpc="2.0",
        id=2,
        method="tools/call",
        params={"name": mark, "arguments": {"request": "go"}},
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(line(INITIALIZE))
        proc.stdin.flush()
        first = json.loads(read_line(proc))
        proc.stdin.write(line(initialized) + line(call))
        proc.stdin.flush()
        second = json.loads(read_line(proc))
        proc.stdin.close()
        code = proc.wait(10)
        stderr = proc.stderr.read().decode() if proc.stderr else ""
    finally:
        reap(proc)
    assert first["id"] == 1
    assert second["id"] == 2 and second["result"]["content"][0]["text"] == "answered"
    assert "a stray line on stdout" in stderr
    assert code == 0


INITIALIZED = JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")


def opening(tool: str) -> bytes:
    """initialize, initialized, and one call of `tool` (which starts the agent's servers)."""
    call = JSONRPCRequest(
        jsonrpc="2.0",
        id=2,
        method="tools/call",
        params={"name": tool, "arguments": {"request": "go"}},
    )
    return line(INITIALIZE) + line(INITIALIZED) + line(call)


def answer_to(proc: subprocess.Popen[bytes], request_id: int) -> dict[str, object]:
    """The response to `request_id`, past any notification (progress) before it."""
    for _ in range(50):  # bounded: a handful of notifications at most
        message = json.loads(read_line(proc, within=60))
        if message.get("id") == request_id:
            return message  # type: ignore[no-any-return]
    raise AssertionError(f"no answer to request {request_id}")


def alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def gone_within(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while alive(pid):  # bounded by the deadline
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def serving_a_forking_agent(
    tmp_path: pathlib.Path, mark: str
) -> tuple[subprocess.Popen[bytes], int]:
    """The command serving `forks`, one call made (its server started): (process, grandchild)."""
    pid_file = tmp_path / "grandchild.pid"
    proc = subprocess.Popen(
        [*SERVE, "tests.mcp_agents:forks", "--name", mark],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TOOLBOX_GRANDCHILD_PID": str(pid_file)},
    )
    assert proc.stdin is not None
    proc.stdin.write(opening(mark))
    proc.stdin.flush()
    assert answer_to(proc, 1)["result"]
    called = answer_to(proc, 2)
    assert "error" not in called, called
    grandchild = int(pid_file.read_text())
    assert alive(grandchild)  # the checks below can see it
    return proc, grandchild


@pytest.mark.parametrize("ending", ["stdin closed", "SIGTERM"])
def test_an_agents_own_servers_and_their_grandchildren_end_with_the_stdio_server(
    ending: str, tmp_path: pathlib.Path
) -> None:
    mark = marker()
    proc, grandchild = serving_a_forking_agent(tmp_path, mark)
    try:
        assert proc.stdin is not None
        if ending == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            proc.stdin.close()
        code = proc.wait(20)
    finally:
        reap(proc)
    assert code == 0
    assert gone_within(grandchild), f"grandchild {grandchild} outlived the server"
    assert none_left(mark) == []


def test_an_agents_own_servers_end_when_the_stdio_servers_parent_is_killed(
    tmp_path: pathlib.Path,
) -> None:
    mark = marker()
    pid_file = tmp_path / "grandchild.pid"
    parent_code = (
        "import os, subprocess, sys, time\n"
        f"child = subprocess.Popen({[*SERVE, 'tests.mcp_agents:forks', '--name', mark]!r}, "
        f"stdin=subprocess.PIPE, stdout=subprocess.PIPE, "
        f"env={{**os.environ, 'TOOLBOX_GRANDCHILD_PID': {str(pid_file)!r}}})\n"
        f"child.stdin.write({opening(mark)!r}); child.stdin.flush()\n"
        "for _ in range(50):\n"
        "    if b'\"id\":2' in child.stdout.readline():\n"
        "        break\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        child = int(read_line(parent, within=60))
        grandchild = int(pid_file.read_text())
        assert alive(child) and alive(grandchild)
        os.kill(parent.pid, signal.SIGKILL)  # its pipes close: the server's stdin ends
        parent.wait(10)
        left = none_left(mark, within=20)
    finally:
        reap(parent)
    assert left == []
    assert gone_within(grandchild), f"grandchild {grandchild} outlived the server"
