"""CallPeer delegates to A2A agents by name, with the guarantees it gives attach peers.

The A2A agents here are built with the A2A SDK's own server classes
(`fleet.add_a2a_peer`), reached in-process through the fleet's transport.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import subprocess
import sys
from typing import Any

import httpx
import pytest

pytest.importorskip("a2a")

from coreagent_sdk import (
    A2ADirectory,
    ASGITransport,
    CallPeer,
    HubDirectory,
    Peer,
    RoutingTransport,
    StaticDirectory,
    call_graph,
)
from coreagent_sdk.errors import (
    DirectoryError,
    PeerRequestError,
    PeerTimeoutError,
    PeerTurnError,
    UnknownPeerError,
)
from simulator import FakeClock, Fleet
from simulator.behaviors import delegate, echo

TOKEN = "s3cr3t-a2a-token-value"
ROOT = pathlib.Path(__file__).resolve().parent.parent


def upper(text: str) -> str:
    return text.upper()


async def test_call_peer_gets_an_a2a_agents_answer_by_name_with_its_task_id_as_the_session() -> (
    None
):
    fleet = Fleet()
    agent = fleet.add_a2a_peer("translator", upper)
    tool = fleet.call_peer()

    result = await tool.acall(peer="translator", prompt="bonjour")

    assert (result.peer, result.response, result.truncated) == ("translator", "BONJOUR", False)
    store = agent.executor  # the task the SDK's handler kept is the one the result names
    del store
    task = await _task(fleet, "translator", result.session_id)
    assert task["id"] == result.session_id
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    await fleet.aclose()


async def _task(fleet: Fleet, name: str, task_id: str) -> Any:
    """The task as the agent itself reports it, asked with the A2A SDK's own client."""
    from a2a.client import ClientConfig, ClientFactory
    from a2a.types import GetTaskRequest
    from google.protobuf.json_format import MessageToDict

    async with httpx.AsyncClient(transport=fleet.transport) as http:
        client = ClientFactory(ClientConfig(httpx_client=http)).create(fleet.a2a_peers[name].card)
        task = await client.get_task(GetTaskRequest(id=task_id))
    return MessageToDict(task, preserving_proto_field_name=False)


async def test_one_fleet_tool_reaches_attach_daemons_and_a2a_agents_alike() -> None:
    fleet = Fleet()
    fleet.add_peer("writer", echo())
    fleet.add_a2a_peer("translator", upper)
    tool = fleet.call_peer()

    wrote, translated = await asyncio.gather(
        tool.acall(peer="writer", prompt="draft"), tool.acall(peer="translator", prompt="draft")
    )

    assert (wrote.response, translated.response) == ("draft", "DRAFT")
    frame = fleet.calls.to_pandas()
    assert sorted(frame["peer"]) == ["translator", "writer"]
    assert set(frame["session_id"]) == {wrote.session_id, translated.session_id}
    assert set(frame["state"]) == {"finished"}
    await fleet.aclose()


async def test_an_attach_peers_delegation_to_an_a2a_agent_is_one_call_tree() -> None:
    fleet = Fleet()
    fleet.add_a2a_peer("translator", upper)
    fleet.add_peer("planner", delegate("translator", via=fleet))

    result = await fleet.call_peer().acall(peer="planner", prompt="plan")

    assert "PLAN" in result.response
    tree = fleet.calls.tree()
    (root,) = tree.roots()
    assert root.peer == "planner"
    (child,) = tree.children(root.call_id)
    assert child.peer == "translator" and child.session_id and child.state == "finished"
    edges = {(e.caller, e.callee) for e in call_graph(fleet).edges}
    assert edges == {(None, "planner"), ("planner", "translator")}
    await fleet.aclose()


async def test_the_card_is_read_on_every_call_so_an_agent_removed_is_gone_on_the_next() -> None:
    fleet = Fleet()
    fleet.add_a2a_peer("translator", upper)
    tool = fleet.call_peer()
    await tool.acall(peer="translator", prompt="one")

    fleet.remove_peer("translator")

    with pytest.raises(UnknownPeerError):
        await tool.acall(peer="translator", prompt="two")
    await fleet.aclose()


