"""A 405 answered as Go's `http.ServeMux` answers it, whatever route the router tried first.

A daemon's routes are method patterns on one mux (`GET /peers`, `POST /peers`).
A request whose path some pattern matches, in a method none takes, gets
`405 Method Not Allowed` from the mux with `Allow` listing every method of
every pattern that matches the path, sorted, HEAD included with GET
(`ServeMux.matchingMethods`): `PUT /peers` is `Allow: GET, HEAD, POST`.
Starlette names only the methods of the first route that matched the path
(two routes, one path: `GET, HEAD`), and in set order. This wrapper replaces
such a 405 with the mux's, in `http.Error`'s plain-text form.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._replies import _text

__all__ = ["GoMethodNotAllowed"]


class GoMethodNotAllowed:
    """Wraps `app` (a router over `routes`): its 405s carry the mux's `Allow` and body."""

    def __init__(self, app: ASGIApp, routes: Sequence[Route]) -> None:
        self.app = app
        self.routes = tuple(routes)

    def allowed(self, path: str) -> list[str]:
        """Every method some route takes at `path`, sorted as Go sorts them."""
        methods: set[str] = set()
        for route in self.routes:
            if route.methods and route.path_regex.match(path):
                methods |= route.methods
        if "GET" in methods:
            methods.add("HEAD")
        return sorted(methods)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replaced = False

        async def relay(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the router's own 405 body: ours was sent instead
            if message["type"] == "http.response.start" and message["status"] == 405:
                allow = self.allowed(scope["path"])
                if allow and scope["method"] not in allow:  # the router's 405, not a handler's
                    replaced = True
                    refusal = _text(405, "Method Not Allowed", {"Allow": ", ".join(allow)})
                    await refusal(scope, receive, send)
                    return
            await send(message)

        await self.app(scope, receive, relay)
