"""The attach routes of a host, built once for every host of the same shape.

A host's routes were its own: eleven `Route`s with their endpoints bound to it,
a router, a method guard and the hot-route table, about a hundred objects per
host. A simulated fleet of 10,000 daemons held a million of them, and each call
to a peer not called lately walked that peer's own copies, cold in the CPU's
caches, while the collector's passes met the references to them. The table
depends only on what kind of host it serves (a hub or not), so every host of a
kind shares one, and each request carries its host in the scope: the host's
guard puts itself there (`HOST`) before the routes see the request.

A host with A2A on has a route of its own (the SDK's handler for that host), so
it gets a table of its own, built as before.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ._hot_routes import HotRoutes
from ._method_not_allowed import GoMethodNotAllowed
from ._peers_handlers import deregister, heartbeat, list_peers, register
from ._session_handlers import (
    create_session,
    delete_session,
    inject,
    list_sessions,
    wake,
    whoami,
)
from ._store_errors import _answer_unreadable, _StoreUnreadable

if TYPE_CHECKING:
    from ._daemon import Daemon

__all__ = ["HOST", "host_routes"]

HOST = "coreagent_sdk.host"
"""The scope key naming the `AgentHost` a request reached (set by the host's guard)."""

_Handler = Callable[["Daemon", Request], Awaitable[Response]]


def _of_host(handler: _Handler) -> Callable[[Request], Awaitable[Response]]:
    """`handler(host, request)` as an endpoint of whichever host the request reached."""

    async def endpoint(request: Request) -> Response:
        return await handler(request.scope[HOST], request)

    endpoint.__name__ = handler.__name__  # the route's name, as the bound one had
    return endpoint


class _Events:
    """`GET .../events` of the host the request reached (its own raw ASGI endpoint)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await scope[HOST]._events(scope, receive, send)


def _build(hub: bool, extra: Sequence[Route]) -> ASGIApp:
    create = _of_host(create_session)
    events = _Events()
    routes = [
        Route("/sessions", create, methods=["POST"]),
        Route("/sessions", _of_host(list_sessions), methods=["GET"]),
        Route("/whoami", _of_host(whoami), methods=["GET"]),
    ]
    for prefix in ("/sessions/{app}/{sid}", "/sessions/{sid}"):
        routes += [
            Route(f"{prefix}/inject", _of_host(inject), methods=["POST"]),
            Route(f"{prefix}/wake", _of_host(wake), methods=["POST"]),
            Route(f"{prefix}/events", events, methods=["GET"]),
            Route(prefix, _of_host(delete_session), methods=["DELETE"]),
        ]
    routes += extra  # A2A's JSON-RPC at POST /, behind the same guard as the attach routes
    if hub:  # elsewhere /peers is the router's own 404
        routes += [
            Route("/peers", _of_host(list_peers), methods=["GET"]),
            Route("/peers", _of_host(register), methods=["POST"]),
            Route("/peers/{rid}/heartbeat", _of_host(heartbeat), methods=["POST"]),
            Route("/peers/{rid}", _of_host(deregister), methods=["DELETE"]),
        ]
    # A store that cannot be read is 400 on every session route, as `writeLookupError`.
    router = Starlette(routes=routes, exception_handlers={_StoreUnreadable: _answer_unreadable})
    # A delegation's create, events, inject and delete skip the router's layers (_hot_routes).
    hot = [r for r in routes if r.endpoint in (create, events) or r.path.endswith("/inject")]
    hot += [r for r in routes if r.methods == {"DELETE"} and r.path.startswith("/sessions/")]
    hot += extra  # every A2A message too (its errors are the SDK's own JSON-RPC answers)
    return HotRoutes(GoMethodNotAllowed(router, routes), routes, hot)


@functools.cache
def _shared(hub: bool) -> ASGIApp:
    return _build(hub, ())


def host_routes(*, hub: bool, extra: Sequence[Route] = ()) -> ASGIApp:
    """The routes of a host (a hub's with `hub`), shared by every host without `extra` routes.

    The app answers for the host named by ``scope[HOST]``.
    """
    return _shared(hub) if not extra else _build(hub, extra)
