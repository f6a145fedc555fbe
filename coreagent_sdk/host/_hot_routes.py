"""The session routes a delegation takes, served without Starlette's middleware layers.

A delegation is three requests (create a session, open its events, inject);
each went through Starlette's error and exception middleware, its router and
its request-response wrapper before reaching the handler: a third of what the
host spent per request in process (py-spy, the simulator at 50 calls in
flight). Here the route is chosen as Starlette's router chooses it (the first
route whose path and method both match, in the router's order) and a hot one
is called directly, answering as the layers it skips would: a store that
cannot be read is the handler's 400, an exception before the answer is a
plain 500 and is raised on, as `ServerErrorMiddleware` does. Every other
request (a 404, a 405, the listings, the hub's routes) goes through the router
unchanged.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._store_errors import _answer_unreadable, _StoreUnreadable

__all__ = ["HotRoutes"]


class HotRoutes:
    """Serves the `hot` ones of `routes` directly; everything else through `app` (their router)."""

    def __init__(self, app: ASGIApp, routes: Sequence[Route], hot: Collection[Route]) -> None:
        self.app = app
        chosen = {id(route) for route in hot}  # a Route compares by value, so is not hashed
        self.routes = tuple((route, id(route) in chosen) for route in routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for route, hot in self.routes:
                match, child = route.matches(scope)
                if match is Match.FULL:
                    if hot:
                        scope.update(child)
                        await self._serve(route, scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)

    @staticmethod
    async def _serve(route: Route, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        request = Request(scope, receive)
        try:
            if route.app is route.endpoint:  # a raw ASGI endpoint (the event stream)
                await route.app(scope, receive, sending)
                return
            response = await route.endpoint(request)
        except _StoreUnreadable as exc:
            if started:
                raise
            response = _answer_unreadable(request, exc)
        except Exception:
            if not started:
                await PlainTextResponse("Internal Server Error", status_code=500)(
                    scope, receive, send
                )
            raise
        await response(scope, receive, sending)
