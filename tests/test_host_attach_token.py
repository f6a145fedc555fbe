"""A host with one shared attach token, as a daemon started with `--attach-token`.

Each test names the core-agent Go function it pins. The reference for the
401's shape is the daemon's own registry behind `-auth transport` in
../shared/interop (its scenario E prints it): `401 unauthorized`,
`WWW-Authenticate: Bearer realm="attach"`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from coreagent_sdk import ASGITransport
from coreagent_sdk.errors import InvalidTokenError, TokenUnsetError
from coreagent_sdk.host import AgentHost, Identity, MultiAgentHost, PeerRegistry
from coreagent_sdk.host.__main__ import main
from tests.processes import reap

ROOT = Path(__file__).resolve().parent.parent
JSON = {"Content-Type": "application/json"}
SHARED = "shared-attach-" + "7c1e9a" * 4
VAR = "COREAGENT_TEST_ATTACH_TOKEN"


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> str:
    """The shared token, in the variable `VAR` for this test only."""
    monkeypatch.setenv(VAR, SHARED)
    return SHARED


def client(host: AgentHost) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=ASGITransport(host.app), base_url="http://agent.test")


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Authorization": f"Bearer {SHARED}"}, 201),
        ({"Authorization": f"Bearer   {SHARED}  "}, 201),  # TrimSpace after the prefix
        ({"X-Attach-Token": SHARED}, 201),
        ({"X-Attach-Token": SHARED, "Authorization": "Bearer wrong"}, 201),
        ({"X-Attach-Token": "wrong", "Authorization": f"Bearer {SHARED}"}, 401),
        ({"Authorization": f"bearer {SHARED}"}, 401),  # "Bearer " as written
        ({"Authorization": f"Basic {SHARED}"}, 401),
        ({"Authorization": SHARED}, 401),
        ({"Authorization": "Bearer"}, 401),
        ({"Authorization": f"Bearer {SHARED}x"}, 401),
        ({}, 401),
    ],
)
async def test_every_request_needs_the_shared_token_read_as_check_attach_token_reads_it(
    shared: str, headers: dict[str, str], status: int
) -> None:
    """Pins `pkg/attach/auth.go` `checkAttachToken` (a non-empty `X-Attach-Token` decides
    alone, right or wrong; else `extractBearer`: the `Bearer ` prefix as written, the rest
    trimmed, compared in constant time) and `writeAttachUnauthorized`'s 401."""
    host = AgentHost("agent", attach_token_env=VAR, session_rate_limit=None)
    async with client(host) as http:
        answer = await http.post("/sessions", headers={**JSON, **headers})
    assert answer.status_code == status, answer.text
    if status == 401:
        assert answer.text == "unauthorized\n"
        assert answer.headers["www-authenticate"] == 'Bearer realm="attach"'
        assert answer.headers["content-type"] == "text/plain; charset=utf-8"
        assert answer.headers["x-content-type-options"] == "nosniff"
    await host.aclose()


# Go's strings.TrimSpace trims Unicode white space from UTF-8 text: a byte that is not UTF-8
# (a lone 0xA0 or 0x85, which Python's latin-1 header text reads as NBSP or NEL) is no space
# and stays, making the token wrong; NBSP, NEL or EM SPACE written as UTF-8 are spaces.
@pytest.mark.parametrize(
    ("around", "status"),
    [
        ((b"", b"\xa0"), 401),
        ((b"", b"\x85"), 401),
        ((b"\xa0", b""), 401),
        ((b"", "\u00a0".encode()), 201),
        ((b"", "\u0085".encode()), 201),
        (("\u2003\u3000".encode(), "\u2003".encode()), 201),
        ((b"\t \x0b\x0c", b" \t"), 201),
        ((b"", b"\x1c"), 401),  # Python's str.strip() takes it for a space; Go does not
        ((b"", "\u200b".encode()), 401),  # zero width space: not white space in Go either
    ],
    ids=[
        "lone-a0",
        "lone-85",
        "lone-a0-before",
        "utf8-nbsp",
        "utf8-nel",
        "em-ideographic",
        "ascii",
        "file-separator",
        "zero-width",
    ],
)
async def test_the_bearer_token_is_trimmed_as_go_trims_utf_8_text(
    shared: str, around: tuple[bytes, bytes], status: int
) -> None:
    """Pins `pkg/attach/auth.go` `extractBearer` (`strings.TrimSpace`) on the raw header
    bytes; neither way lets a wrong token in, but code that passed against a host must
    pass against a daemon (the host trimmed a lone 0xA0 and kept a UTF-8 NBSP)."""
    host = AgentHost("agent", attach_token_env=VAR, session_rate_limit=None)
    before, after = around
    bearer = b"Bearer " + before + shared.encode() + after
    async with client(host) as http:
        answer = await http.post("/sessions", headers={**JSON, "Authorization": bearer})
        per_caller = AgentHost("agent", tokens={shared: Identity("alice")})
        async with httpx.AsyncClient(
            transport=ASGITransport(per_caller.app), base_url="http://agent.test"
        ) as other:
            whoami = await other.get("/whoami", headers={"Authorization": bearer})
        await per_caller.aclose()
    assert answer.status_code == status, answer.text
    assert whoami.status_code == (200 if status == 201 else 401), whoami.text  # extractToken
    await host.aclose()