async def test_an_a2a_directory_names_agents_by_their_cards_and_reads_them_again_once_stale() -> (
    None
):
    fleet = Fleet()
    fleet.add_a2a_peer("translator", upper)
    fleet.add_a2a_peer("summarizer", lambda t: t[:3])
    clock = FakeClock()
    directory = A2ADirectory(
        [fleet.url("translator"), fleet.url("summarizer") + "/.well-known/agent-card.json"],
        transport=fleet.transport,
        clock=clock,
    )
    tool = CallPeer(directory, transport=fleet.transport)

    assert sorted(p.name for p in await directory.peers()) == ["summarizer", "translator"]
    assert (await tool.acall(peer="summarizer", prompt="abcdef")).response == "abc"
    fleet.remove_peer("summarizer")  # its card is gone: the next lookup once stale says so
    clock.advance(5.0)  # the documented reuse of a card that says nothing of caching
    with pytest.raises(DirectoryError, match="summarizer"):
        await tool.acall(peer="summarizer", prompt="abcdef")
    await tool.aclose()
    await fleet.aclose()


async def test_an_a2a_directory_mapping_names_agents_by_its_keys() -> None:
    fleet = Fleet()
    fleet.add_a2a_peer("translator", upper)
    directory = A2ADirectory({"fr": fleet.url("translator")}, transport=fleet.transport)
    tool = CallPeer(directory, transport=fleet.transport)

    result = await tool.acall(peer="fr", prompt="oui")

    assert (result.peer, result.response) == ("fr", "OUI")
    with pytest.raises(UnknownPeerError):
        await tool.acall(peer="translator", prompt="oui")
    await tool.aclose()
    await fleet.aclose()


async def test_a_hub_peer_labelled_a2a_is_called_over_a2a_through_the_hubs_http_api() -> None:
    fleet = Fleet()
    fleet.add_a2a_peer("translator", upper)
    tool = fleet.call_peer(directory=fleet.directory())

    assert (await tool.acall(peer="translator", prompt="hub")).response == "HUB"
    (peer,) = await fleet.directory().peers()
    assert peer.labels["protocol"] == "a2a"
    await fleet.aclose()


async def test_the_answer_is_cut_at_the_byte_cap_and_marked_truncated() -> None:
    async def chunks(text: str) -> Any:
        for i in range(100):
            yield f"chunk{i:03d} "

    fleet = Fleet()
    fleet.add_a2a_peer("talker", chunks)

    cut = await fleet.call_peer(max_response_bytes=25).acall(peer="talker", prompt="go")
    whole = await fleet.call_peer().acall(peer="talker", prompt="go")

    assert cut.truncated and cut.response == "chunk000 chunk001 chunk00"
    assert len(cut.response.encode()) == 25
    assert not whole.truncated and len(whole.response) == 100 * 9 - 1
    await fleet.aclose()


async def test_an_answer_exactly_at_the_cap_is_whole_and_one_byte_over_is_cut() -> None:
    fleet = Fleet()
    fleet.add_a2a_peer("fixed", lambda t: "x" * int(t))

    at = await fleet.call_peer(max_response_bytes=10).acall(peer="fixed", prompt="10")
    over = await fleet.call_peer(max_response_bytes=10).acall(peer="fixed", prompt="11")

    assert (at.response, at.truncated) == ("x" * 10, False)
    assert (over.response, over.truncated) == ("x" * 10, True)
    await fleet.aclose()


async def test_the_token_comes_from_the_environment_as_a_bearer_header_and_never_back() -> None:
    seen: list[str] = []

    def echo_auth(text: str) -> str:
        return f"{text} {seen[-1]}" if seen else text

    fleet = Fleet()
    agent = fleet.add_a2a_peer("echoer", echo_auth)
    inner = agent.app

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            seen.append(headers.get(b"authorization", b"").decode())
        await inner(scope, receive, send)

    fleet.transport.mount("echoer.sim", ASGITransport(recording))
    tool = fleet.call_peer(token_env="A2A_TOKEN", environ={"A2A_TOKEN": TOKEN})

    result = await tool.acall(peer="echoer", prompt="hi")

    assert f"Bearer {TOKEN}" in seen
    assert TOKEN not in result.response and TOKEN not in repr(result)
    assert result.response.startswith("hi Bearer ")
    await fleet.aclose()


