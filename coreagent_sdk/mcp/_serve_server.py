"""What both served shapes share: the MCP server over a roster of tools, and its watcher.

Built on the official SDK's low-level `Server` (no JSON-RPC of our own): it
answers `tools/list` from the roster and `tools/call` through `CallPeer`, turns
the peer's partial chunks into progress notifications, and tells clients when
the roster changed in both of the SDK's protocol eras: `notifications/tools/
list_changed` on the connections of the handshake era (2025-11-25 and before)
that listed tools, and a `ToolsListChanged` event on the `subscriptions/listen`
streams of the 2026-07-28 era.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._attach._quote import go_quote, names_text
from .._peer._call_peer import CallPeer
from .._peer._chunks import chunk_sink
from .._scrub import server_text
from ..errors import CallPeerError
from ._serve_roster import ToolRoster
from ._serve_tools import ServedTool, error_result, tool_result

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["MAX_CHUNK_CHARS", "MAX_LISTENERS", "ServedTools"]

MAX_CHUNK_CHARS = 1000
"""The most characters of one partial chunk a progress notification carries."""
MAX_LISTENERS = 256
"""Handshake-era connections told of roster changes; past it the oldest is forgotten."""
_NOTIFY_TIMEOUT = 1.0  # seconds one connection may take to take a list_changed

_log = logging.getLogger("coreagent_sdk.mcp")


class _Server(Server[Any]):
    """The SDK's server, saying that its tool list changes (the handshake era's capability)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def checked_interval(value: object, what: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (0.01 <= value < math.inf)
    ):
        raise ValueError(
            f"mcp: {what} must be a number of seconds >= 0.01, got {value!r}; the default is 5"
        )
    return float(value)


