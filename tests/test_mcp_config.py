"""mcp.json in the daemon's schema, ${env:NAME}, and the names MCP tools reach the model under.

Pure functions, checked against the daemon's rules (pkg/mcp/config.go, pkg/agentenv,
pkg/mcp/namespace.go): the same file is read the same way and fails with the same words.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coreagent_sdk import CallPeer, StaticDirectory
from coreagent_sdk._scrub import register, scoped
from coreagent_sdk.mcp import (
    MAX_TOOL_NAME,
    HttpServer,
    StdioServer,
    namespaced,
    parse_mcp_json,
    read_mcp_json,
    sanitize_prefix,
)
from coreagent_sdk.mcp._env import expand, server_environment, server_headers
from coreagent_sdk.mcp._namespace import unique_names


def write(folder: Path, body: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = body if isinstance(body, str) else json.dumps(body)
    (folder / "mcp.json").write_text(text, encoding="utf-8")
    return folder


def test_the_daemons_documented_example_reads_as_one_stdio_and_one_http_server() -> None:
    servers = parse_mcp_json(
        json.dumps(
            {
                "version": 1,
                "servers": {
                    "filesystem": {
                        "transport": "stdio",
                        "command": "mcp-server-filesystem",
                        "args": ["--root", "/tmp"],
                        "env": {"LOG_LEVEL": "info"},
                    },
                    "github": {
                        "transport": "http",
                        "url": "https://api.githubcopilot.com/mcp/",
                        "headers": {"Authorization": "Bearer ${env:GITHUB_TOKEN}"},
                        "read_only": True,
                    },
                },
            }
        )
    )
    fs, gh = servers
    assert fs == StdioServer(
        "filesystem", "mcp-server-filesystem", args=("--root", "/tmp"), env={"LOG_LEVEL": "info"}
    )
    assert isinstance(gh, HttpServer) and gh.url == "https://api.githubcopilot.com/mcp/"
    assert dict(gh.headers) == {"Authorization": "Bearer ${env:GITHUB_TOKEN}"} and gh.read_only
    assert "Bearer" not in repr(gh)  # a header's value may hold a token: a repr shows names


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"transport": "smoke-signals"}, 'mcp: server "x": unknown transport "smoke-signals"'),
        ({"command": "a"}, 'mcp: server "x": transport is required ("stdio" or "http")'),
        ({"transport": "stdio"}, 'mcp: server "x": stdio transport requires command'),
        (
            {"transport": "stdio", "command": "a", "url": "https://b"},
            'mcp: server "x": stdio transport must not set url',
        ),
        ({"transport": "http"}, 'mcp: server "x": http transport requires url'),
        (
            {"transport": "http", "url": "https://b", "command": "a"},
            'mcp: server "x": http transport must not set command',
        ),
        (
            {"transport": "stdio", "command": "a", "auth": {"google_oauth": {"scopes": ["s"]}}},
            'mcp: server "x": auth is only valid for http transport',
        ),
    ],
)
def test_a_server_that_is_not_one_whole_transport_is_refused_in_the_daemons_words(
    spec: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        parse_mcp_json(json.dumps({"version": 1, "servers": {"x": spec}}))


def test_unknown_fields_are_refused_naming_them_and_the_fields_there_are() -> None:
    # The Go decoder drops an unknown field silently, so a typo ("read_onyl") loses a
    # setting without a word; here it is refused, and the daemon's own knobs still read.
    body = {"version": 1, "servers": {"fs": {"transport": "stdio", "command": "a", "read_onyl": 1}}}
    refused = r"unknown field\(s\) 'read_onyl' \(a server takes .*read_only"
    with pytest.raises(ValueError, match=refused):
        parse_mcp_json(json.dumps(body), "p/mcp.json")
    with pytest.raises(ValueError, match=r"^mcp: p/mcp.json: unknown field\(s\) 'sevrers'"):
        parse_mcp_json(json.dumps({"version": 1, "sevrers": {}}), "p/mcp.json")
    knobs = {"version": 1, "agentic_wrap": False, "agentic_wrap_threshold": 100, "servers": {}}
    assert parse_mcp_json(json.dumps(knobs)) == ()


@pytest.mark.parametrize("version", [2, 0, "1", True])
def test_a_version_other_than_1_is_refused(version: object) -> None:
    with pytest.raises(ValueError, match="is not supported; this schema is version 1"):
        parse_mcp_json(json.dumps({"version": version, "servers": {}}))


def test_a_file_that_is_not_json_names_the_file() -> None:
    with pytest.raises(ValueError, match=r"^mcp: parse /x/mcp.json: "):
        parse_mcp_json("{nope", "/x/mcp.json")
    with pytest.raises(ValueError, match="must hold an object"):
        parse_mcp_json("[]")


def test_the_project_wins_a_name_both_declare_and_home_fills_in_the_rest(tmp_path: Path) -> None:
    project = write(
        tmp_path / "project" / ".agents",
        {"version": 1, "servers": {"shared": {"transport": "stdio", "command": "project-cmd"}}},
    )
    home = write(
        tmp_path / "home" / ".agents",
        {
            "version": 1,
            "servers": {
                "shared": {"transport": "stdio", "command": "home-cmd"},
                "home-only": {"transport": "stdio", "command": "h"},
            },
        },
    )
    servers = read_mcp_json(project, home)
    assert [(s.name, getattr(s, "command", "")) for s in servers] == [
        ("home-only", "h"),
        ("shared", "project-cmd"),
    ]
    assert read_mcp_json(None, home)[1].command == "home-cmd"  # type: ignore[union-attr]
    assert read_mcp_json(tmp_path / "neither", tmp_path / "nor") == ()  # no file: no servers


def test_a_broken_home_file_fails_the_load_as_the_daemons_loadall_does(tmp_path: Path) -> None:
    project = write(tmp_path / "p", {"version": 1, "servers": {}})
    home = write(tmp_path / "h", "{")
    with pytest.raises(ValueError, match=f"mcp: parse {tmp_path / 'h' / 'mcp.json'}"):
        read_mcp_json(project, home)


def test_env_references_expand_the_skills_secrets_first_then_the_environment() -> None:
    environ = {"HOME": "/home/u", "TOKEN": "from-env"}
    secrets = {"TOKEN": "from-skill"}
    assert expand("${env:HOME}/x", secrets, environ) == "/home/u/x"
    assert expand("Bearer ${env:TOKEN}", secrets, environ) == "Bearer from-skill"
    assert expand("[${env:UNSET}]", secrets, environ) == "[]"  # shell semantics, the daemon's
    # Only ${env:NAME} with a shell identifier is a reference; the rest stays as written.
    assert expand("$HOME ${HOME} ${env:1X} ${env:}", secrets, environ) == (
        "$HOME ${HOME} ${env:1X} ${env:}"
    )


def test_a_header_that_expands_empty_is_not_sent() -> None:
    headers = {"Authorization": "Bearer ${env:T}", "X-Empty": "${env:UNSET}"}
    assert server_headers(headers, {"T": "abc"}, {}) == {"Authorization": "Bearer abc"}


def test_a_stdio_servers_environment_has_its_skills_secrets_and_none_of_the_fleets() -> None:
    with scoped():
        other_agents = "other-agent-secret-81f0a2"
        register(other_agents)
        CallPeer(StaticDirectory([]), token_env="FLEET_TOKEN_MCPTEST")
        parent = {
            "PATH": "/bin",
            "FLEET_TOKEN_MCPTEST": "fleet-token-value",
            "SOMEONE_ELSES": other_agents,
        }
        env = server_environment(
            {"ROOT": "${env:PATH}", "LEAK": "${env:FLEET_TOKEN_MCPTEST}"},
            {"API_KEY": "mine-4c1e"},
            parent,
        )
    assert env["PATH"] == "/bin" and env["ROOT"] == "/bin"
    assert env["API_KEY"] == "mine-4c1e"
    assert "FLEET_TOKEN_MCPTEST" not in env and "SOMEONE_ELSES" not in env
    assert env["LEAK"] == ""  # not even by reference
    assert "fleet-token-value" not in json.dumps(env)


def test_a_prefix_keeps_letters_digits_and_underscores_as_the_daemons_sanitizer() -> None:
    cases = {
        "github": "github",
        "my-server": "my_server",
        "file.system": "file_system",
        "abc 123": "abc_123",
        "_alpha": "_alpha",
    }
    assert {name: sanitize_prefix(name) for name in cases} == cases
    assert namespaced("filesystem", "read_file") == "filesystem_read_file"
    assert namespaced("my-server", "read-file") == "my_server_read-file"  # the daemon's name


def test_a_tool_name_outside_the_models_charset_or_over_64_characters_is_made_to_fit() -> None:
    assert namespaced("s", "héllo wörld") == "s_h_llo_w_rld"
    long_a, long_b = namespaced("s", "n" * 80), namespaced("s", "n" * 81)
    assert len(long_a) == len(long_b) == MAX_TOOL_NAME
    assert long_a != long_b and long_a.startswith("s_nnn")
    exactly = "t" * (MAX_TOOL_NAME - 2)
    assert namespaced("s", exactly) == "s_" + exactly  # at the limit: untouched


def test_names_that_collide_once_namespaced_keep_the_first_and_report_the_rest() -> None:
    kept, problems = unique_names("fs", ["read_file", "read.file", "write"], taken=["fs_write"])
    assert kept == {"fs_read_file": "read_file"}
    first, second = problems
    assert "tools 'read_file' and 'read.file' are both named 'fs_read_file'" in first
    assert "rename one on the server" in first
    assert "'write' would be named 'fs_write', which another tool of this agent has" in second


def test_importing_the_sdk_or_declaring_servers_does_not_import_the_mcp_sdk() -> None:
    import subprocess
    import sys

    code = (
        "import sys, coreagent_sdk, coreagent_sdk.host, coreagent_sdk.mcp, simulator\n"
        "from coreagent_sdk.models import Skill\n"
        "Skill('s', mcp_servers=coreagent_sdk.mcp.parse_mcp_json("
        '\'{"servers": {"a": {"transport": "stdio", "command": "x"}}}\'))\n'
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_skill_refuses_what_is_not_an_mcp_server() -> None:
    from coreagent_sdk.models import Skill

    with pytest.raises(TypeError, match="mcp_servers holds 'npx', not an MCP server"):
        Skill("s", mcp_servers=["npx"])