async def test_a_failed_task_is_a_turn_error_with_the_agents_words_scrubbed() -> None:
    def broken(text: str) -> str:
        raise RuntimeError(f"cannot do {text} with {TOKEN}")

    fleet = Fleet()
    fleet.add_a2a_peer("broken", broken)
    tool = fleet.call_peer(token_env="A2A_TOKEN", environ={"A2A_TOKEN": TOKEN})

    with pytest.raises(PeerTurnError) as caught:
        await tool.acall(peer="broken", prompt="it")

    assert caught.value.kind == "unknown" and caught.value.session_id
    assert "cannot do it" in str(caught.value) and TOKEN not in str(caught.value)
    assert TOKEN not in caught.value.message
    await fleet.aclose()


async def test_a_task_that_never_completes_times_out_naming_the_task() -> None:
    async def forever(text: str) -> str:
        await asyncio.Event().wait()
        return text

    fleet = Fleet()
    fleet.add_a2a_peer("stuck", forever)

    with pytest.raises(PeerTimeoutError, match=r"within 0\.3 s \(session "):
        await fleet.call_peer(timeout=0.3).acall(peer="stuck", prompt="go")
    await fleet.aclose()


async def test_a_peer_that_refuses_the_token_names_the_variable_to_fix() -> None:
    async def refusing(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"].endswith("agent-card.json"):
            await inner(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 401, "headers": []})
        await send({"type": "http.response.body", "body": b"no"})

    fleet = Fleet()
    inner = fleet.add_a2a_peer("guarded", upper).app
    fleet.transport.mount("guarded.sim", ASGITransport(refusing))
    tool = fleet.call_peer(token_env="A2A_TOKEN", environ={"A2A_TOKEN": TOKEN})

    with pytest.raises(PeerRequestError, match=r"\(401\); set \$A2A_TOKEN") as caught:
        await tool.acall(peer="guarded", prompt="hi")

    assert caught.value.status_code == 401
    await fleet.aclose()


async def test_a_model_agents_call_peer_tool_reaches_an_a2a_agent_unchanged() -> None:
    from coreagent_sdk.host import ModelAgent
    from coreagent_sdk.models import ScriptedModel, when

    fleet = Fleet()
    fleet.add_a2a_peer("translator", upper)
    fleet.add_peer(
        "router", ModelAgent(ScriptedModel(when("french").ask("translator", "{prompt}")))
    )

    result = await fleet.call_peer().acall(peer="router", prompt="french please")

    assert "FRENCH PLEASE" in result.response
    assert {r.peer for r in fleet.calls} == {"router", "translator"}
    await fleet.aclose()


async def test_nothing_of_the_token_reaches_the_logs(caplog: pytest.LogCaptureFixture) -> None:
    def leaky(text: str) -> str:
        raise RuntimeError(TOKEN)

    fleet = Fleet()
    fleet.add_a2a_peer("leaky", leaky)
    tool = fleet.call_peer(token_env="A2A_TOKEN", environ={"A2A_TOKEN": TOKEN})
    caplog.set_level(logging.DEBUG)

    with pytest.raises(PeerTurnError):
        await tool.acall(peer="leaky", prompt="x")

    # The caller's loggers (the in-process agent's server logs what it itself sent).
    ours = ("coreagent_sdk", "httpx", "httpcore", "a2a.client", "simulator")
    client_side = [r for r in caplog.records if r.name.startswith(ours)]
    assert client_side and all(TOKEN not in r.getMessage() for r in client_side)
    await fleet.aclose()


