"""The session routes: create, list, inject, wake, delete, and whoami.

As core-agent `pkg/attach/handlers*.go` answers them (`createSession`,
`listSessions`, `doInject`, `doWake`, the delete and `whoAmI` handlers), each
a function of the host and the request.
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from ._gowire import decode_into, json_response, read_json
from ._registry import ANONYMOUS, Identity
from ._replies import _q, _text, content_length, json_body, read_capped
from ._session import STARTUP_SESSION, _listed, _Session
from ._store import StoreWriteError
from ._store_errors import STORE_ERRORS

if TYPE_CHECKING:
    from ._daemon import Daemon

__all__ = ["MAX_INJECT_BYTES"]

MAX_INJECT_BYTES = 8 * 1024
"""The largest inject body the host reads; a larger one is answered 400."""
MAX_CREATE_BYTES = 8 * 1024  # the daemon's operatorPostMaxBytes, which caps POST /sessions
_log = logging.getLogger("coreagent_sdk.host")


def rejects_draining(host: Daemon) -> Response | None:
    """503 while the host drains, as the daemon's `rejectDraining` answers writes."""
    if not host.draining:
        return None
    return _text(
        503,
        "daemon is shutting down; queued messages would be lost \u2014 retry after restart",
        {"Retry-After": "5"},
    )


async def create_session(host: Daemon, request: Request) -> Response:
    who = host.identify(request) or ANONYMOUS
    if host.rate_limiter is not None:  # checked before the 501, as on a daemon
        allowed, wait = host.rate_limiter.allow("" if who is ANONYMOUS else who.name)
        if not allowed:
            return json_response(
                {"error": "rate limited", "retry_after_seconds": wait},
                status_code=429,
                headers={"Retry-After": str(wait)},
            )
    if not host.multi_session:
        return _text(
            501,
            "multi-session is not enabled: start the daemon with "
            "attach.multi_session.enabled: true",
        )
    acl = await session_acl(request, who)
    if isinstance(acl, Response):
        return acl
    try:
        session = await open_session(host, who.name, *acl)
    except StoreWriteError as exc:
        return _text(500, f"create session: register: attach: persist session ACL: {exc}")
    sid = session.session_id
    authority = request.headers.get("host")
    path = f"/sessions/{host.app_name}/{sid}"
    scheme = request.scope.get("scheme", "http")  # request.url parses the whole URL
    url = f"{scheme}://{authority}{path}" if authority else path
    return json_response(
        {"app": host.app_name, "user": who.name, "sessionID": sid, "url": url},
        status_code=201,
    )


async def open_session(
    host: Daemon,
    user: str,
    viewers: tuple[str, ...] = (),
    contributors: tuple[str, ...] = (),
) -> _Session:
    """A fresh session of `user`, in memory once its row is written (`StoreWriteError` if not).

    What `POST /sessions` does after its checks, and what an A2A message does (`_a2a`):
    the row first, as `registerWithACL` persists it before answering (and rolls the
    session back when it cannot), then the session joins the host's memory bound.
    """
    sid = f"s-{next(host._ids):04d}{secrets.token_hex(3)}"
    session = _Session(host, host.app_name, sid, user)
    session.viewers, session.contributors = viewers, contributors
    await session.save()
    host.sessions[sid] = session
    host._admitted()
    return session


async def session_acl(
    request: Request, who: Identity
) -> tuple[tuple[str, ...], tuple[str, ...]] | Response:
    """The optional create body's viewers and contributors, or its 400.

    Pins core-agent `pkg/attach/handlers_create_session.go` `createSession`
    (body read as `decodePOSTOptional`): no body is fine, `owner` is
    refused unless it names the caller, and the lists are normalized as
    `SessionACL.Normalized` does (trimmed, blanks and repeats dropped).
    """
    body = await read_capped(request, MAX_CREATE_BYTES)
    if isinstance(body, Response):
        return _text(400, "create session: http: request body too large")
    if not body:
        return (), ()
    value, error = read_json(body)
    fields: dict[str, Any] = {}
    if error is None:
        fields, error = decode_into(
            value,
            "sessionACLRequest",
            {"owner": str, "viewers": list, "contributors": list},
            nullable=frozenset({"owner", "viewers", "contributors"}),
        )
    if error is not None:
        return _text(400, f"create session: {error}")
    owner = fields.get("owner")
    if owner is not None and owner != who.name:
        return _text(
            400,
            "create session: owner is not settable (the new session is owned by the "
            f"authenticated caller {_q(who.name)}, request said {_q(owner)}); omit the field",
        )
    return _identities(fields.get("viewers")), _identities(fields.get("contributors"))


