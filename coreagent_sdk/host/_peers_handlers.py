"""A hub's peer-registry routes, as core-agent `pkg/attach/peers_handlers.go` answers them.

`GET /peers` (label filters, bodies encoded once per registry version),
`POST /peers`, `POST /peers/{rid}/heartbeat` and `DELETE /peers/{rid}`; the
routes exist on a host with a `PeerRegistry` only.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from ._gowire import json_response
from ._registry import Identity, RegistryError
from ._replies import _q, _text, json_value

if TYPE_CHECKING:
    from ._daemon import Daemon

__all__ = ["MAX_REGISTER_BYTES"]

MAX_REGISTER_BYTES = 16 * 1024
"""The largest `POST /peers` body a hub reads; a larger one is answered 400."""
_MAX_LISTINGS = 64  # encoded GET /peers bodies kept per registry version


async def list_peers(host: Daemon, request: Request) -> Response:
    assert host.registry is not None  # the /peers routes exist on hubs only
    labels: dict[str, str] = {}
    for raw in request.query_params.getlist("label"):
        key, sep, value = raw.partition("=")
        if sep:  # an item without '=' is skipped, as core-agent's parseLabelFilters does
            labels[key] = value
    body = peer_listing(host, labels, host._caller(request))
    return Response(body, media_type="application/json")


def peer_listing(host: Daemon, labels: dict[str, str], caller: Identity | None) -> bytes:
    """`GET /peers`' body, encoded once per registry version, label filter and view.

    Encoding 10,000 records on every request made the roster lookup the
    cost of a delegation; an unchanged roster is served from here instead.
    """
    assert host.registry is not None
    version = host.registry.version()
    if version != host._listing_version:
        host._listings.clear()
        host._listing_version = version
    # Who sees which registration ids: everyone (open hub, admin) or an owner's own.
    view = "all" if caller is None or caller.admin else "owner:" + caller.name
    key = (view, tuple(sorted(labels.items())))
    body = host._listings.get(key)
    if body is None:
        # Row by row, each kept encoded on its entry: byte for byte what encoding
        # {"peers": [records]} whole gives, with only the changed rows re-encoded.
        entries = host.registry.peers(labels)
        if caller is None or caller.admin:  # sees every row whole: one view, no check per row
            rows = [e.kept_row(False) or e.row(redact=False) for e in entries]
        else:
            rows = [e.row(redact=not host.registry.may_manage(e, caller)) for e in entries]
        encoded = ('{"peers":[' + ",".join(rows) + "]}\n").encode()
        if len(host._listings) >= _MAX_LISTINGS:  # callers choose filters: stay bounded
            host._listings.clear()
        host._listings[key] = body = encoded
    return body


async def register(host: Daemon, request: Request) -> Response:
    assert host.registry is not None  # the /peers routes exist on hubs only
    body = await json_value(request, MAX_REGISTER_BYTES)
    if isinstance(body, Response):
        return body
    if not isinstance(body, dict):
        return _text(400, "malformed JSON: the body must be an object")
    ttl = body.get("heartbeat_ttl_sec")
    # The daemon's field is a Go int: 60.0, NaN, true or "60" do not decode into it.
    if ttl is not None and (
        isinstance(ttl, bool) or not isinstance(ttl, int) or not -(2**63) <= ttl < 2**63
    ):
        return _text(
            400,
            f"malformed JSON: heartbeat_ttl_sec must be an integer number of seconds, "
            f"got {json.dumps(ttl)}",
        )
    caller = host._caller(request)
    if host.refuse_foreign_reregistration and caller is not None and not caller.admin:
        name = body.get("name")
        held = host.registry.get(name) if isinstance(name, str) else None
        if held is not None and held.owner != caller.name:
            return _text(
                403,
                f"peer name {_q(held.name)} is registered by another identity; this hub "
                "refuses re-registration by anyone but its owner or an admin",
            )
    try:
        entry = host.registry.register(
            body.get("name"),
            body.get("endpoint"),
            body.get("labels"),
            body.get("heartbeat_ttl_sec"),
            owner=caller.name if caller is not None else None,
        )
    except RegistryError as exc:
        return _text(400, str(exc))
    return json_response(entry.record(redact=False), status_code=201)


async def heartbeat(host: Daemon, request: Request) -> Response:
    assert host.registry is not None  # the /peers routes exist on hubs only
    entry = host.registry.heartbeat(request.path_params["rid"])
    if entry is None:
        return _text(404, "registration not found; register again")
    return json_response(entry.record(redact=False))


async def deregister(host: Daemon, request: Request) -> Response:
    assert host.registry is not None  # the /peers routes exist on hubs only
    if not host.registry.deregister(request.path_params["rid"], host._caller(request)):
        return _text(
            403,
            "forbidden: peer registrations may only be deregistered by their owner or an admin",
        )
    return Response(status_code=204)