def test_importing_the_sdk_does_not_import_the_a2a_sdk() -> None:
    code = "import sys, coreagent_sdk, simulator; print('a2a' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_a_static_peer_marked_a2a_is_reached_without_a_directory_of_cards() -> None:
    from coreagent_sdk import A2AInterface

    fleet = Fleet()
    fleet.add_a2a_peer("translator", upper)
    peer = Peer(
        "tr",
        fleet.url("translator") + "/",
        a2a=A2AInterface(fleet.url("translator") + "/.well-known/agent-card.json"),
    )
    tool = CallPeer(StaticDirectory([peer]), transport=fleet.transport)

    assert (await tool.acall(peer="tr", prompt="static")).response == "STATIC"
    await tool.aclose()
    await fleet.aclose()


def test_an_a2a_directory_refuses_card_urls_it_may_not_dial() -> None:
    with pytest.raises(ValueError, match="not in allowed_hosts"):
        A2ADirectory(["http://agent.elsewhere"], allowed_hosts=["*.sim"])
    with pytest.raises(ValueError, match="scheme"):
        A2ADirectory(["file:///etc/passwd"])
    with pytest.raises(TypeError, match="list of card URLs"):
        A2ADirectory("http://agent.sim")  # type: ignore[arg-type]


del HubDirectory


async def test_call_peer_over_a2a_gets_an_a2a_hosts_answer_as_over_attach() -> None:
    from coreagent_sdk.host import AgentHost, Turn

    async def answer(turn: Turn) -> None:
        for piece in ("Check", "ing ", "nodes"):
            await turn.chunk(piece)
        await turn.narrate("Asking kubectl.", tool="kubectl", args={"get": "nodes"})
        await turn.say(f"All nodes answer: {turn.prompt}")

    async def failing(turn: Turn) -> None:
        await turn.error("rate_limited", "the model said no", retryable=True, hint="try later")

    host = AgentHost("agent", behavior=answer, a2a=True, session_rate_limit=None)
    broken = AgentHost("broken", behavior=failing, a2a=True, session_rate_limit=None)
    routes = RoutingTransport()
    routes.mount("agent.test", ASGITransport(host.app))
    routes.mount("broken.test", ASGITransport(broken.app))
    attach = CallPeer(StaticDirectory([Peer("agent", "http://agent.test")]), transport=routes)
    a2a = CallPeer(
        A2ADirectory(
            {"agent": "http://agent.test", "broken": "http://broken.test"}, transport=routes
        ),
        transport=routes,
    )

    over_attach = await attach.acall(peer="agent", prompt="prod")
    over_a2a = await a2a.acall(peer="agent", prompt="prod")
    with pytest.raises(PeerTurnError) as caught:
        await a2a.acall(peer="broken", prompt="prod")

    assert over_a2a.response == over_attach.response
    assert over_a2a.session_id != over_attach.session_id  # the task id, not a session id
    error = caught.value
    assert (error.kind, error.retryable, error.hint) == ("rate_limited", True, "try later")
    for closing in (attach, a2a, host, broken):
        await closing.aclose()


