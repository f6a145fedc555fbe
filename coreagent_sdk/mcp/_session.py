"""One MCP server, connected: started within a bound, its tools listed, called, restarted, closed.

The SDK's transports and ``ClientSession`` are anyio contexts that must be
entered and left by one task; a runtime is built in one task and closed in
another (the cache's). So each server has an owner task that enters them,
reports ready, and waits to be told to stop (or for the server to end), then
leaves them; calls from any task go through the session it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import tempfile
from collections.abc import Mapping
from typing import IO, Any

import attrs

from .._http._endpoint import endpoint_problem
from .._scrub import scrub
from ._config import HttpServer, McpServer, StdioServer
from ._env import server_environment, server_headers

__all__ = ["McpUnavailableError", "ServerConnection", "ToolListing"]

_log = logging.getLogger("coreagent_sdk.mcp")
_STDERR_LINES = 10
_STDERR_TAIL_BYTES = 4096
_MAX_PAGES = 64  # tools/list pages read at start (a server whose cursor never ends)
# A line holds the result as text and, from most SDKs' servers, again as structured
# content, inside the JSON-RPC envelope: a result at the model's bound fits several times.
_LINE_FACTOR = 8
_MIN_LINE = 1 << 20
# A stop is SIGTERM + grace + SIGKILL + grace at worst: the owner is given that, then cancelled.
_OWNER_EXIT = 8.0


class McpUnavailableError(Exception):
    """A server cannot take a call now: it failed to start, died too often, or was closed."""


@attrs.frozen
class ToolListing:
    """One tool as a server listed it (its own name, words and schema)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    read_only_hint: bool | None


def _tail(file: IO[bytes] | None) -> str:
    """The last lines a server wrote to stderr (scrubbed), or "" when it wrote none."""
    if file is None:
        return ""
    with contextlib.suppress(OSError, ValueError):
        file.flush()
        size = file.seek(0, 2)
        file.seek(max(0, size - _STDERR_TAIL_BYTES))
        text = file.read().decode("utf-8", "replace")
        lines = [line for line in text.splitlines() if line.strip()][-_STDERR_LINES:]
        return scrub("\n".join(lines))
    return ""


def _first(exc: BaseException) -> BaseException:
    """The first exception inside exception groups (anyio's task groups raise them)."""
    for _ in range(8):
        inner = getattr(exc, "exceptions", None)
        if not inner:
            break
        exc = inner[0]
    return exc


def _why(exc: BaseException) -> str:
    exc = _first(exc)
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, OSError) else text


