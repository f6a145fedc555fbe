"""The agent host: serve your own agents on the attach wire, as a core-agent daemon does.

    from coreagent_sdk.host import AgentHost, Turn

    async def answer(turn: Turn) -> None:
        await turn.say(f"you said: {turn.prompt}")

    host = AgentHost("my-agent", behavior=answer)
    # host.app is an ASGI app: serve it, or call it in-process with
    # coreagent_sdk.ASGITransport(host.app).

An agent is an async function of a `Turn`; the host answers sessions,
inject and events exactly as a daemon's attach server does (the hub
registry too, given a `PeerRegistry`). Needs the `host` extra:
`pip install 'coreagent-sdk[host]'`. The SDK's core never imports this
package; it imports the core.
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401  (checked here so the error names the extra)
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "coreagent_sdk.host: needs the 'host' extra: pip install 'coreagent-sdk[host]'"
    ) from exc

# Helpers the simulator builds on, importable from here as before but not part of the API
# (not in __all__, not in the reference): a fleet's HTML table, a URL as errors show it, a
# server's text cut and scrubbed, token checks, the host's base-URL check and transport, and
# the command lines' parser that never repeats a refused value, the delegation hop of an
# A2A agent that is not a host (its calls take their deadline and parent from the sender's),
# and the uvicorn server every server of the SDK runs.
from .._attach._token import checked_token as checked_token
from .._attach._token import read_token as read_token
from .._display._render import fleet_html as fleet_html
from .._http._endpoint import shown_url as shown_url
from .._peer._hops import entering_message as entering_message
from .._scrub import server_text as server_text
from ._agents import Agent, Turn
from ._agents_host import MultiAgentHost
from ._cli import QuietParser as QuietParser
from ._host import (
    DEFAULT_MAX_SESSIONS_IN_MEMORY,
    DEFAULT_SESSION_IDLE_TIMEOUT,
    AgentHost,
    StreamHook,
)
from ._http import checked_base_url as checked_base_url
from ._http import http_transport as http_transport
from ._inbox import INBOX_CAP
from ._limits import IDLE_TIMEOUT, MAX_HEADER_BYTES, READ_HEADER_TIMEOUT, uvicorn_options
from ._model_agent import (
    CALL_PEER_SPEC,
    DEFAULT_MAX_PEER_CALLS,
    DEFAULT_MAX_TOOL_ROUNDS,
    ModelAgent,
)
from ._peers_handlers import MAX_REGISTER_BYTES
from ._prompt_server import PromptServer as PromptServer
from ._ratelimit import SessionRateLimit
from ._registry import DEFAULT_TTL, MAX_TTL, Identity, PeerRegistry
from ._registry import _Entry as RegistryEntry
from ._runtimes import RuntimeBuildError
from ._session import REPLAY_WINDOW, STARTUP_SESSION, SUBSCRIBER_QUEUE_LIMIT
from ._session_handlers import MAX_INJECT_BYTES
from ._shared_store import SharedStore

__all__ = [
    "CALL_PEER_SPEC",
    "DEFAULT_MAX_PEER_CALLS",
    "DEFAULT_MAX_TOOL_ROUNDS",
    "DEFAULT_MAX_SESSIONS_IN_MEMORY",
    "DEFAULT_SESSION_IDLE_TIMEOUT",
    "DEFAULT_TTL",
    "IDLE_TIMEOUT",
    "INBOX_CAP",
    "MAX_HEADER_BYTES",
    "MAX_INJECT_BYTES",
    "MAX_REGISTER_BYTES",
    "MAX_TTL",
    "READ_HEADER_TIMEOUT",
    "REPLAY_WINDOW",
    "STARTUP_SESSION",
    "SUBSCRIBER_QUEUE_LIMIT",
    "Agent",
    "AgentHost",
    "Identity",
    "ModelAgent",
    "MultiAgentHost",
    "PeerRegistry",
    "RegistryEntry",
    "RuntimeBuildError",
    "SessionRateLimit",
    "SharedStore",
    "StreamHook",
    "Turn",
    "uvicorn_options",
]
