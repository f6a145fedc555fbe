"""Every command line of the project refuses a value it cannot use without repeating it.

A token is typed where a variable's name belongs (`--attach-token-env sk-...`), into the
wrong option (`--port $TOKEN`), after a misspelt one, or as an abbreviation of a
`...-env` option; a refusal that quoted it would put it in a terminal's scrollback and a
CI log. The host's, the MCP server's and the simulator's command lines run in-process
here (each refuses before it listens or dials anything).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

import pytest

from coreagent_sdk.errors import InvalidTokenError, TokenUnsetError
from coreagent_sdk.host import AgentHost
from coreagent_sdk.host.__main__ import main as host_main
from coreagent_sdk.mcp.__main__ import main as mcp_main
from simulator.__main__ import main as simulator_main

TOKEN = "sk-proj-" + "Zq7xW2" * 4
BASE32 = "JBSWY3DPEHPK3PXPJBSWY3DP"  # upper-case letters and digits: still no variable name
CLIS: dict[str, tuple[Callable[[list[str]], int], list[str]]] = {
    "host": (host_main, ["tests.host_agents:echo"]),
    "mcp": (mcp_main, ["tests.host_agents:echo"]),
    "simulator": (simulator_main, ["serve"]),
}


def refusal(
    cli: str, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> str:
    """What `cli` says, refusing `argv` (after its target or command), on stderr or in exit."""
    for name in (TOKEN, BASE32, "FLEET_TOKEN_UNSET_HERE"):
        monkeypatch.delenv(name, raising=False)
    main, first = CLIS[cli]
    monkeypatch.setattr(sys, "path", list(sys.path))  # the target's folder goes on it
    # The mcp and simulator commands run their loop (uvloop's, with signal handlers) to read
    # the token: put back what they leave.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    code: object = None
    try:
        code = main([*first, *argv])
    except SystemExit as exc:
        code = exc.code
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    said = capsys.readouterr()
    text = said.out + said.err + (code if isinstance(code, str) else "")
    assert code not in (0, None), text
    return text


@pytest.mark.parametrize(
    ("cli", "argv"),
    [
        ("host", ["--port", TOKEN]),
        ("host", ["--grace", TOKEN]),
        ("host", ["--store-sync", TOKEN]),
        ("mcp", ["--port", TOKEN]),
        ("mcp", ["--timeout", TOKEN]),
        ("mcp", ["--max-response-bytes", TOKEN]),
        ("simulator", ["--port", TOKEN]),
        ("simulator", ["--peers", TOKEN]),
        ("simulator", ["--ttl", TOKEN]),
    ],
)
def test_a_known_options_bad_value_is_named_by_its_option_never_repeated(
    cli: str, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    said = refusal(cli, argv, capsys, monkeypatch)
    assert TOKEN not in said and TOKEN[:10] not in said, said
    assert f"argument {argv[0]}: invalid" in said and "not repeated" in said, said


def test_a_bad_choice_names_the_choices_never_the_value(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    said = refusal("host", ["--store-sync", TOKEN], capsys, monkeypatch)
    assert TOKEN[:10] not in said and "choose from 'normal', 'full'" in said, said
    with pytest.raises(SystemExit):
        simulator_main([TOKEN])  # a token where the command belongs
    said = capsys.readouterr().err
    assert TOKEN[:10] not in said and "choose from 'demo', 'serve'" in said, said


@pytest.mark.parametrize(
    ("cli", "argv"),
    [
        ("host", ["--attach-token-e", TOKEN]),
        ("mcp", ["--hub-token", TOKEN, "--hub", "http://127.0.0.1:9"]),
        ("mcp", ["--http", "--token", TOKEN]),
        ("simulator", ["--token", TOKEN]),
        ("simulator", ["--bogus", TOKEN]),
        ("mcp", [f"--token-env{TOKEN}"]),
    ],
)
def test_no_option_is_abbreviated_and_what_is_not_understood_is_counted_not_quoted(
    cli: str, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--hub-token X` was read as `--hub-token-env X`, and X then named in "$X is unset"."""
    said = refusal(cli, argv, capsys, monkeypatch)
    assert TOKEN not in said and TOKEN[:10] not in said, said
    assert "not understood, not repeated here" in said, said


@pytest.mark.parametrize("value", [TOKEN, BASE32, "ghp_" + "aB3dE" * 6, "lower_case_name"])
@pytest.mark.parametrize(
    ("cli", "argv"),
    [
        ("host", ["--attach-token-env"]),
        ("mcp", ["--http", "--token-env"]),
        ("simulator", ["--token-env"]),
    ],
)
def test_a_token_passed_for_its_variables_name_is_never_echoed_and_the_fix_is_said(
    cli: str,
    argv: list[str],
    value: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(value, raising=False)
    said = refusal(cli, [*argv, value], capsys, monkeypatch)
    assert value not in said and value[:8] not in said, said
    assert "such as FLEET_TOKEN" in said and "export FLEET_TOKEN=<token>" in said, said


@pytest.mark.parametrize(
    ("cli", "argv"),
    [
        ("host", ["--attach-token-env"]),
        ("mcp", ["--http", "--token-env"]),
        ("simulator", ["--token-env"]),
    ],
)
def test_an_unset_variable_with_a_variables_name_is_still_named(
    cli: str, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    said = refusal(cli, [*argv, "FLEET_TOKEN_UNSET_HERE"], capsys, monkeypatch)
    assert "$FLEET_TOKEN_UNSET_HERE" in said and "unset" in said, said


def test_the_api_hides_a_token_given_as_attach_token_env_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN, raising=False)
    with pytest.raises(TokenUnsetError) as refused:
        AgentHost("agent", attach_token_env=TOKEN)
    assert TOKEN[:10] not in str(refused.value) and "FLEET_TOKEN" in str(refused.value)
    monkeypatch.setenv(TOKEN, "two words")  # a set variable with an odd name: its token is bad
    with pytest.raises(InvalidTokenError) as bad:
        AgentHost("agent", attach_token_env=TOKEN)
    assert TOKEN[:10] not in str(bad.value) and "two words" not in str(bad.value)


@pytest.mark.parametrize("main", [host_main, mcp_main], ids=["host", "mcp"])
def test_a_token_given_where_the_target_belongs_is_not_repeated(
    main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m coreagent_sdk.host $TOKEN` (meant: --attach-token-env VAR module:agent)."""
    with pytest.raises(SystemExit) as refused:
        main([TOKEN])
    said = capsys.readouterr().err + str(refused.value.code)
    assert TOKEN[:10] not in said and "module:attribute" in said, said