async def test_a_hub_with_the_shared_token_refuses_its_registry_as_the_daemons_does(
    shared: str,
) -> None:
    """Pins `AuthConfig.Middleware` in front of `peerHandlers` (the interop harness's
    `gohub -auth transport`): reads and writes of `/peers` need the token; a lower-case
    scheme is refused (`extractBearer`)."""
    hub = AgentHost("hub", registry=PeerRegistry(), attach_token_env=VAR)
    body = {"name": "p", "endpoint": "http://127.0.0.1:9/"}
    async with client(hub) as http:
        assert (await http.get("/peers")).status_code == 401
        lower = await http.get("/peers", headers={"Authorization": f"bearer {shared}"})
        assert lower.status_code == 401
        assert lower.headers["www-authenticate"] == 'Bearer realm="attach"'
        assert (await http.post("/peers", json=body)).status_code == 401
        good = {"Authorization": f"Bearer {shared}"}
        assert (await http.post("/peers", json=body, headers=good)).status_code == 201
        listed = await http.get("/peers", headers=good)
        assert [p["name"] for p in listed.json()["peers"]] == ["p"]
    await hub.aclose()


async def test_the_shared_token_is_checked_before_the_callers_own(shared: str) -> None:
    """Pins `Server.Bind`'s order: `AuthConfig.Middleware` (realm attach) wraps
    `callerMiddlewareWithConfig` (realm attach-multisession). Both read the same headers
    (`extractToken`), so a caller's token must be the shared one too to pass both."""
    tokens = {shared: Identity("operator"), "tok-alice": Identity("alice")}
    host = AgentHost("agent", tokens=tokens, attach_token_env=VAR, session_rate_limit=None)
    async with client(host) as http:
        alice = await http.post("/sessions", headers={**JSON, "Authorization": "Bearer tok-alice"})
        assert alice.status_code == 401
        assert alice.headers["www-authenticate"] == 'Bearer realm="attach"'
        ok = await http.post("/sessions", headers={**JSON, "Authorization": f"Bearer {shared}"})
        assert ok.status_code == 201 and ok.json()["user"] == "operator"
    await host.aclose()


async def test_whoami_past_the_shared_token_says_bearer(shared: str) -> None:
    """Pins `callerMiddlewareWithConfig`'s `transportBearerConfigured`: the default caller
    that got past the shared token was verified by a bearer token."""
    host = AgentHost("agent", attach_token_env=VAR)
    async with client(host) as http:
        answer = await http.get("/whoami", headers={"Authorization": f"Bearer {shared}"})
    assert answer.json() == {"identity": "anon", "source": "bearer"}
    await host.aclose()
    async with client(AgentHost("open")) as http:
        assert (await http.get("/whoami")).json() == {"identity": "anon", "source": "anonymous"}


async def test_the_card_declares_the_bearer_scheme_and_needs_no_token(shared: str) -> None:
    """Pins `pkg/attach/agentcard.go` `deriveSecurity` (a bearer token: one `http` scheme
    named `bearer` and one requirement naming it, placed after `capabilities` as
    `agentCardWire` orders them) and `cardBypass` (discovery needs no credential)."""
    host = AgentHost("agent", description="Triage.", attach_token_env=VAR)
    async with client(host) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
    assert card["securitySchemes"] == {"bearer": {"type": "http", "scheme": "Bearer"}}
    assert card["security"] == [{"bearer": []}]
    keys = list(card)
    assert keys.index("capabilities") + 1 == keys.index("securitySchemes")
    assert keys.index("security") + 1 == keys.index("defaultInputModes")
    await host.aclose()
    async with client(AgentHost("open", description="Triage.")) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
    assert "securitySchemes" not in card and "security" not in card


