"""A served fleet or agent over Streamable HTTP: the SDK's app, behind a bearer token.

The token is read once, from the environment variable the operator names (as a
daemon's `--attach-token=<ENVVAR>`: never an argument, so never in `ps`), and
checked by the host's rules (`X-Attach-Token` decides alone when sent, else
`Authorization: Bearer` exactly so written) in constant time. A request
without it is refused with one line, `401 unauthorized`, that never repeats
what it sent. Without a token the server listens on loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from .._attach._token import checked_token, credential_variable, variable_unset, variable_where
from ..host._attach_auth import presented_token, token_matches
from ..host._limits import uvicorn_options
from ..host._prompt_server import PromptServer
from ..host._serve import _CLOSE_TIMEOUT

_STARTUP_TIMEOUT = 10.0  # from the socket bound to it listening, at most

if TYPE_CHECKING:
    from ._serve_server import ServedTools

__all__ = ["BearerGuard", "http_app", "read_serve_token", "serving_http"]

DEFAULT_PATH = "/mcp"
_log = logging.getLogger("coreagent_sdk.mcp")


def read_serve_token(env: str) -> str:
    """The token held in `env` (registered with the scrubber, `env` as a fleet credential).

    TokenUnsetError when unset.
    """
    if not isinstance(env, str) or not env.strip():
        # What was given is not repeated: it may be the token itself.
        raise ValueError(
            "mcp: token_env must name an environment variable (such as FLEET_TOKEN), "
            f"got {'an empty name' if isinstance(env, str) else 'a ' + type(env).__name__}"
        )
    # A fleet credential: never handed to an MCP server this process starts (by name, so
    # whether the scrubber still remembers the value does not matter).
    credential_variable(env)
    token = checked_token(os.environ.get(env, ""), variable_where(env), "mcp")
    if token is None:
        raise variable_unset(
            "mcp",
            env,
            "mcp: token_env names ${name}, which is unset or empty; export {name}=<token> "
            "before serving, or drop token_env to serve on loopback without a token",
        )
    return token


class BearerGuard:
    """Refuses every HTTP request that does not present the token (`401 unauthorized`)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._want = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            got = presented_token(Request(scope))
            if not token_matches(got, self._want):
                client = scope.get("client") or ("?", 0)
                _log.warning(
                    "mcp: refused %s %s from %s: %s",
                    scope.get("method", "?"),
                    scope.get("path", "?"),
                    client[0],
                    "a wrong token" if got else "no token",
                )
                response = PlainTextResponse(
                    "unauthorized\n", 401, headers={"WWW-Authenticate": 'Bearer realm="mcp"'}
                )
                await response(scope, receive, send)
                return
        await self._app(scope, receive, send)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def http_app(served: ServedTools, *, token_env: str | None, path: str, host: str) -> Starlette:
    token = read_serve_token(token_env) if token_env is not None else None
    inner = served.server.streamable_http_app(streamable_http_path=path, host=host)
    manager = served.server.session_manager

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with served, manager.run():
            yield

    app: ASGIApp = inner if token is None else BearerGuard(inner, token)
    return Starlette(routes=[Mount("/", app=app)], lifespan=lifespan)


@contextlib.asynccontextmanager
async def serving_http(
    served: ServedTools, *, host: str, port: int, token_env: str | None, path: str
) -> AsyncIterator[str]:
    """Serve on `host:port` (0: a free port) while the block runs; yields the MCP URL."""
    if token_env is None and not _loopback(host):
        raise ValueError(
            f"mcp: serving on {host!r} without a token would let anyone who reaches it call "
            "the fleet; pass token_env= (a bearer token in an environment variable), or serve "
            "on 127.0.0.1"
        )
    app = http_app(served, token_env=token_env, path=path, host=host)
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # The host's limits on what a caller sends before its request is answered (headers of at
    # most MAX_HEADER_BYTES, in within READ_HEADER_TIMEOUT), since the token is checked only
    # once the headers are in: with uvicorn's defaults one caller could send 16 MiB of them,
    # or hold a connection with headers that never end. Quiet: serving configures no logger.
    config = uvicorn.Config(
        app,
        lifespan="on",
        # A host's bound on the requests still running at a stop. uvicorn's default is none:
        # a caller that never finished its body held the stop for ever.
        timeout_graceful_shutdown=int(_CLOSE_TIMEOUT) or 1,
        **uvicorn_options(quiet=True),
    )
    server = PromptServer(config)  # starts and stops when told; signals are its owner's
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        if not await server.started_within(task, _STARTUP_TIMEOUT):
            if task.done():
                task.result()  # raises what stopped it
                raise RuntimeError("mcp: the HTTP server stopped before it started")
            raise RuntimeError(f"mcp: the HTTP server on {host}:{port} did not start listening")
        shown = f"[{host}]" if ":" in host else host
        yield f"http://{shown}:{sock.getsockname()[1]}{path}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
