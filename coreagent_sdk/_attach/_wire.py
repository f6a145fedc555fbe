"""The attach protocol's JSON shapes as frozen attrs values, and SSE frame encoding.

Decoding follows the daemon's own rules: unknown fields are ignored, optional
fields may be absent, and timestamps stay the RFC 3339 strings the daemon sent
(any precision, any offset), so re-encoding gives back the same JSON keys.
Every type has `from_dict` and `to_dict`; `to_dict` omits optional fields
that are unset, as the daemon does.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from .._scrub import scrub
from ..errors import ProtocolError

__all__ = [
    "PROTOCOL_VERSION",
    "TURN_ERROR_KINDS",
    "ACL",
    "AgentCard",
    "AgentEvent",
    "AgentFrame",
    "Capabilities",
    "Content",
    "Frame",
    "FunctionCall",
    "FunctionResponse",
    "Inbox",
    "InjectResult",
    "Part",
    "Pause",
    "PeerList",
    "PeerRecord",
    "PermsResponse",
    "SessionCreated",
    "SessionInfo",
    "SessionList",
    "SessionTitle",
    "StatusUpdate",
    "SubagentEvents",
    "TurnComplete",
    "TurnError",
    "UsageUpdate",
    "Wake",
    "WakeResult",
    "WhoAmI",
    "checked_segment",
    "decode_frame",
    "encode_sse",
]

PROTOCOL_VERSION = "1.10.0"
"""The attach protocol version this SDK speaks (its major must match the daemon's)."""

TURN_ERROR_KINDS = frozenset(
    {
        "config_error",
        "auth_error",
        "model_not_found",
        "rate_limited",
        "transient_network",
        "cost_ceiling",
        "watchdog",
        "canceled",
        "unknown",
    }
)
"""The `kind`s a peer's `turn-error` can carry (the daemon's set); any other reads as "unknown"."""


def _tname(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


def _wrong(kind: str, key: str, want: str, value: Any) -> ProtocolError:
    return ProtocolError(
        f"wire: {kind} field {key!r} must be {want}, got {_tname(value)}; "
        "is the other side an attach-mode daemon of a supported version?"
    )


def _obj(d: Any, kind: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise ProtocolError(
            f"wire: {kind} must be a JSON object, got {_tname(d)}; "
            "is the other side an attach-mode daemon?"
        )
    return d


def _req(d: Mapping[str, Any], key: str, kind: str) -> Any:
    value = d.get(key)
    if value is None:
        # The keys are the server's words: bounded here, scrubbed by the error itself.
        keys = ", ".join(sorted(map(str, d))[:20]) + (", ..." if len(d) > 20 else "")
        keys = keys if len(keys) <= 400 else keys[:400] + "..."
        got = "null" if key in d else "missing"
        raise ProtocolError(
            f"wire: {kind} has the required field {key!r} {got} (got keys: "
            f"{keys or 'none'}); is the other side an attach-mode daemon?"
        )
    return value


def _req_str(d: Mapping[str, Any], key: str, kind: str) -> str:
    value = _req(d, key, kind)
    if not isinstance(value, str):
        raise _wrong(kind, key, "a string", value)
    return value


def _str(d: Mapping[str, Any], key: str, kind: str, default: str = "") -> str:
    value = d.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _wrong(kind, key, "a string", value)
    return value


def _opt_str(d: Mapping[str, Any], key: str, kind: str) -> str | None:
    return _str(d, key, kind) if d.get(key) is not None else None


def _bool(d: Mapping[str, Any], key: str, kind: str, default: bool = False) -> bool:
    value = d.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _wrong(kind, key, "a boolean", value)
    return value


def _opt_bool(d: Mapping[str, Any], key: str, kind: str) -> bool | None:
    return _bool(d, key, kind) if d.get(key) is not None else None


def _int(d: Mapping[str, Any], key: str, kind: str, default: int = 0) -> int:
    value = d.get(key)
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    raise _wrong(kind, key, "a whole number", value)


def _num(d: Mapping[str, Any], key: str, kind: str, default: float = 0.0) -> float:
    value = d.get(key)
    if value is None:
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isfinite(number):
            return number
    raise _wrong(kind, key, "a finite number", value)


def _opt_num(d: Mapping[str, Any], key: str, kind: str) -> float | None:
    return _num(d, key, kind) if d.get(key) is not None else None


def _map(d: Mapping[str, Any], key: str, kind: str) -> dict[str, Any] | None:
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _wrong(kind, key, "an object", value)
    return dict(value)


def _all_str(values: Iterable[Any]) -> bool:
    return all(type(v) is str for v in values)


def _str_map(d: Mapping[str, Any], key: str, kind: str) -> dict[str, str]:
    value = _map(d, key, kind) or {}
    if not all(isinstance(v, str) for v in value.values()):
        raise _wrong(kind, key, "an object of strings", value)
    return value


def _list(d: Mapping[str, Any], key: str, kind: str) -> list[Any]:
    value = d.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _wrong(kind, key, "an array", value)
    return value


def _str_tuple(d: Mapping[str, Any], key: str, kind: str) -> tuple[str, ...] | None:
    if d.get(key) is None:
        return None
    value = _list(d, key, kind)
    if not all(isinstance(v, str) for v in value):
        raise _wrong(kind, key, "an array of strings", value)
    return tuple(value)


# An identifier a server chose that becomes a URL path segment: unreserved
# characters only, and never a dot segment, so it cannot climb out of
# /sessions, start a query or a fragment, or name another host.
_SEGMENT = re.compile(r"[A-Za-z0-9._~:+-]{1,256}")


def checked_segment(value: str, what: str) -> str:
    """`value` if it is a plain URL path segment, else ProtocolError naming `what`."""
    if not _SEGMENT.fullmatch(value) or value in (".", ".."):
        shown = value if len(value) <= 80 else value[:80] + "..."
        raise ProtocolError(
            f"wire: {what} {shown!r} is not a plain path segment (letters, digits and "
            "'._~:+-' only, not '.' or '..'); refusing to put it into a URL, nothing more "
            "is sent"
        )
    if scrub(value) != value:
        # A server chose an id holding a secret this process sends. Scrubbed, the id
        # would name no session; kept, it would carry the secret into URLs, results,
        # events, spans and recordings. So it is refused: the peer is misbehaving.
        raise ProtocolError(
            f"wire: {what} {value!r} contains a credential this process sends (shown "
            "redacted); refusing to put it into a URL or keep it, nothing more is sent. "
            "The server chose it: a peer that echoes tokens into ids is misbehaving, "
            "report it to its operator"
        )
    return value


def _scrub_opt(value: str | None) -> str | None:
    return None if value is None else scrub(value)


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


# Newer ADK releases tag the event's own fields in lower camel; decoding reads
# the Go names, so a tagged event is renamed first (a Go name present wins).
_TAGGED_TO_GO = {
    "content": "Content",
    "partial": "Partial",
    "turnComplete": "TurnComplete",
    "interrupted": "Interrupted",
    "errorCode": "ErrorCode",
    "errorMessage": "ErrorMessage",
    "finishReason": "FinishReason",
    "id": "ID",
    "timestamp": "Timestamp",
    "invocationId": "InvocationID",
    "branch": "Branch",
    "author": "Author",
    "actions": "Actions",
    "longRunningToolIds": "LongRunningToolIDs",
    "modelVersion": "ModelVersion",
    "avgLogprobs": "AvgLogprobs",
    "citationMetadata": "CitationMetadata",
    "groundingMetadata": "GroundingMetadata",
    "usageMetadata": "UsageMetadata",
    "customMetadata": "CustomMetadata",
    "logprobsResult": "LogprobsResult",
}


def _go_spelling(d: Mapping[str, Any]) -> Mapping[str, Any]:
    renamed = {go: d[tag] for tag, go in _TAGGED_TO_GO.items() if tag in d and go not in d}
    return {**d, **renamed} if renamed else d


def labels_dict(labels: Mapping[str, str]) -> dict[str, str]:
    """A private copy of a label map, so a caller's dict cannot change a frozen value."""
    return dict(labels)


# --------------------------------------------------------------------- REST bodies


@attrs.frozen
class SessionCreated:
    """`POST /sessions` 201: the new session and its absolute URL.

    Attributes:
        app: The app the session belongs to.
        user: The user the session belongs to.
        session_id: The new session's id.
        url: The session's absolute URL ("" when the daemon sent none).
    """

    app: str
    user: str
    session_id: str
    url: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SessionCreated:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        d = _obj(d, "session")
        return cls(
            app=checked_segment(_req_str(d, "app", "session"), "the session's app"),
            # What the server chose is kept scrubbed (ids that go into URLs are refused).
            user=scrub(_str(d, "user", "session")),
            session_id=checked_segment(_req_str(d, "sessionID", "session"), "the session id"),
            url=scrub(_str(d, "url", "session")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {"app": self.app, "user": self.user, "sessionID": self.session_id, "url": self.url}

    @property
    def path(self) -> str:
        """The session's path on its daemon: `/sessions/{app}/{sessionID}`."""
        app = checked_segment(self.app, "the session's app")
        return f"/sessions/{app}/{checked_segment(self.session_id, 'the session id')}"


@attrs.frozen
class SessionInfo:
    """One row of `GET /sessions`.

    Attributes:
        app: The session's app.
        user: The session's user.
        session_id: The session's id.
        has_event_log: Whether the session keeps an event log to replay.
        status: The session's state as the daemon reports it.
        last_touched_at: When the session was last used (the daemon's timestamp).
        title: The session's title, when it has one.
    """

    app: str
    user: str
    session_id: str
    has_event_log: bool
    status: str
    last_touched_at: str
    title: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SessionInfo:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "session row"
        d = _obj(d, k)
        return cls(
            app=_req_str(d, "app", k),
            user=_str(d, "user", k),
            session_id=_req_str(d, "sessionID", k),
            has_event_log=_bool(d, "has_event_log", k),
            status=_str(d, "status", k),
            last_touched_at=_str(d, "last_touched_at", k),
            title=_opt_str(d, "title", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {
            "app": self.app,
            "user": self.user,
            "sessionID": self.session_id,
            "has_event_log": self.has_event_log,
            "status": self.status,
            "last_touched_at": self.last_touched_at,
        }
        _put(out, "title", self.title)
        return out


@attrs.frozen
class SessionList:
    """`GET /sessions` 200."""

    sessions: tuple[SessionInfo, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SessionList:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        d = _obj(d, "session list")
        return cls(tuple(SessionInfo.from_dict(s) for s in _list(d, "sessions", "session list")))

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {"sessions": [s.to_dict() for s in self.sessions]}


@attrs.frozen
class InjectResult:
    """`POST .../inject` 200.

    Attributes:
        injected: The session the message went to.
        session: The session's id as the daemon echoes it.
        woke: Whether the message woke the session (False: it waits in the inbox).
        prompt_id: The queued message's id, when the daemon gives one.
    """

    injected: str
    session: str
    woke: bool = True
    prompt_id: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InjectResult:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "inject answer"
        d = _obj(d, k)
        return cls(
            injected=scrub(_str(d, "injected", k)),
            session=scrub(_req_str(d, "session", k)),
            # A daemon that predates `wake` leaves `woke` out and always wakes.
            woke=_bool(d, "woke", k, True),
            prompt_id=_scrub_opt(_opt_str(d, "prompt_id", k)),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {
            "injected": self.injected,
            "session": self.session,
            "woke": self.woke,
        }
        _put(out, "prompt_id", self.prompt_id)
        return out


@attrs.frozen
class WakeResult:
    """`POST .../wake` 200."""

    woken: str
    prompt: str = ""
    prompt_id: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WakeResult:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "wake answer"
        d = _obj(d, k)
        return cls(
            woken=_req_str(d, "woken", k),
            prompt=_str(d, "prompt", k),
            prompt_id=_opt_str(d, "prompt_id", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {"woken": self.woken, "prompt": self.prompt}
        _put(out, "prompt_id", self.prompt_id)
        return out


@attrs.frozen
class WhoAmI:
    """`GET /whoami`: who the daemon thinks the caller is.

    Attributes:
        identity: The caller's identity.
        admin: Whether the caller is an admin.
        source: Where the identity came from (for example `bearer`).
        proxy_by: The proxy that vouched for the caller, when one did.
    """

    identity: str
    admin: bool = False
    source: str = ""
    proxy_by: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WhoAmI:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "whoami answer"
        d = _obj(d, k)
        return cls(
            identity=_req_str(d, "identity", k),
            admin=_bool(d, "admin", k),
            source=_str(d, "source", k),
            proxy_by=_opt_str(d, "proxy_by", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {
            "identity": self.identity,
            "admin": self.admin,
            "source": self.source,
        }
        _put(out, "proxy_by", self.proxy_by)
        return out


@attrs.frozen
class PermsResponse:
    """The answer to a permission prompt response."""

    acknowledged: bool
    approver: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PermsResponse:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "perms answer"
        d = _obj(d, k)
        _req(d, "acknowledged", k)
        return cls(acknowledged=_bool(d, "acknowledged", k), approver=_str(d, "approver", k))

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {"acknowledged": self.acknowledged, "approver": self.approver}


@attrs.frozen
class ACL:
    """A session's access list."""

    owner: str
    viewers: tuple[str, ...] = ()
    contributors: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ACL:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        d = _obj(d, "acl")
        return cls(
            owner=_str(d, "owner", "acl"),
            viewers=_str_tuple(d, "viewers", "acl") or (),
            contributors=_str_tuple(d, "contributors", "acl") or (),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {
            "owner": self.owner,
            "viewers": list(self.viewers),
            "contributors": list(self.contributors),
        }


@attrs.frozen
class SessionTitle:
    """The answer to setting a session's title."""

    session: str
    title: str
    persisted: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SessionTitle:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "title answer"
        d = _obj(d, k)
        return cls(
            session=_req_str(d, "session", k),
            title=_str(d, "title", k),
            persisted=_bool(d, "persisted", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {"session": self.session, "title": self.title, "persisted": self.persisted}


@attrs.frozen
class PeerRecord:
    """A hub registry record. `registration_id` is "" when the hub redacted it.

    Attributes:
        name: The registered name.
        endpoint: The peer's base URL.
        registration_id: The registration's id; "" when the hub redacted it (it is the owner's).
        labels: The peer's labels.
        registered_at: When it registered (the hub's timestamp).
        last_heartbeat: When its lease was last renewed.
        lease_expires_at: When its lease lapses unless renewed.
    """

    name: str
    endpoint: str
    registration_id: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=labels_dict)
    registered_at: str = ""
    last_heartbeat: str = ""
    lease_expires_at: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PeerRecord:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        if type(d) is dict:
            # The common row, checked inline: a hub lists thousands per GET /peers, and the
            # general path below cost ~10 us a row. Anything unusual (a field missing, null
            # or of another type) takes the general path, which accepts or refuses it.
            name, endpoint = d.get("name"), d.get("endpoint")
            # A redacted row has no registration_id at all (omitempty).
            registration_id, labels = d.get("registration_id", ""), d.get("labels")
            registered, beat, expires = (
                d.get("registered_at"),
                d.get("last_heartbeat"),
                d.get("lease_expires_at"),
            )
            if (
                type(name) is str
                and type(endpoint) is str
                and type(registration_id) is str
                and type(registered) is str
                and type(beat) is str
                and type(expires) is str
                and (labels is None or (type(labels) is dict and _all_str(labels.values())))
            ):
                if registration_id:
                    checked_segment(registration_id, "the registration id")
                return cls(name, endpoint, registration_id, labels or {}, registered, beat, expires)
        k = "peer record"
        d = _obj(d, k)
        registration_id = _str(d, "registration_id", k)
        if registration_id:
            checked_segment(registration_id, "the registration id")
        return cls(
            name=_req_str(d, "name", k),
            endpoint=_str(d, "endpoint", k),
            registration_id=registration_id,
            labels=_str_map(d, "labels", k),
            registered_at=_str(d, "registered_at", k),
            last_heartbeat=_str(d, "last_heartbeat", k),
            lease_expires_at=_str(d, "lease_expires_at", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {
            "registration_id": self.registration_id,
            "name": self.name,
            "endpoint": self.endpoint,
        }
        if self.labels:
            out["labels"] = dict(self.labels)
        out["registered_at"] = self.registered_at
        out["last_heartbeat"] = self.last_heartbeat
        out["lease_expires_at"] = self.lease_expires_at
        return out


@attrs.frozen
class PeerList:
    """`GET /peers` 200, sorted by name."""

    peers: tuple[PeerRecord, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PeerList:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        d = _obj(d, "peer list")
        return cls(tuple(PeerRecord.from_dict(p) for p in _list(d, "peers", "peer list")))

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {"peers": [p.to_dict() for p in self.peers]}


# ------------------------------------------------------------------- ADK events


@attrs.frozen
class FunctionCall:
    name: str
    args: Mapping[str, Any] = attrs.field(factory=dict)
    id: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FunctionCall:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "function call"
        d = _obj(d, k)
        return cls(name=_str(d, "name", k), args=_map(d, "args", k) or {}, id=_opt_str(d, "id", k))

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {"name": self.name, "args": dict(self.args)}
        _put(out, "id", self.id)
        return out


@attrs.frozen
class FunctionResponse:
    name: str
    response: Mapping[str, Any] = attrs.field(factory=dict)
    id: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FunctionResponse:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "function response"
        d = _obj(d, k)
        return cls(
            name=_str(d, "name", k), response=_map(d, "response", k) or {}, id=_opt_str(d, "id", k)
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {"name": self.name, "response": dict(self.response)}
        _put(out, "id", self.id)
        return out


@attrs.frozen
class Part:
    """One part of a model message; the genai type's JSON tags are lower camel."""

    text: str | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    thought: bool | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Part:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        d = _obj(d, "part")
        fc = d.get("functionCall")
        fr = d.get("functionResponse")
        return cls(
            text=_opt_str(d, "text", "part"),
            function_call=FunctionCall.from_dict(fc) if fc is not None else None,
            function_response=FunctionResponse.from_dict(fr) if fr is not None else None,
            thought=_opt_bool(d, "thought", "part"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {}
        _put(out, "text", self.text)
        _put(out, "thought", self.thought)
        if self.function_call is not None:
            out["functionCall"] = self.function_call.to_dict()
        if self.function_response is not None:
            out["functionResponse"] = self.function_response.to_dict()
        return out


@attrs.frozen
class Content:
    role: str = ""
    parts: tuple[Part, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Content:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        d = _obj(d, "content")
        return cls(
            role=_str(d, "role", "content"),
            parts=tuple(Part.from_dict(p) for p in _list(d, "parts", "content")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {"parts": [p.to_dict() for p in self.parts], "role": self.role}


_DEFAULT_ACTIONS: Mapping[str, Any] = {
    "StateDelta": None,
    "ArtifactDelta": None,
    "RequestedToolConfirmations": None,
    "SkipSummarization": False,
    "TransferToAgent": "",
    "Escalate": False,
}


@attrs.frozen
class AgentEvent:
    """One ADK session event, as the daemon marshals it.

    Decoding accepts the Go spelling (`Author`, `ID`, `InvocationID`) and the
    newer lower-camel tags (`author`, `id`, `invocationId`); `to_dict` writes
    the current daemon's spelling (every field capitalised).

    Attributes:
        content: The message: a role and its parts (text, function calls and responses).
        partial: True for a streamed chunk of a message still being written.
        turn_complete: True on the event that ends the model's turn.
        interrupted: True when the turn was interrupted.
        error_code: The model's error code, when the event reports an error.
        error_message: The model's error message, when the event reports an error.
        finish_reason: Why the model stopped, as the model's API says it.
        id: The event's id.
        timestamp: When the event happened (the daemon's clock).
        invocation_id: The invocation (turn) the event belongs to.
        branch: The agent branch that produced it (sub-agents).
        author: Who wrote it: `user`, or the agent's name.
        actions: What the event asks of the session: state changes, transfers, escalation.
        long_running_tool_ids: Ids of function calls still running in the background.
        model_version: The model version that produced it.
        avg_logprobs: The model's average log probability, passed through.
        citation_metadata: The model's citations, passed through.
        grounding_metadata: The model's grounding data, passed through.
        usage_metadata: The model's token counts for the event, passed through.
        custom_metadata: Metadata an agent attached, passed through.
        logprobs_result: The model's log probabilities, passed through.
    """

    content: Content | None = None
    partial: bool = False
    turn_complete: bool = False
    interrupted: bool = False
    error_code: str = ""
    error_message: str = ""
    finish_reason: str = ""
    id: str = ""
    timestamp: str = ""
    invocation_id: str = ""
    branch: str = ""
    author: str = ""
    actions: Mapping[str, Any] | None = attrs.field(factory=lambda: dict(_DEFAULT_ACTIONS))
    long_running_tool_ids: tuple[str, ...] | None = None
    model_version: str = ""
    avg_logprobs: float = 0
    citation_metadata: Any = None
    grounding_metadata: Any = None
    usage_metadata: Any = None
    custom_metadata: Any = None
    logprobs_result: Any = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AgentEvent:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "agent event"
        d = _obj(d, k)
        if not ("Author" in d and "ID" in d and "InvocationID" in d):
            d = _go_spelling(d)  # the current daemon's spelling needs no renaming
        content = d.get("Content")
        return cls(
            content=Content.from_dict(content) if content is not None else None,
            partial=_bool(d, "Partial", k),
            turn_complete=_bool(d, "TurnComplete", k),
            interrupted=_bool(d, "Interrupted", k),
            error_code=_str(d, "ErrorCode", k),
            error_message=_str(d, "ErrorMessage", k),
            finish_reason=_str(d, "FinishReason", k),
            id=_str(d, "ID", k),
            timestamp=_str(d, "Timestamp", k),
            invocation_id=_str(d, "InvocationID", k),
            branch=_str(d, "Branch", k),
            author=_str(d, "Author", k),
            actions=_map(d, "Actions", k),
            long_running_tool_ids=_str_tuple(d, "LongRunningToolIDs", k),
            model_version=_str(d, "ModelVersion", k),
            avg_logprobs=_num(d, "AvgLogprobs", k),
            citation_metadata=d.get("CitationMetadata"),
            grounding_metadata=d.get("GroundingMetadata"),
            usage_metadata=d.get("UsageMetadata"),
            custom_metadata=d.get("CustomMetadata"),
            logprobs_result=d.get("LogprobsResult"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {
            "Content": self.content.to_dict() if self.content is not None else None,
            "CitationMetadata": self.citation_metadata,
            "GroundingMetadata": self.grounding_metadata,
            "UsageMetadata": self.usage_metadata,
            "CustomMetadata": self.custom_metadata,
            "LogprobsResult": self.logprobs_result,
            "ModelVersion": self.model_version,
            "Partial": self.partial,
            "TurnComplete": self.turn_complete,
            "Interrupted": self.interrupted,
            "ErrorCode": self.error_code,
            "ErrorMessage": self.error_message,
            "FinishReason": self.finish_reason,
            "AvgLogprobs": self.avg_logprobs,
            "ID": self.id,
            "Timestamp": self.timestamp,
            "InvocationID": self.invocation_id,
            "Branch": self.branch,
            "Author": self.author,
            "Actions": dict(self.actions) if self.actions is not None else None,
            "LongRunningToolIDs": (
                list(self.long_running_tool_ids) if self.long_running_tool_ids is not None else None
            ),
        }

    @property
    def text(self) -> str:
        """The event's text parts joined (thoughts excluded); "" when it has none."""
        if self.content is None:
            return ""
        return "".join(p.text for p in self.content.parts if p.text and not p.thought)

    @property
    def has_function(self) -> bool:
        """Whether the event carries a function call or a function response."""
        if self.content is None:
            return False
        return any(
            p.function_call is not None or p.function_response is not None
            for p in self.content.parts
        )


@attrs.frozen
class AgentFrame:
    """A legacy `agent` frame: one ADK event with its sequence number.

    Attributes:
        seq: The event's sequence number in the session's log (for `?since=`).
        event: The `AgentEvent`.
    """

    EVENT: ClassVar[str] = "agent"
    """The SSE event type of this frame: `agent`."""

    seq: int
    event: AgentEvent

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AgentFrame:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        d = _obj(d, "agent frame")
        return cls(
            seq=_int(d, "seq", "agent frame"),
            event=AgentEvent.from_dict(_req(d, "event", "agent frame")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {"seq": self.seq, "event": self.event.to_dict()}


@attrs.frozen
class SubagentEvents:
    """A page of a sub-agent's recorded events."""

    agent: str
    parent_session_id: str
    branches: tuple[str, ...] = ()
    events: tuple[AgentFrame, ...] = ()
    next_since: int = 0
    truncated: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SubagentEvents:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "sub-agent events"
        d = _obj(d, k)
        return cls(
            agent=_str(d, "agent", k),
            parent_session_id=_str(d, "parent_session_id", k),
            branches=_str_tuple(d, "branches", k) or (),
            events=tuple(AgentFrame.from_dict(e) for e in _list(d, "events", k)),
            next_since=_int(d, "next_since", k),
            truncated=_bool(d, "truncated", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {
            "agent": self.agent,
            "parent_session_id": self.parent_session_id,
            "branches": list(self.branches),
            "events": [e.to_dict() for e in self.events],
            "next_since": self.next_since,
            "truncated": self.truncated,
        }


# -------------------------------------------------------------- typed SSE events


@attrs.frozen
class AgentCard:
    name: str | None = None
    version: str | None = None
    description: str | None = None
    model: str | None = None
    url: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AgentCard:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "agent card"
        d = _obj(d, k)
        return cls(
            name=_opt_str(d, "name", k),
            version=_opt_str(d, "version", k),
            description=_opt_str(d, "description", k),
            model=_opt_str(d, "model", k),
            url=_opt_str(d, "url", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {}
        for key in ("name", "version", "description", "model", "url"):
            _put(out, key, getattr(self, key))
        return out


@attrs.frozen
class Capabilities:
    """The first frame of every stream: what the daemon speaks and offers.

    Attributes:
        protocol_version: The attach protocol version the daemon speaks.
        event_types: The SSE event types it may send.
        server: The daemon's name and version.
        features: Optional features, on or off, by name.
        slash_commands: Slash commands its sessions accept.
        agent: The agent it serves (its card), when it says.
        caller_id: Who the daemon thinks the caller is.
    """

    EVENT: ClassVar[str] = "capabilities"
    """The SSE event type of this frame: `capabilities`."""

    protocol_version: str
    event_types: tuple[str, ...] = ()
    server: str | None = None
    features: Mapping[str, bool] | None = None
    slash_commands: tuple[str, ...] | None = None
    agent: AgentCard | None = None
    caller_id: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Capabilities:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "capabilities"
        d = _obj(d, k)
        agent = d.get("agent")
        return cls(
            protocol_version=_req_str(d, "protocol_version", k),
            event_types=_str_tuple(d, "event_types", k) or (),
            server=_opt_str(d, "server", k),
            features=_map(d, "features", k),
            slash_commands=_str_tuple(d, "slash_commands", k),
            agent=AgentCard.from_dict(agent) if agent is not None else None,
            caller_id=_opt_str(d, "caller_id", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {
            "protocol_version": self.protocol_version,
            "event_types": list(self.event_types),
        }
        _put(out, "server", self.server)
        if self.features is not None:
            out["features"] = dict(self.features)
        if self.slash_commands is not None:
            out["slash_commands"] = list(self.slash_commands)
        if self.agent is not None:
            out["agent"] = self.agent.to_dict()
        _put(out, "caller_id", self.caller_id)
        return out

    def feature(self, name: str) -> bool:
        """Whether the daemon advertises a feature (absent means off)."""
        return bool((self.features or {}).get(name, False))


@attrs.frozen
class StatusUpdate:
    """`status-update`: the daemon's turn state, model and provider.

    Attributes:
        turn_state: `streaming` during a turn, `idle` around it.
        model: The model in use.
        provider: The model's provider.
        perm_mode: The permission mode of tool calls.
        context_pct: How full the model's context is, in percent.
        capabilities: The daemon's `Capabilities`, when it sends them again.
    """

    EVENT: ClassVar[str] = "status-update"
    """The SSE event type of this frame: `status-update`."""

    turn_state: str = ""
    model: str | None = None
    provider: str | None = None
    perm_mode: str | None = None
    context_pct: float | None = None
    capabilities: Capabilities | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StatusUpdate:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "status update"
        d = _obj(d, k)
        caps = d.get("capabilities")
        return cls(
            turn_state=_str(d, "turn_state", k),
            model=_opt_str(d, "model", k),
            provider=_opt_str(d, "provider", k),
            perm_mode=_opt_str(d, "perm_mode", k),
            context_pct=_opt_num(d, "context_pct", k),
            capabilities=Capabilities.from_dict(caps) if caps is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {}
        _put(out, "model", self.model)
        _put(out, "provider", self.provider)
        _put(out, "perm_mode", self.perm_mode)
        out["turn_state"] = self.turn_state
        _put(out, "context_pct", self.context_pct)
        if self.capabilities is not None:
            out["capabilities"] = self.capabilities.to_dict()
        return out


@attrs.frozen
class UsageUpdate:
    """`usage-update`: running token and cost totals of the session, and the last turn's.

    Attributes:
        tokens_in_total: Input tokens of the session so far.
        tokens_out_total: Output tokens of the session so far.
        cost_usd_total: The session's cost so far, in US dollars.
        turns_total: Turns the session has run.
        last_turn: The last turn's own counts, as the daemon sends them.
    """

    EVENT: ClassVar[str] = "usage-update"
    """The SSE event type of this frame: `usage-update`."""

    tokens_in_total: int = 0
    tokens_out_total: int = 0
    cost_usd_total: float = 0.0
    turns_total: int = 0
    last_turn: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UsageUpdate:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "usage update"
        d = _obj(d, k)
        return cls(
            tokens_in_total=_int(d, "tokens_in_total", k),
            tokens_out_total=_int(d, "tokens_out_total", k),
            cost_usd_total=_num(d, "cost_usd_total", k),
            turns_total=_int(d, "turns_total", k),
            last_turn=_map(d, "last_turn", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {
            "tokens_in_total": self.tokens_in_total,
            "tokens_out_total": self.tokens_out_total,
            "cost_usd_total": self.cost_usd_total,
            "turns_total": self.turns_total,
        }
        if self.last_turn is not None:
            out["last_turn"] = dict(self.last_turn)
        return out


@attrs.frozen
class Inbox:
    """`inbox`: a message queued for, or taken by, the next turn (`prompt_id` names it).

    Attributes:
        state: `queued`, or `dequeued` once a turn took it.
        prompt_id: The message's id.
        queued_at: When it was queued.
    """

    EVENT: ClassVar[str] = "inbox"
    """The SSE event type of this frame: `inbox`."""

    state: str
    prompt_id: str = ""
    queued_at: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Inbox:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        d = _obj(d, "inbox")
        return cls(
            state=_req_str(d, "state", "inbox"),
            prompt_id=_str(d, "prompt_id", "inbox"),
            queued_at=_opt_str(d, "queued_at", "inbox"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {"state": self.state, "prompt_id": self.prompt_id}
        _put(out, "queued_at", self.queued_at)
        return out


@attrs.frozen
class TurnComplete:
    """`turn-complete`: a turn ended; tokens, latency and the turn's own `prompt_id`.

    Attributes:
        prompt_id: The id the turn gave its prompt (not the inject's).
        model: The model that ran the turn.
        tokens_in: The turn's input tokens.
        tokens_out: The turn's output tokens.
        cost_usd: The turn's cost in US dollars (a daemon does not send it: None).
        latency_ms: How long the turn took, in milliseconds.
    """

    EVENT: ClassVar[str] = "turn-complete"
    """The SSE event type of this frame: `turn-complete`."""

    prompt_id: str = ""
    model: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    latency_ms: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TurnComplete:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "turn-complete"
        d = _obj(d, k)
        return cls(
            prompt_id=_str(d, "prompt_id", k),
            model=_str(d, "model", k),
            tokens_in=_int(d, "tokens_in", k),
            tokens_out=_int(d, "tokens_out", k),
            cost_usd=_opt_num(d, "cost_usd", k),
            latency_ms=_int(d, "latency_ms", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {
            "prompt_id": self.prompt_id,
            "model": self.model,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        }
        _put(out, "cost_usd", self.cost_usd)
        out["latency_ms"] = self.latency_ms
        return out


def _known_kind(kind: str) -> str:
    return kind if kind in TURN_ERROR_KINDS else "unknown"


@attrs.frozen
class TurnError:
    """`turn-error`. An unknown `kind` is read as "unknown" (forward compatibility).

    Attributes:
        kind: One of `TURN_ERROR_KINDS`; `unknown` for a kind the SDK does not know.
        message: What went wrong, in the daemon's words.
        retryable: Whether trying again may work.
        code: An error code, when the daemon sends one.
        hint: What to do about it, when the daemon says.
    """

    EVENT: ClassVar[str] = "turn-error"
    """The SSE event type of this frame: `turn-error`."""

    kind: str = attrs.field(converter=_known_kind)
    message: str = ""
    retryable: bool = False
    code: str | None = None
    hint: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TurnError:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        k = "turn-error"
        d = _obj(d, k)
        return cls(
            kind=_str(d, "kind", k, "unknown"),
            message=_str(d, "message", k),
            retryable=_bool(d, "retryable", k),
            code=_opt_str(d, "code", k),
            hint=_opt_str(d, "hint", k),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {"kind": self.kind}
        _put(out, "code", self.code)
        out["message"] = self.message
        out["retryable"] = self.retryable
        _put(out, "hint", self.hint)
        return out


@attrs.frozen
class Wake:
    """`wake`: the daemon woke to work on its inbox (`at` is when).

    Attributes:
        at: When it woke (the daemon's timestamp).
    """

    EVENT: ClassVar[str] = "wake"
    """The SSE event type of this frame: `wake`."""

    at: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Wake:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        return cls(at=_req_str(_obj(d, "wake"), "at", "wake"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        return {"at": self.at}


@attrs.frozen
class Pause:
    """`pause`: the daemon paused or resumed (`state`, with an optional reason).

    Attributes:
        state: Whether it paused or resumed.
        at: When (the daemon's timestamp).
        reason: Why, when the daemon says.
        interrupted: Whether a running turn was interrupted.
        mode: The pause's mode, when the daemon says.
    """

    EVENT: ClassVar[str] = "pause"
    """The SSE event type of this frame: `pause`."""

    state: str
    at: str = ""
    reason: str | None = None
    interrupted: bool | None = None
    mode: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Pause:
        """Read it from the daemon's JSON; a wrong type or a missing field is a ProtocolError."""
        d = _obj(d, "pause")
        return cls(
            state=_req_str(d, "state", "pause"),
            at=_str(d, "at", "pause"),
            reason=_opt_str(d, "reason", "pause"),
            interrupted=_opt_bool(d, "interrupted", "pause"),
            mode=_opt_str(d, "mode", "pause"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON the daemon sends for it, under the daemon's own key names."""
        out: dict[str, Any] = {"state": self.state}
        _put(out, "reason", self.reason)
        _put(out, "interrupted", self.interrupted)
        _put(out, "mode", self.mode)
        out["at"] = self.at
        return out


Frame = (
    Capabilities
    | StatusUpdate
    | UsageUpdate
    | Inbox
    | TurnComplete
    | TurnError
    | Wake
    | Pause
    | AgentFrame
)
"""Any frame an event stream yields: one typed event, or a legacy `agent` frame."""

_FRAME_TYPES: dict[str, Any] = {
    cls.EVENT: cls
    for cls in (
        Capabilities,
        StatusUpdate,
        UsageUpdate,
        Inbox,
        TurnComplete,
        TurnError,
        Wake,
        Pause,
    )
}
_FRAME_TYPES["agent"] = AgentFrame


def event_kind(event: str) -> str:
    """The event type a frame counts as: one with no `event:` line is a legacy `agent` frame.

    (Some SSE decoders report a missing `event:` line as "message".)
    """
    return "agent" if event in ("", "message") else event


def decode_frame(event: str, data: str) -> Frame | None:
    """A typed frame, or None for what a consumer must skip.

    Unknown event types, data that is not JSON, and JSON of the wrong shape are
    skipped rather than fatal: a newer daemon may send what this SDK does not
    know, and one bad frame must not end a delegation.
    """
    cls = _FRAME_TYPES.get(event_kind(event))
    if cls is None:
        return None
    try:
        payload = json.loads(data)
        if not isinstance(payload, dict):
            return None
        frame: Frame = cls.from_dict(payload)
    except (ValueError, RecursionError, ProtocolError):
        return None
    return frame


def _compact(payload: Any) -> str:
    # Go's encoding/json writes compact JSON and keeps non-ASCII as UTF-8.
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def encode_sse(event: str, payload: Mapping[str, Any] | Sequence[Any]) -> bytes:
    """One SSE frame exactly as the daemon writes it: `event: X\\ndata: {json}\\n\\n`."""
    return f"event: {event}\ndata: {_compact(payload)}\n\n".encode()