class ServedTools:
    """An MCP server whose tools are a roster of agents, each called through `CallPeer`.

    Use it as an async context manager (it watches the roster while open), or run
    it whole with `run_stdio()` or `http_app()`/`serve_http()`.
    """

    def __init__(
        self,
        roster: ToolRoster,
        *,
        name: str,
        version: str,
        instructions: str | None,
        poll_interval: float,
        closers: list[Callable[[], Awaitable[None]]],
    ) -> None:
        self._roster = roster
        self.poll_interval = checked_interval(poll_interval, "poll_interval")
        self._closers = closers
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus, max_subscriptions=MAX_LISTENERS)
        self._listeners: dict[int, tuple[object, ServerSession]] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._entered = 0
        self.server: Server[Any] = _Server(
            name,
            version=version,
            instructions=instructions,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=self._listen,
        )

    @property
    def call_peer(self) -> CallPeer:
        """The `CallPeer` every tool call goes through (its deadline, byte cap, gate)."""
        return self._roster.call_peer

    @property
    def tools(self) -> tuple[ServedTool, ...]:
        """The tools served now (as last read from the roster)."""
        return self._roster.tools

    def __repr__(self) -> str:
        shown = names_text(t.name for t in self.tools)
        return f"{type(self).__name__}({self.server.name!r}, tools=[{shown}])"

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> ServedTools:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Read the roster and start watching it (a fixed roster is not watched)."""
        self._entered += 1
        if self._entered > 1:
            return
        await self.refresh()
        if not self._roster.fixed:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def aclose(self) -> None:
        """Stop watching and close what this server made (its agent's host, its `CallPeer`)."""
        self._entered = max(0, self._entered - 1)
        if self._entered:
            return
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        self._listen.close()
        for close in reversed(self._closers):
            await close()

    async def refresh(self) -> bool:
        """Read the roster now and tell every client if the tools changed; True if they did."""
        changed = await self._roster.refresh()
        if changed:
            await self._notify()
        return changed

    async def _watch(self) -> None:
        # Runs while the server does, one bounded roster read per interval, and ends with it.
        clock = self._roster.clock
        while True:
            await clock.sleep(self.poll_interval)
            try:
                await self.refresh()
            except Exception:  # a watcher that dies stops the list following the fleet
                _log.warning("mcp: watching the roster failed once", exc_info=True)

    async def _notify(self) -> None:
        await self._bus.publish(ToolsListChanged())
        for key, (_, session) in list(self._listeners.items()):
            try:
                await asyncio.wait_for(session.send_tool_list_changed(), _NOTIFY_TIMEOUT)
            except Exception:  # gone, or not reading: it is told no more
                self._listeners.pop(key, None)

    def _track(self, ctx: Any) -> None:
        """Remember a handshake-era connection, to tell it when the tools change."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return  # that era learns of changes on its subscriptions/listen stream
        session: ServerSession = ctx.session
        params = session.client_params  # one object per connection, set by its initialize
        if params is None or id(params) in self._listeners:
            return
        self._listeners[id(params)] = (params, session)  # params kept: its id stays its own
        while len(self._listeners) > MAX_LISTENERS:
            self._listeners.pop(next(iter(self._listeners)))

    # ------------------------------------------------------------------ serving

    async def run_stdio(self, *, handle_signals: bool = False) -> None:
        """Serve the one client on this process's stdin/stdout until it closes them.

        ``handle_signals=True`` (the CLI's) ends the server cleanly on SIGTERM or
        SIGINT, closing what it made, instead of dying mid-write.
        """
        from ._serve_stdio import run_stdio

        await run_stdio(self, handle_signals=handle_signals)

    def http_app(
        self, *, token_env: str | None = None, path: str = "/mcp", host: str = "127.0.0.1"
    ) -> Starlette:
        """An ASGI app serving Streamable HTTP at ``path``, for an app's own server.

        Its lifespan watches the roster and runs the SDK's session manager (serve it
        with its lifespan on). ``token_env`` names the environment variable holding
        the bearer token every request must present (read now; unset is
        `TokenUnsetError`). ``host`` is where it will listen: on loopback the SDK
        refuses requests whose `Host` or `Origin` is not loopback (DNS rebinding).
        """
        from ._serve_http import http_app

        return http_app(self, token_env=token_env, path=path, host=host)

    def serve_http(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token_env: str | None = None,
        path: str = "/mcp",
    ) -> AbstractAsyncContextManager[str]:
        """Listen on ``host:port`` (0: a free port) while the block runs; yields the URL.

            async with server.serve_http(port=0) as url:
                ...  # an MCP client connects to url

        Without ``token_env`` only a loopback host is accepted.
        """
        from ._serve_http import serving_http

        return serving_http(self, host=host, port=port, token_env=token_env, path=path)

    # ----------------------------------------------------------------- handlers

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._track(ctx)
        read_at = self._roster.read_at
        if read_at is None or self._roster.clock.now() - read_at >= self.poll_interval:
            await self.refresh()
        return types.ListToolsResult(tools=[t.tool() for t in self._roster.tools])

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        self._track(ctx)
        tool = self._roster.by_name.get(params.name)
        if tool is None:
            names = names_text(self._roster.by_name)
            raise MCPError(
                types.INVALID_PARAMS,
                f"mcp: unknown tool {go_quote(params.name)}; this server's tools are [{names}] "
                "(list them again: the fleet may have changed)",
            )
        arguments = params.arguments or {}
        request = arguments.get("request")
        extra = sorted(k for k in arguments if k != "request")
        if not isinstance(request, str) or extra:
            got = (
                f"unknown argument {go_quote(extra[0])}"
                if extra
                else ("no request" if request is None else f"request as {type(request).__name__}")
            )
            raise MCPError(
                types.INVALID_PARAMS,
                f"mcp: tool {go_quote(tool.name)} takes one argument, request (a string: the "
                f"task in natural language); got {got}",
            )
        chunks = 0

        async def progress(text: str) -> None:
            nonlocal chunks
            chunks += 1
            said, cut = server_text(text, MAX_CHUNK_CHARS)
            await ctx.session.report_progress(chunks, None, said + ("..." if cut else ""))

        token = chunk_sink.set(progress)
        try:
            result = await self._roster.call_peer.acall(tool.peer, request)
        except CallPeerError as exc:
            return error_result(str(exc))
        finally:
            chunk_sink.reset(token)
        return tool_result(result)
