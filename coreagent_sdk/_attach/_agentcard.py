"""A peer's A2A discovery card (`GET /.well-known/agent-card.json`), as a daemon serves it.

A daemon given an agent-card description serves this public document
(core-agent `pkg/attach/agentcard.go`: A2A protocol 0.3.0): its name,
description, URL, version, capabilities, security schemes and the skills of
its agents. It is discovery metadata only; a daemon does not speak A2A's
JSON-RPC. Everything in it is the server's text, so it is typed and checked
here like any other answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._wire import _bool, _list, _map, _obj, _req_str, _str, _str_tuple, _wrong

__all__ = ["AGENT_CARD_PATH", "AgentCard", "AgentSkill"]

AGENT_CARD_PATH = "/.well-known/agent-card.json"


@attrs.frozen
class AgentSkill:
    """One skill a peer's card lists: what one of its agents can do.

    Attributes:
        id: The skill's id (unique on the card).
        name: Its name.
        description: What it does, in the peer's words.
        tags: Its tags (`skill` for a skill of the peer's agents).
        examples: Example prompts, when the card gives some.
    """

    id: str
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AgentSkill:
        """Read it from the card's JSON; a wrong type or a missing id is a ProtocolError."""
        k = "agent card skill"
        d = _obj(d, k)
        return cls(
            id=_req_str(d, "id", k),
            name=_str(d, "name", k),
            description=_str(d, "description", k),
            tags=_str_tuple(d, "tags", k) or (),
            examples=_str_tuple(d, "examples", k) or (),
        )


@attrs.frozen
class AgentCard:
    """A peer's A2A agent card: who it is, where, and which skills its agents have.

    Attributes:
        name: The peer's name.
        description: What the peer does, in its words.
        url: The base URL the card says it serves (the peer's own view).
        version: The peer's version.
        protocol_version: The A2A protocol version of the card (`0.3.0`).
        skills: The skills of its agents.
        streaming: Whether the peer streams its answers.
        security_schemes: The schemes the card declares (`bearer`, `mtls`): a caller
            needs that credential for everything but the card.
    """

    name: str
    description: str
    url: str
    version: str
    protocol_version: str
    skills: tuple[AgentSkill, ...] = ()
    streaming: bool = False
    security_schemes: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AgentCard:
        """Read it from the card's JSON; a wrong type or a missing name is a ProtocolError."""
        k = "agent card"
        d = _obj(d, k)
        capabilities = _map(d, "capabilities", k) or {}
        schemes = _map(d, "securitySchemes", k) or {}
        skills = _list(d, "skills", k)
        if not all(isinstance(s, Mapping) for s in skills):
            raise _wrong(k, "skills", "an array of objects", skills)
        return cls(
            name=_req_str(d, "name", k),
            description=_str(d, "description", k),
            url=_str(d, "url", k),
            version=_str(d, "version", k),
            protocol_version=_str(d, "protocolVersion", k),
            skills=tuple(AgentSkill.from_dict(s) for s in skills),
            streaming=_bool(capabilities, "streaming", k),
            security_schemes=tuple(sorted(str(name) for name in schemes)),
        )