@pytest.fixture
def sdk_server() -> Any:
    """An A2A SDK server of its own classes, served by uvicorn on 127.0.0.1 in another process."""
    from .processes import reap

    env = {**os.environ, "A2A_SERVER_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.a2a_sdk_server"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # its port, once it listens (empty: it died)
        yield f"http://127.0.0.1:{int(line)}"
    finally:
        # uvicorn re-raises the SIGTERM it handled once it has stopped: any exit will do.
        proc.terminate()
        proc.wait(10)
        reap(proc)


@pytest.mark.slow  # a real server process: ~2 s to start on a quiet machine
async def test_call_peer_gets_an_a2a_sdk_servers_answer_over_loopback_bounded_and_typed(
    sdk_server: str,
) -> None:
    directory = A2ADirectory([sdk_server], allowed_hosts=["127.0.0.1"])
    environ = {"A2A_TOKEN": TOKEN}
    tool = CallPeer(directory, token_env="A2A_TOKEN", environ=environ, allowed_hosts=["127.0.0.1"])
    wrong = CallPeer(directory, token_env="A2A_TOKEN", environ={"A2A_TOKEN": "not-it"})

    answer = await tool.acall(peer="sdk-agent", prompt="over the wire")
    cut = await tool.acall(peer="sdk-agent", prompt="repeat 50000")
    with pytest.raises(PeerRequestError, match=r"\(401\); set \$A2A_TOKEN") as refused:
        await wrong.acall(peer="sdk-agent", prompt="hi")

    assert answer.response == "OVER THE WIRE (you sent Bearer [redacted])"
    assert answer.session_id and not answer.truncated
    assert cut.truncated and cut.response == "x" * 16 * 1024
    assert refused.value.status_code == 401
    for closing in (tool, wrong, directory):
        await closing.aclose()


async def test_an_a2a_agents_streamed_pieces_reach_a_chunk_sink_and_its_answer_does_not() -> None:
    from coreagent_sdk._peer._chunks import chunk_sink

    async def pieces(text: str) -> Any:
        for word in ("one ", "two ", f"three {TOKEN}"):
            yield word

    fleet = Fleet()
    fleet.add_a2a_peer("streamer", pieces)
    fleet.add_a2a_peer("whole", upper)
    tool = fleet.call_peer(token_env="A2A_TOKEN", environ={"A2A_TOKEN": TOKEN})
    seen: list[str] = []

    async def sink(text: str) -> None:
        seen.append(text)

    token = chunk_sink.set(sink)
    try:
        streamed = await tool.acall(peer="streamer", prompt="count")
        whole = await tool.acall(peer="whole", prompt="all at once")
    finally:
        chunk_sink.reset(token)

    assert seen == ["one ", "two ", "three [redacted]"]
    assert streamed.response == "one two three [redacted]"
    assert whole.response == "ALL AT ONCE"  # one last chunk: the answer, no progress
    await fleet.aclose()


def test_a_sync_call_reaches_an_a2a_agent_from_plain_code() -> None:
    fleet = Fleet()
    fleet.add_a2a_peer("translator", upper)
    tool = fleet.call_peer()

    assert tool(peer="translator", prompt="sync").response == "SYNC"
    tool.close()
    fleet.close()


async def test_without_the_a2a_sdk_a_call_to_an_a2a_agent_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coreagent_sdk import A2AInterface

    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(599))
    peer = Peer("partner", "http://partner.test/", a2a=A2AInterface("http://partner.test/card"))
    tool = CallPeer(StaticDirectory([peer]), transport=transport)
    monkeypatch.setitem(sys.modules, "a2a.client", None)  # as if a2a-sdk were not installed

    with pytest.raises(PeerRequestError, match=r"pip install 'coreagent-sdk\[a2a\]'"):
        await tool.acall(peer="partner", prompt="hi")

    assert sent == []
    await tool.aclose()


def test_the_fleets_roster_and_call_graph_list_its_a2a_agents_beside_its_daemons() -> None:
    fleet = Fleet()
    fleet.add_peer("writer", echo())
    fleet.add_a2a_peer("translator", upper)

    roster = {e.name: e for e in fleet.roster()}

    assert roster["translator"].behavior == "a2a: upper"
    translator = roster["translator"]
    assert (translator.state, translator.labels) == ("live", {"protocol": "a2a"})
    assert roster["writer"].behavior == "echo"
    assert "translator" in fleet._repr_html_()
    assert {"translator", "writer"} <= set(call_graph(fleet).agents)
    fleet.close()


async def test_a_served_fleet_puts_its_a2a_agents_on_loopback_and_their_cards_say_so() -> None:
    fleet = Fleet()
    fleet.add_peer("writer", echo())
    fleet.add_a2a_peer("translator", upper)
    served = await fleet.serve()
    url = served.urls["translator"]
    assert url.startswith("http://127.0.0.1:")

    over_sockets = await served.call_peer(timeout=10).acall(peer="translator", prompt="wire")
    in_process = await fleet.call_peer().acall(peer="translator", prompt="inside")
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport()) as http:
        card = (await http.get(url + "/.well-known/agent-card.json")).json()

    assert (over_sockets.response, in_process.response) == ("WIRE", "INSIDE")
    assert [i["url"] for i in card["supportedInterfaces"]] == [url + "/"]
    await fleet.aclose()
    assert fleet.a2a_peers["translator"].served_url is None