async def list_sessions(host: Daemon, request: Request) -> Response:
    who = host.identify(request)
    # In memory: sorted by app, user, id, as `SessionRegistry.List` sorts them.
    live = sorted(
        (s for s in host.sessions.values() if host.visible(s, who)),
        key=lambda s: (s.app, s.user, s.session_id),
    )
    rows = [s.row() for s in live]
    if host.multi_session:  # the store's half, as `listSessions` adds it with multi-session
        try:
            stored = await host.store.rows(skip=frozenset(host.sessions))
        except STORE_ERRORS as exc:
            # Best effort, as `listSessions`: a store hiccup must not empty the list.
            _log.warning("AgentHost %r: listing stored sessions failed: %r", host.name, exc)
            stored = []
        rows += [
            _listed(r.app, r.user, r.session_id, "idle", r.last_touched)
            for r in stored
            if host.visible(r, who)
        ]
    return json_response({"sessions": rows})


async def inject(host: Daemon, request: Request) -> Response:
    # A draining host refuses first, as `routeSessionDrainGated` does: no lookup, so no
    # resume of an evicted session the answer would throw away (and again below, as
    # `doInject` checks once more after the body).
    draining = rejects_draining(host)
    if draining is not None:
        return draining
    # The session is looked up before the body is read, as on a daemon.
    session = await host.lookup_session(request, "write")
    if session is None:
        return _text(404, "session not found")
    body = await json_body(
        request, MAX_INJECT_BYTES, "InjectRequest", {"message": str, "wake": bool}
    )
    if isinstance(body, Response):
        return body
    message: str = body.get("message", "")
    wake: bool = body.get("wake", True)  # omitted or null means true
    if message == "":
        return _text(400, "inject: message is required")
    draining = rejects_draining(host)
    if draining is not None:
        return draining
    session = await _still_in_memory(host, request, session)
    if session is None:
        return _text(404, "session not found")
    prompt_id = session.enqueue(message, wake=wake)
    return json_response(
        {
            "injected": message,
            "session": session.session_id,
            "woke": wake,
            "prompt_id": prompt_id,
        }
    )


async def wake(host: Daemon, request: Request) -> Response:
    draining = rejects_draining(host)  # first, as `routeSessionDrainGated`
    if draining is not None:
        return draining
    session = await host.lookup_session(request, "write")
    if session is None:
        return _text(404, "session not found")
    prompt = ""
    if content_length(request) > 0:  # the body is optional, as `doWake` reads it
        body = await json_body(
            request, MAX_INJECT_BYTES, "wakeRequest", {"target": str, "prompt": str}
        )
        if isinstance(body, Response):
            return body
        if body.get("target"):
            return _text(
                501,
                "wake: per-subagent target is not yet implemented; omit 'target' to wake "
                "the session",
            )
        prompt = body.get("prompt", "")
    draining = rejects_draining(host)
    if draining is not None:
        return draining
    session = await _still_in_memory(host, request, session)
    if session is None:
        return _text(404, "session not found")
    answer: dict[str, Any] = {"woken": session.session_id, "prompt": prompt}
    if prompt:
        answer["prompt_id"] = session.enqueue(prompt, wake=False)
    session.wake()
    return json_response(answer)


async def _still_in_memory(host: Daemon, request: Request, session: _Session) -> _Session | None:
    """`session` as the host holds it after a body was read: evicted meanwhile, resumed."""
    if host.sessions.get(session.session_id) is session:
        return session
    return await host.lookup_session(request, "write")


async def delete_session(host: Daemon, request: Request) -> Response:
    session = await host.lookup_session(request, "admin")
    if session is None:
        return _text(404, "session not found")
    if session.session_id == STARTUP_SESSION:
        return _text(403, "the daemon's startup session cannot be deleted")
    host.sessions.pop(session.session_id, None)
    await session.close()
    try:
        await host.store.delete(session.session_id)  # `HardDelete`: it cannot be resumed
    except StoreWriteError as exc:
        return _text(500, f"delete session: {exc}")  # still stored: a retry resumes it
    return Response(status_code=204)


async def whoami(host: Daemon, request: Request) -> Response:
    who = host.identify(request) or ANONYMOUS
    if who is ANONYMOUS:
        # `callerMiddlewareWithConfig`: past a shared attach token, even the default
        # caller was verified by a bearer token (`transportBearerConfigured`).
        source = "bearer" if host.attach_token_env else "anonymous"
        return json_response({"identity": "anon", "source": source})
    # `whoAmIResponse.Admin` is omitempty: a caller who is not an admin has no "admin" key.
    answer: dict[str, Any] = {"identity": who.name}
    if who.admin:
        answer["admin"] = True
    answer["source"] = "bearer"
    return json_response(answer)


def _identities(names: list[str] | None) -> tuple[str, ...]:
    """An ACL list as `SessionACL.Normalized` keeps it: trimmed, no blanks, no repeats."""
    out: dict[str, None] = {}
    for name in names or ():
        if isinstance(name, str) and name.strip():
            out.setdefault(name.strip(), None)
    return tuple(out)
