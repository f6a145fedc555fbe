"""`AgentMCPServer`: one agent served as one MCP tool (mode A, agent-as-tool)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .._clock import SystemClock
from .._http._transport import ASGITransport
from .._peer._call_peer import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, CallPeer
from .._peer._directory import Peer, StaticDirectory
from ..host._agents import Agent
from ..host._host import AgentHost
from ._serve_roster import ToolRoster
from ._serve_server import ServedTools
from ._serve_tools import ServedTool, plain_description, tool_name

__all__ = ["AgentMCPServer"]

_DOMAIN = "mcp.internal"  # the in-process host's URL: reached over ASGITransport, never dialed


class AgentMCPServer(ServedTools):
    """One agent as an MCP server with one tool: a `request` string in, its answer out.

        agent = ModelAgent(model, instructions="You answer questions about invoices.")
        server = AgentMCPServer(agent, name="invoices")
        await server.run_stdio()  # or: async with server.serve_http(port=8765) as url

    ``agent`` is an `AgentHost` (served as it is configured: its store, runtimes,
    peers and session rate limit, which by default, as a daemon's, admits a burst
    of 5 calls and then 10 a minute: make it with ``session_rate_limit=None`` to
    serve more) or an agent, an async function of a `Turn` such as a
    `ModelAgent`, for which a host is made under ``name`` (default: the
    function's name) without a rate limit, and closed with the server. The tool is named after the
    agent and described by ``description`` (default: the host's card
    description, else a plain sentence).

    Each call runs one turn in a fresh session of the agent, reached in-process
    by a `CallPeer` with ``timeout`` (seconds for the whole call) and
    ``max_response_bytes`` (the answer's cap; a longer one is cut and says so):
    the result is the final answer as text, with the call's facts (session id,
    duration, truncated) as structured content; the turn's partial chunks are the
    call's progress notifications; a failed turn is a tool error.
    ``delete_sessions=True`` deletes each answered call's session on the host.

    Attributes:
        server: The official SDK's low-level `Server`.
        host: The `AgentHost` that runs the agent's turns.
    """

    def __init__(
        self,
        agent: AgentHost | Agent,
        *,
        name: str | None = None,
        description: str | None = None,
        version: str = "",
        timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        delete_sessions: bool = False,
    ) -> None:
        closers: list[Callable[[], Awaitable[None]]] = []
        if isinstance(agent, AgentHost):
            host = agent
        elif callable(agent):
            given = name if name is not None else getattr(agent, "name", None)
            given = (
                given
                if isinstance(given, str) and given
                else getattr(agent, "__name__", type(agent).__name__)
            )
            host = AgentHost(given, behavior=agent, session_rate_limit=None)
            closers.append(host.aclose)
        else:
            raise TypeError(
                f"mcp: AgentMCPServer serves an agent (an async function of a Turn, such as a "
                f"ModelAgent) or an AgentHost, got {type(agent).__name__}"
            )
        tool = name if name is not None else host.name
        served_name = tool_name(tool)
        if not served_name:
            raise ValueError(
                f"mcp: {tool!r} cannot name a tool (use letters, digits, '_' or '-'); pass name="
            )
        self.host = host
        call_peer = CallPeer(
            StaticDirectory([Peer(host.name, f"http://{_host_label(host.name)}.{_DOMAIN}")]),
            transport=ASGITransport(host.app),
            timeout=timeout,
            max_response_bytes=max_response_bytes,
            delete_sessions=delete_sessions,
            name=served_name if len(served_name) <= 64 else "call_peer",
        )
        closers.append(call_peer.aclose)
        said = description if description is not None else host.description
        served = ServedTool(
            name=served_name,
            peer=host.name,
            description=said + _TAKES_TAIL if said else plain_description(host.name),
        )
        roster = ToolRoster(
            call_peer,
            clock=SystemClock(),
            card_transport=None,
            card_timeout=1.0,
            max_tools=1,
            roster_timeout=1.0,
            fixed=[served],
        )
        super().__init__(
            roster,
            name=served_name,
            version=version,
            instructions=None,
            poll_interval=3600.0,
            closers=closers,
        )


_TAKES_TAIL = " Takes one `request` string; returns the agent's final answer."


def _host_label(name: str) -> str:
    label = "".join(c if c.isascii() and (c.isalnum() or c == "-") else "-" for c in name)
    return label.strip("-")[:63] or "agent"
