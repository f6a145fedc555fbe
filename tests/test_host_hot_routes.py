"""A delegation's routes skip the router's layers and answer exactly as through them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from coreagent_sdk import ASGITransport
from coreagent_sdk.host import AgentHost
from coreagent_sdk.host._capabilities import capabilities_frame, capabilities_payload
from coreagent_sdk.host._gowire import sse
from tests.test_host_fidelity import FRAME, JSON, TOKENS, bearer


async def opening(http: httpx.AsyncClient, sid: str, headers: dict[str, str]) -> dict[str, Any]:
    """The capabilities frame an event stream on session `sid` opens with."""
    async with http.stream("GET", f"/sessions/{sid}/events", headers=headers) as stream:
        assert stream.status_code == 200
        async for chunk in stream.aiter_bytes():
            found = FRAME.findall(chunk)
            if found:
                event, data = found[0]
                assert event == b"capabilities"
                return dict(json.loads(data))
    raise AssertionError("the stream ended before its capabilities frame")


async def test_each_event_stream_opens_with_its_own_callers_id_and_the_address_it_reached() -> None:
    host = AgentHost("agent", tokens=TOKENS, session_rate_limit=None)
    transport = ASGITransport(host.app)
    seen = []
    async with httpx.AsyncClient(transport=transport, base_url="http://agent.test") as http:
        for token in ("tok-alice", "tok-root", "tok-alice", "tok-bob"):
            created = await http.post("/sessions", headers={**JSON, **bearer(token)})
            sid = created.json()["sessionID"]
            for address in ("agent.test", "10.0.0.9:8080"):
                headers = {**bearer(token), "Host": address}
                caps = await opening(http, sid, headers)
                seen.append((caps["caller_id"], caps["agent"]["url"]))
    host.model = "another-model"  # what the frame says follows the host
    async with httpx.AsyncClient(transport=transport, base_url="http://agent.test") as http:
        created = await http.post("/sessions", headers={**JSON, **bearer("tok-bob")})
        caps = await opening(http, created.json()["sessionID"], bearer("tok-bob"))
    await host.aclose()
    urls = ["http://agent.test", "http://10.0.0.9:8080"]
    assert seen == [(who, url) for who in ("alice", "root", "alice", "bob") for url in urls]
    assert caps["agent"]["model"] == "another-model"


async def test_a_method_a_hot_path_does_not_take_is_the_routers_405() -> None:
    host = AgentHost("agent", session_rate_limit=None)
    async with httpx.AsyncClient(
        transport=ASGITransport(host.app), base_url="http://agent.test"
    ) as http:
        sid = (await http.post("/sessions", headers=JSON)).json()["sessionID"]
        put = await http.put(f"/sessions/core-agent/{sid}/inject", headers=JSON)
        assert (put.status_code, put.headers["allow"]) == (405, "POST")
        # Starlette's first full match: DELETE of session "inject" in app `sid`, not inject.
        gone = await http.delete(f"/sessions/{sid}/inject", headers=JSON)
        assert (gone.status_code, gone.text) == (404, "session not found\n")
        said = await http.post(f"/sessions/{sid}/inject", headers=JSON, json={"message": "hi"})
        assert said.status_code == 200, said.text
    await host.aclose()


async def test_hosts_sharing_one_route_table_each_answer_for_themselves() -> None:
    # Every host of a kind shares its routes (_host_routes): the host a request reaches is
    # the one that answers, its sessions and its name, whichever host used them last.
    one, two = (AgentHost(n, session_rate_limit=None) for n in ("one", "two"))
    seen = []
    async with (
        httpx.AsyncClient(transport=ASGITransport(one.app), base_url="http://one.test") as a,
        httpx.AsyncClient(transport=ASGITransport(two.app), base_url="http://two.test") as b,
    ):
        sid = (await a.post("/sessions", headers=JSON)).json()["sessionID"]
        for http in (b, a, b):
            caps = await opening(http, "default", {})
            seen.append(caps["agent"]["name"])
        missing = await b.post(f"/sessions/{sid}/inject", headers=JSON, json={"text": "x"})
        listed = await a.get("/sessions")
    await one.aclose()
    await two.aclose()
    assert seen == ["two", "one", "two"]
    assert missing.status_code == 404  # the session is one's alone
    assert sid in listed.text
    assert sid not in two.sessions and sid in one.sessions


@pytest.mark.parametrize("caller", [None, "alice", 'ev"il</script>\u202e\u00e9'])
@pytest.mark.parametrize("hub", [False, True])
@pytest.mark.parametrize("multi_session", [False, True])
def test_a_capabilities_frame_from_its_template_is_the_whole_payloads_encoding(
    caller: str | None, hub: bool, multi_session: bool
) -> None:
    # Every host's frame is its kind's template with its strings encoded in (_capabilities):
    # byte for byte the frame of encoding its whole payload, whatever the strings hold.
    for name, model, url in [
        ("p-1", "sim-model", "http://p-1.sim"),
        ("<b>&amp;'\"\\", "m\u2028x", "http://a b/c"),
        ("\x00name\x00", "\x00url\x00", "http://[::1]:8080"),
        ("\ud800lone", "\U0001f600", ""),
    ]:
        options = {"multi_session": multi_session, "hub": hub, "caller": caller}
        whole = sse(
            "capabilities", capabilities_payload(name=name, model=model, url=url, **options)
        )
        assert capabilities_frame(name=name, model=model, url=url, **options) == whole