class ServerConnection:
    """The live connection to one server of one skill of one agent (its own process).

    Args:
        spec: The server.
        secrets: The secrets of the skill that carries it (its environment or headers).
    """

    def __init__(self, spec: McpServer, secrets: Mapping[str, str]) -> None:
        self.spec = spec
        self._secrets = dict(secrets)
        self._session: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._stderr: IO[bytes] | None = None
        self._overflow: int | None = None
        self._ended_itself = False
        self._restart_lock = asyncio.Lock()
        self.restarts = 0
        self.closed = False
        self.failure: str | None = None  # why it is unavailable, once it is for good
        self.tools: tuple[ToolListing, ...] = ()
        self.dropped_tools = 0  # listed past max_tools

    @property
    def alive(self) -> bool:
        """Whether a session is up and its server has not ended."""
        return self._session is not None

    def __repr__(self) -> str:
        state = "alive" if self.alive else ("closed" if self.closed else "down")
        return f"ServerConnection({self.spec.name!r}, {self.spec.transport}, {state})"

    async def start(self) -> None:
        """Start the server and list its tools, within ``spec.start_timeout`` seconds.

        Raises:
            McpUnavailableError: It did not start; the message names the server, says why,
                quotes its stderr's last lines and the fix.
        """
        spec = self.spec
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self._overflow = None
        self._ended_itself = False
        if isinstance(spec, StdioServer):
            if self._stderr is not None:
                self._stderr.close()
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in aclose)
        self._owner = loop.create_task(self._own(ready), name=f"mcp server {spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), spec.start_timeout)
        except asyncio.TimeoutError:
            ready.cancel()  # what the owner meets on its way out is not news
            await self._end_owner(graceful=False)
            raise McpUnavailableError(
                self._failed(
                    f"did not start within start_timeout={spec.start_timeout:g}s (it never "
                    "answered initialize, or listing its tools took longer)",
                    "raise start_timeout or fix the server",
                )
            ) from None
        except asyncio.CancelledError:
            ready.cancel()
            await self._end_owner(graceful=False)
            raise
        except Exception as exc:
            await self._end_owner()
            raise McpUnavailableError(self._failed(self._start_failure(exc), self._fix())) from None

    def _start_failure(self, exc: BaseException) -> str:
        exc = _first(exc)
        errors = getattr(exc, "errors", None)
        if callable(errors) and type(exc).__name__ == "ValidationError":
            first = errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ()))
            return (
                f"answered with what is not MCP ({len(errors())} error(s), the first at "
                f"{where}: {first.get('msg', '')})"
            )
        if self._ended_itself:
            code = self._returncode()
            with_code = f" (exit code {code})" if code is not None else ""
            return f"exited{with_code} before it answered initialize and tools/list"
        return f"failed to start: {_why(exc)}"

    def _returncode(self) -> int | None:
        streams = getattr(self, "_streams", None)
        process = getattr(streams, "process", None)
        return getattr(process, "returncode", None)

    def _fix(self) -> str:
        if isinstance(self.spec, StdioServer):
            return (
                f"check that {self.spec.command!r} with args {list(self.spec.args)!r} runs an "
                "MCP server on stdio"
            )
        return f"check that {self.spec.url!r} is the server's Streamable HTTP endpoint"

    def _failed(self, what: str, fix: str) -> str:
        said = f"mcp: server {self.spec.name!r} {what}; {fix}"
        tail = _tail(self._stderr)
        if tail:
            said += f"\nits stderr ended with:\n{tail}"
        return scrub(said)

    async def _own(self, ready: asyncio.Future[None]) -> None:
        from mcp.client.session import ClientSession
        from mcp_types import Implementation

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._open(stack)
                session = await stack.enter_async_context(
                    ClientSession(
                        read,
                        write,
                        client_info=Implementation(name="coreagent-sdk", version="0.1.0"),
                    )
                )
                await session.initialize()
                self.tools, self.dropped_tools = await self._list(session)
                self._session = session
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            if not isinstance(exc, Exception):
                raise
            _log.debug("mcp: server %r ended: %s", self.spec.name, scrub(_why(exc)))
        finally:
            self._session = None

    async def _open(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        spec = self.spec
        if isinstance(spec, StdioServer):
            from ._stdio import stdio_streams

            line = max(_MIN_LINE, _LINE_FACTOR * spec.max_result_bytes)
            streams = await stack.enter_async_context(
                stdio_streams(
                    spec.command,
                    spec.args,
                    server_environment(spec.env, self._secrets),
                    spec.cwd,
                    self._stderr if self._stderr is not None else subprocess.DEVNULL,
                    line,
                    on_end=self._ended,
                )
            )
            self._streams: Any = streams
            return streams.read, streams.write
        assert isinstance(spec, HttpServer)
        problem = endpoint_problem(spec.url)  # again before dialing, as CallPeer checks a peer's
        if problem is not None:
            raise ValueError(f"the url is not an endpoint ({problem})")
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        from ._http_bounds import IDENTITY, bound_answers

        # The frame bound stdio has, for a JSON answer and for one SSE event (_http_bounds).
        frame = max(_MIN_LINE, _LINE_FACTOR * spec.max_result_bytes)
        headers = {**IDENTITY, **server_headers(spec.headers, self._secrets)}
        client = await stack.enter_async_context(create_mcp_http_client(headers=headers))
        bound_answers(client, frame, repr(spec.name))
        read, write = await stack.enter_async_context(
            streamable_http_client(spec.url, http_client=client, max_sse_event_size=frame)
        )
        return read, write

    def _ended(self) -> None:
        # stdout closed: the server exited or was cut off; the owner leaves its contexts
        # (which stops what is left of it) and the next call starts it again.
        streams = getattr(self, "_streams", None)
        self._overflow = getattr(streams, "overflow", None)
        self._ended_itself = not getattr(streams, "stopping", True)
        self._session = None
        self._stop.set()

    async def _list(self, session: Any) -> tuple[tuple[ToolListing, ...], int]:
        from mcp_types import PaginatedRequestParams

        kept: list[ToolListing] = []
        dropped = 0
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await session.list_tools(
                params=PaginatedRequestParams(cursor=cursor) if cursor else None
            )
            for tool in page.tools:
                if len(kept) >= self.spec.max_tools:
                    dropped += 1
                    continue
                hint = tool.annotations.read_only_hint if tool.annotations else None
                kept.append(ToolListing(tool.name, tool.description or "", tool.input_schema, hint))
            cursor = page.next_cursor
            if not cursor:
                break
        return tuple(kept), dropped

    async def _end_owner(self, graceful: bool = True) -> None:
        """Tell the owner task to leave its contexts (the server stops); cancel it if it hangs."""
        self._stop.set()
        owner = self._owner
        if owner is None:
            return
        if graceful and not owner.done():
            await asyncio.wait({owner}, timeout=_OWNER_EXIT)
        if not owner.done():
            owner.cancel()
            # Its contexts' shutdown is shielded (bounded): waiting is waiting for that.
            await asyncio.wait({owner})
        if not owner.cancelled():
            owner.exception()  # retrieved: its end was already reported
        self._owner = None

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> Any:
        """``tools/call`` `tool` with `arguments`, within ``spec.call_timeout`` seconds.

        A server that ended is started again first, at most ``spec.max_restarts`` times.

        Raises:
            McpUnavailableError: It cannot take the call (naming why and the fix).
            TimeoutError: The call took longer than ``call_timeout``.
            mcp.shared.exceptions.MCPError: The server answered with an error, or the
                connection closed during the call.
        """
        session = self._session
        if session is None:
            session = await self._restart()
        from mcp.shared.exceptions import MCPError
        from mcp_types import REQUEST_TIMEOUT

        try:
            return await session.call_tool(
                tool, dict(arguments), read_timeout_seconds=self.spec.call_timeout
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise TimeoutError(
                    f"mcp: server {self.spec.name!r}: tool {tool!r} did not answer within "
                    f"call_timeout={self.spec.call_timeout:g}s; raise call_timeout or ask for less"
                ) from None
            if self._overflow is not None:
                raise McpUnavailableError(
                    f"mcp: server {self.spec.name!r}: tool {tool!r} answered with a message "
                    f"over {self._overflow} bytes; the connection was closed (it restarts on "
                    "the next call); raise max_result_bytes or ask for less"
                ) from None
            raise

    async def _restart(self) -> Any:
        async with self._restart_lock:
            if self._session is not None:
                return self._session
            if self.closed:
                raise McpUnavailableError(f"mcp: server {self.spec.name!r} is closed")
            if self.failure is not None:
                raise McpUnavailableError(self.failure)
            if self.restarts >= self.spec.max_restarts:
                self.failure = (
                    f"mcp: server {self.spec.name!r} ended {self.restarts + 1} times and is not "
                    f"started again (max_restarts={self.spec.max_restarts}); fix the server, "
                    "or raise max_restarts"
                )
                raise McpUnavailableError(self.failure)
            self.restarts += 1
            await self._end_owner()
            await self.start()  # McpUnavailableError when it does not come back
            return self._session

    async def aclose(self) -> None:
        """Stop the server (SIGTERM, grace, SIGKILL to its group) and close what it held."""
        self.closed = True
        await self._end_owner()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
