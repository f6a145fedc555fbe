"""The A2A discovery card a host serves when it is given a description.

Pins core-agent `pkg/attach/agentcard.go`: served at
`/.well-known/agent-card.json` before any auth (discovery must work without
a credential), GET and HEAD only, indented JSON, A2A protocol 0.3.0, the
skills of the host's agents (sorted by id, tagged `skill`), and the security
`deriveSecurity` declares: the bearer scheme for a shared attach token
(`attach_token_env`, a daemon's `--attach-token`), nothing for per-caller
`tokens` (a daemon's card does not declare its users) or an open host. Its
URL is the one the request was addressed to (X-Forwarded-Proto/-Host first,
as the daemon reads them), or the host's `external_url` (the daemon's
`--agent-card-external-url`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from .._attach._agentcard import AGENT_CARD_PATH
from ._gowire import go_json

__all__ = [
    "AGENT_CARD_PATH",
    "CARD_PROTOCOL_VERSION",
    "card_response",
    "card_url",
    "json_card_response",
]

CARD_PROTOCOL_VERSION = "0.3.0"


def card_url(request: Request, external_url: str | None = None) -> str:
    """The URL the request was addressed to, as the daemon reads it (forwarded headers first).

    `external_url`, when set, is the URL instead (`resolveCardURL`'s override).
    """
    if external_url:
        return external_url
    scheme = request.headers.get("x-forwarded-proto") or request.url.scheme
    host = request.headers.get("x-forwarded-host") or request.headers.get("host", "")
    return f"{scheme}://{host}" if host else ""


def build_card(
    request: Request,
    *,
    name: str,
    description: str,
    version: str,
    skills: Mapping[str, str],
    bearer: bool = False,
    external_url: str | None = None,
) -> dict[str, Any]:
    """The card's JSON object, field for field as the daemon's `agentCardWire`."""
    card: dict[str, Any] = {
        "protocolVersion": CARD_PROTOCOL_VERSION,
        "name": name,
        "description": description,
        "url": card_url(request, external_url),
        "version": version,
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "stateTransitionHistory": False,
        },
    }
    if bearer:  # `deriveSecurity`: the scheme, and one requirement naming it
        card["securitySchemes"] = {"bearer": {"type": "http", "scheme": "Bearer"}}
        card["security"] = [{"bearer": []}]
    card["defaultInputModes"] = ["text/plain"]
    card["defaultOutputModes"] = ["text/plain"]
    # `registrySkills` leaves a nameless skill out; `mergeSkills` sorts by id as Go's
    # sort.Strings does (UTF-8 bytes, which is code point order: Python's str order).
    card["skills"] = [
        {"id": skill, "name": skill, "description": skills[skill], "tags": ["skill"]}
        for skill in sorted(skills)
        if skill
    ]
    return card


def card_response(request: Request, **card: Any) -> Response:
    """`GET`/`HEAD` the card; any other method is 405, as `agentCardHandler` answers."""
    if request.method not in ("GET", "HEAD"):
        return json_card_response(request, {})
    return json_card_response(request, build_card(request, **card))


def json_card_response(request: Request, card: dict[str, Any]) -> Response:
    """`card` as the daemon writes its card (indented JSON, a newline); 405 but to GET/HEAD."""
    if request.method not in ("GET", "HEAD"):
        return PlainTextResponse(
            "method not allowed\n", status_code=405, headers={"Allow": "GET, HEAD"}
        )
    body = b"" if request.method == "HEAD" else (go_json(card, indent=2) + "\n").encode()
    response = Response(body, headers={"Content-Type": "application/json; charset=utf-8"})
    if request.method == "HEAD":
        del response.headers["content-length"]
    return response
