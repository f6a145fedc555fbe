"""`AttachClient.agent_card()`: a peer's A2A card, typed, and checked like any answer."""

from __future__ import annotations

import httpx
import pytest
import respx

from coreagent_sdk import AgentCard, AgentSkill, ASGITransport, AttachClient
from coreagent_sdk.errors import NotFoundError, ProtocolError
from coreagent_sdk.host import AgentHost


async def test_the_client_reads_a_hosts_card_with_its_skills() -> None:
    host = AgentHost(
        "triage", description="Triages alerts", skills={"kubectl": "Reads the cluster"}
    )
    transport = ASGITransport(host.app)
    async with AttachClient("http://triage.test", transport=transport) as client:
        card = await client.agent_card()
    assert card == AgentCard(
        name="triage",
        description="Triages alerts",
        url="http://triage.test",
        version=card.version,
        protocol_version="0.3.0",
        skills=(AgentSkill("kubectl", "kubectl", "Reads the cluster", ("skill",)),),
        streaming=True,
        security_schemes=(),
    )
    assert card.version


async def test_a_peer_without_a_card_is_not_found() -> None:
    transport = ASGITransport(AgentHost("plain").app)
    async with AttachClient("http://plain.test", transport=transport) as client:
        with pytest.raises(NotFoundError):
            await client.agent_card()


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"description": "no name"},
        {"name": "x", "skills": "kubectl"},
        {"name": "x", "skills": [{"name": "no id"}]},
        {"name": "x", "skills": [5]},
        {"name": "x", "capabilities": {"streaming": "yes"}},
    ],
)
async def test_a_hostile_card_is_a_protocol_error_not_a_crash(body: object) -> None:
    with respx.mock(base_url="http://peer.test") as mock:
        mock.get("/.well-known/agent-card.json").mock(return_value=httpx.Response(200, json=body))
        async with AttachClient("http://peer.test") as client:
            with pytest.raises(ProtocolError, match="agent card"):
                await client.agent_card()


async def test_a_card_that_echoes_the_token_never_shows_it() -> None:
    secret = "s3cret-token-value"
    with respx.mock(base_url="http://peer.test") as mock:
        mock.get("/.well-known/agent-card.json").mock(
            return_value=httpx.Response(200, json={"name": 5, "description": secret})
        )
        async with AttachClient("http://peer.test", token=secret) as client:
            with pytest.raises(ProtocolError) as info:
                await client.agent_card()
    assert secret not in str(info.value)
