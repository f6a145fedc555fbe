"""`FleetMCPServer`: a fleet's agents as MCP tools, one per peer of its directory."""

from __future__ import annotations

import httpx

from .._clock import Clock, SystemClock
from .._peer._call_peer import CallPeer
from ._serve_roster import DEFAULT_CARD_TIMEOUT, DEFAULT_MAX_SERVED_TOOLS, ToolRoster
from ._serve_server import ServedTools

__all__ = ["DEFAULT_POLL_INTERVAL", "FleetMCPServer"]

DEFAULT_POLL_INTERVAL = 5.0
"""Seconds between two reads of a served fleet's roster, unless `poll_interval=` says."""


class FleetMCPServer(ServedTools):
    """A fleet served as an MCP server: one tool per peer, each called through `CallPeer`.

        tool = CallPeer(HubDirectory("http://hub:8080"), token_env="FLEET_TOKEN")
        async with FleetMCPServer(tool).serve_http(port=8765) as url: ...

    The tools are the peers ``call_peer.directory`` lists now: each is named
    after its peer (characters a model cannot take become ``_``), described from
    the peer's agent card, takes one ``request`` string and answers with the
    peer's final answer; its structured content is the call's `CallPeerResult`
    (peer, session_id, response, duration_ms, truncated, max_response_bytes).
    Each call is `call_peer.acall(peer, request)`: its deadline, byte cap, gate,
    allowed hosts and token apply, and a failed call is a tool error (its
    message, scrubbed). A peer's partial chunks are the call's progress
    notifications.

    The roster is read again every ``poll_interval`` seconds on ``clock`` while
    the server runs (and on a `tools/list` older than that); when it changed,
    clients are told (`notifications/tools/list_changed`, or the 2026-07-28
    era's `subscriptions/listen` event). Cards are read over ``card_transport``
    (None: the network) within ``card_timeout`` seconds, from endpoints that pass
    the checks a call makes before it dials; a peer without one is described
    plainly. At most ``max_tools`` peers are served (the first by name).

    Attributes:
        server: The official SDK's low-level `Server` (connect `mcp.Client` to it
            in-process, or run it on a transport of your own).
        poll_interval: Seconds between two reads of the roster.
    """

    def __init__(
        self,
        call_peer: CallPeer,
        *,
        name: str = "coreagent-fleet",
        version: str = "",
        instructions: str | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        clock: Clock | None = None,
        card_transport: httpx.AsyncBaseTransport | None = None,
        card_timeout: float = DEFAULT_CARD_TIMEOUT,
        max_tools: int = DEFAULT_MAX_SERVED_TOOLS,
    ) -> None:
        if not isinstance(call_peer, CallPeer):
            raise TypeError(
                f"mcp: FleetMCPServer serves a CallPeer's fleet, got {type(call_peer).__name__}; "
                "pass CallPeer(HubDirectory(hub_url)) (or a simulated fleet's fleet.call_peer())"
            )
        if isinstance(max_tools, bool) or not isinstance(max_tools, int) or max_tools < 1:
            raise ValueError(f"mcp: max_tools must be an int >= 1, got {max_tools!r}")
        roster = ToolRoster(
            call_peer,
            clock=clock if clock is not None else SystemClock(),
            card_transport=card_transport,
            card_timeout=_seconds(card_timeout, "card_timeout"),
            max_tools=max_tools,
            roster_timeout=min(call_peer.timeout, 30.0),
        )
        super().__init__(
            roster,
            name=name,
            version=version,
            instructions=instructions,
            poll_interval=poll_interval,
            closers=[],
        )


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
        raise ValueError(f"mcp: {what} must be a positive number of seconds, got {value!r}")
    return float(value)