def test_the_token_is_read_from_its_variable_and_never_shown(
    shared: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = AgentHost("agent", attach_token_env=VAR)
    assert host.attach_token_env == VAR
    assert shared not in repr(host)
    public = {k: v for k, v in vars(host).items() if not k.startswith("_")}
    assert shared not in repr(public)
    monkeypatch.delenv(VAR)
    with pytest.raises(TokenUnsetError, match=rf"attach_token_env names \${VAR}, which is unset"):
        AgentHost("agent", attach_token_env=VAR)
    monkeypatch.setenv(VAR, "two words")
    with pytest.raises(InvalidTokenError) as refused:
        AgentHost("agent", attach_token_env=VAR)
    assert "two words" not in str(refused.value)


async def test_a_multi_agent_host_gives_every_agent_the_shared_token(shared: str) -> None:
    host = MultiAgentHost({"a": None, "b": None}, attach_token_env=VAR)  # type: ignore[dict-item]
    for name in ("a", "b"):
        async with httpx.AsyncClient(
            transport=ASGITransport(host.app(name)), base_url="http://agent.test"
        ) as http:
            assert (await http.get("/sessions")).status_code == 401
            good = await http.get("/sessions", headers={"X-Attach-Token": shared})
            assert good.status_code == 200
    await host.aclose()


def test_a_multi_agent_host_reads_the_variable_when_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VAR, raising=False)
    with pytest.raises(TokenUnsetError, match=rf"\${VAR}"):
        MultiAgentHost({}, attach_token_env=VAR)


def test_the_command_line_takes_the_tokens_variable_never_the_token(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["tests.host_agents:upper", "--attach-token", SHARED])
    assert refused.value.code == 2
    said = capsys.readouterr().err
    assert "--attach-token-env" in said and SHARED not in said


@pytest.mark.parametrize(
    "argv",
    [
        ["--attach_token", SHARED],
        ["--attach-tokens", SHARED],
        [f"--attach-token{SHARED}"],
        ["--", "--attach-token", SHARED],
        [SHARED],
        ["--port", "7", SHARED],
    ],
    ids=["underscore", "plural", "glued", "after-dashes", "bare", "among-others"],
)
def test_the_command_line_never_repeats_an_argument_it_does_not_know(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """argparse's "unrecognized arguments: ..." quoted them, a token typed into the wrong
    option included; the refusal says how many and where to look, and never what."""
    with pytest.raises(SystemExit) as refused:
        main(["tests.host_agents:upper", *argv])
    assert refused.value.code == 2
    said = capsys.readouterr().err
    assert SHARED not in said and SHARED[:8] not in said, said
    assert "python -m coreagent_sdk.host: error: " in said and "--help" in said, said


def test_the_command_line_names_a_known_options_bad_value_by_its_option_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A value is never repeated, even where no token is expected (tests/test_cli_never_...)."""
    with pytest.raises(SystemExit):
        main(["tests.host_agents:upper", "--port", "eighty"])
    said = capsys.readouterr().err
    assert "argument --port: invalid int value, not repeated" in said and "eighty" not in said


@pytest.mark.slow
def test_the_command_line_serves_behind_the_shared_token() -> None:
    """`python -m coreagent_sdk.host ... --attach-token-env NAME`, as users run it."""
    env = {**os.environ, VAR: SHARED, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "coreagent_sdk.host", "tests.host_agents:echo"]
    argv += ["--attach-token-env", VAR, "--description", "Echo."]
    with subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            url = json.loads(proc.stdout.readline())["url"]
            with httpx.Client(base_url=url, timeout=10) as http:
                refused = http.get("/sessions")
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"] == 'Bearer realm="attach"'
                good = http.get("/sessions", headers={"X-Attach-Token": SHARED})
                assert good.status_code == 200
                card = http.get("/.well-known/agent-card.json").json()
                assert card["security"] == [{"bearer": []}]
            proc.terminate()
            out, err = proc.communicate(timeout=15)
            assert proc.returncode == 0, err
            assert SHARED not in out + err
        finally:
            reap(proc)
