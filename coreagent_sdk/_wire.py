"""The attach protocol's JSON shapes as frozen attrs values, and SSE frame encoding.

Decoding follows the daemon's own rules: unknown fields are ignored, optional
fields may be absent, and timestamps stay the RFC 3339 strings the daemon sent
(any precision, any offset), so re-encoding gives back the same JSON keys.
Every type has `from_dict` and `to_dict`; `to_dict` omits optional fields
that are unset, as the daemon does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from .errors import ProtocolError

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


def _req(d: Mapping[str, Any], key: str, kind: str) -> Any:
    try:
        return d[key]
    except KeyError:
        # The keys are the server's words: bounded here, scrubbed by the error itself.
        keys = ", ".join(sorted(map(str, d))[:20]) + (", ..." if len(d) > 20 else "")
        keys = keys if len(keys) <= 400 else keys[:400] + "..."
        raise ProtocolError(
            f"wire: {kind} is missing the required field {key!r} (got keys: "
            f"{keys or 'none'}); is the other side an attach-mode daemon?"
        ) from None


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


def _frozen_map(value: Any) -> Mapping[str, Any] | None:
    return None if value is None else dict(value)


# --------------------------------------------------------------------- REST bodies


@attrs.frozen
class SessionCreated:
    """`POST /sessions` 201: the new session and its absolute URL."""

    app: str
    user: str
    session_id: str
    url: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SessionCreated:
        return cls(
            app=_req(d, "app", "session"),
            user=d.get("user", ""),
            session_id=_req(d, "sessionID", "session"),
            url=d.get("url", ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"app": self.app, "user": self.user, "sessionID": self.session_id, "url": self.url}

    @property
    def path(self) -> str:
        """The session's path on its daemon: `/sessions/{app}/{sessionID}`."""
        return f"/sessions/{self.app}/{self.session_id}"


@attrs.frozen
class SessionInfo:
    """One row of `GET /sessions`."""

    app: str
    user: str
    session_id: str
    has_event_log: bool
    status: str
    last_touched_at: str
    title: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SessionInfo:
        return cls(
            app=_req(d, "app", "session row"),
            user=d.get("user", ""),
            session_id=_req(d, "sessionID", "session row"),
            has_event_log=bool(d.get("has_event_log", False)),
            status=d.get("status", ""),
            last_touched_at=d.get("last_touched_at", ""),
            title=d.get("title"),
        )

    def to_dict(self) -> dict[str, Any]:
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
        return cls(tuple(SessionInfo.from_dict(s) for s in d.get("sessions") or ()))

    def to_dict(self) -> dict[str, Any]:
        return {"sessions": [s.to_dict() for s in self.sessions]}


@attrs.frozen
class InjectResult:
    """`POST .../inject` 200."""

    injected: str
    session: str
    woke: bool = True
    prompt_id: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InjectResult:
        return cls(
            injected=d.get("injected", ""),
            session=_req(d, "session", "inject answer"),
            # A daemon that predates `wake` leaves `woke` out and always wakes.
            woke=bool(d.get("woke", True)),
            prompt_id=d.get("prompt_id"),
        )

    def to_dict(self) -> dict[str, Any]:
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
        return cls(
            woken=_req(d, "woken", "wake answer"),
            prompt=d.get("prompt", ""),
            prompt_id=d.get("prompt_id"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"woken": self.woken, "prompt": self.prompt}
        _put(out, "prompt_id", self.prompt_id)
        return out


@attrs.frozen
class WhoAmI:
    """`GET /whoami`: who the daemon thinks the caller is."""

    identity: str
    admin: bool = False
    source: str = ""
    proxy_by: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WhoAmI:
        return cls(
            identity=_req(d, "identity", "whoami answer"),
            admin=bool(d.get("admin", False)),
            source=d.get("source", ""),
            proxy_by=d.get("proxy_by"),
        )

    def to_dict(self) -> dict[str, Any]:
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
        return cls(
            acknowledged=bool(_req(d, "acknowledged", "perms answer")),
            approver=d.get("approver", ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"acknowledged": self.acknowledged, "approver": self.approver}


@attrs.frozen
class ACL:
    """A session's access list."""

    owner: str
    viewers: tuple[str, ...] = ()
    contributors: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ACL:
        return cls(
            owner=d.get("owner", ""),
            viewers=tuple(d.get("viewers") or ()),
            contributors=tuple(d.get("contributors") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
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
        return cls(
            session=_req(d, "session", "title answer"),
            title=d.get("title", ""),
            persisted=bool(d.get("persisted", False)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"session": self.session, "title": self.title, "persisted": self.persisted}


@attrs.frozen
class PeerRecord:
    """A hub registry record. `registration_id` is "" when the hub redacted it."""

    name: str
    endpoint: str
    registration_id: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=labels_dict)
    registered_at: str = ""
    last_heartbeat: str = ""
    lease_expires_at: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PeerRecord:
        return cls(
            name=_req(d, "name", "peer record"),
            endpoint=d.get("endpoint", ""),
            registration_id=d.get("registration_id", ""),
            labels=d.get("labels") or {},
            registered_at=d.get("registered_at", ""),
            last_heartbeat=d.get("last_heartbeat", ""),
            lease_expires_at=d.get("lease_expires_at", ""),
        )

    def to_dict(self) -> dict[str, Any]:
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
        return cls(tuple(PeerRecord.from_dict(p) for p in d.get("peers") or ()))

    def to_dict(self) -> dict[str, Any]:
        return {"peers": [p.to_dict() for p in self.peers]}


# ------------------------------------------------------------------- ADK events


@attrs.frozen
class FunctionCall:
    name: str
    args: Mapping[str, Any] = attrs.field(factory=dict)
    id: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FunctionCall:
        return cls(name=d.get("name", ""), args=d.get("args") or {}, id=d.get("id"))

    def to_dict(self) -> dict[str, Any]:
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
        return cls(name=d.get("name", ""), response=d.get("response") or {}, id=d.get("id"))

    def to_dict(self) -> dict[str, Any]:
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
        fc = d.get("functionCall")
        fr = d.get("functionResponse")
        return cls(
            text=d.get("text"),
            function_call=FunctionCall.from_dict(fc) if fc is not None else None,
            function_response=FunctionResponse.from_dict(fr) if fr is not None else None,
            thought=d.get("thought"),
        )

    def to_dict(self) -> dict[str, Any]:
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
        return cls(
            role=d.get("role", ""), parts=tuple(Part.from_dict(p) for p in d.get("parts") or ())
        )

    def to_dict(self) -> dict[str, Any]:
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
        if not ("Author" in d and "ID" in d and "InvocationID" in d):
            d = _go_spelling(d)  # the current daemon's spelling needs no renaming
        content = d.get("Content")
        lr = d.get("LongRunningToolIDs")
        return cls(
            content=Content.from_dict(content) if content is not None else None,
            partial=bool(d.get("Partial", False)),
            turn_complete=bool(d.get("TurnComplete", False)),
            interrupted=bool(d.get("Interrupted", False)),
            error_code=d.get("ErrorCode") or "",
            error_message=d.get("ErrorMessage") or "",
            finish_reason=d.get("FinishReason") or "",
            id=d.get("ID") or "",
            timestamp=d.get("Timestamp") or "",
            invocation_id=d.get("InvocationID") or "",
            branch=d.get("Branch") or "",
            author=d.get("Author") or "",
            actions=_frozen_map(d.get("Actions")),
            long_running_tool_ids=tuple(lr) if lr is not None else None,
            model_version=d.get("ModelVersion") or "",
            avg_logprobs=d.get("AvgLogprobs") or 0,
            citation_metadata=d.get("CitationMetadata"),
            grounding_metadata=d.get("GroundingMetadata"),
            usage_metadata=d.get("UsageMetadata"),
            custom_metadata=d.get("CustomMetadata"),
            logprobs_result=d.get("LogprobsResult"),
        )

    def to_dict(self) -> dict[str, Any]:
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
    """A legacy `agent` frame: one ADK event with its sequence number."""

    EVENT: ClassVar[str] = "agent"

    seq: int
    event: AgentEvent

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AgentFrame:
        return cls(
            seq=int(d.get("seq", 0)), event=AgentEvent.from_dict(_req(d, "event", "agent frame"))
        )

    def to_dict(self) -> dict[str, Any]:
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
        return cls(
            agent=d.get("agent", ""),
            parent_session_id=d.get("parent_session_id", ""),
            branches=tuple(d.get("branches") or ()),
            events=tuple(AgentFrame.from_dict(e) for e in d.get("events") or ()),
            next_since=int(d.get("next_since", 0)),
            truncated=bool(d.get("truncated", False)),
        )

    def to_dict(self) -> dict[str, Any]:
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
        return cls(
            name=d.get("name"),
            version=d.get("version"),
            description=d.get("description"),
            model=d.get("model"),
            url=d.get("url"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("name", "version", "description", "model", "url"):
            _put(out, key, getattr(self, key))
        return out


@attrs.frozen
class Capabilities:
    """The first frame of every stream: what the daemon speaks and offers."""

    EVENT: ClassVar[str] = "capabilities"

    protocol_version: str
    event_types: tuple[str, ...] = ()
    server: str | None = None
    features: Mapping[str, bool] | None = None
    slash_commands: tuple[str, ...] | None = None
    agent: AgentCard | None = None
    caller_id: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Capabilities:
        sc = d.get("slash_commands")
        agent = d.get("agent")
        return cls(
            protocol_version=_req(d, "protocol_version", "capabilities"),
            event_types=tuple(d.get("event_types") or ()),
            server=d.get("server"),
            features=_frozen_map(d.get("features")),
            slash_commands=tuple(sc) if sc is not None else None,
            agent=AgentCard.from_dict(agent) if agent is not None else None,
            caller_id=d.get("caller_id"),
        )

    def to_dict(self) -> dict[str, Any]:
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
    """`status-update`: the daemon's turn state, model and provider."""

    EVENT: ClassVar[str] = "status-update"

    turn_state: str = ""
    model: str | None = None
    provider: str | None = None
    perm_mode: str | None = None
    context_pct: float | None = None
    capabilities: Capabilities | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StatusUpdate:
        caps = d.get("capabilities")
        return cls(
            turn_state=d.get("turn_state", ""),
            model=d.get("model"),
            provider=d.get("provider"),
            perm_mode=d.get("perm_mode"),
            context_pct=d.get("context_pct"),
            capabilities=Capabilities.from_dict(caps) if caps is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
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
    """`usage-update`: running token and cost totals of the session, and the last turn's."""

    EVENT: ClassVar[str] = "usage-update"

    tokens_in_total: int = 0
    tokens_out_total: int = 0
    cost_usd_total: float = 0.0
    turns_total: int = 0
    last_turn: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UsageUpdate:
        return cls(
            tokens_in_total=int(d.get("tokens_in_total", 0)),
            tokens_out_total=int(d.get("tokens_out_total", 0)),
            cost_usd_total=float(d.get("cost_usd_total", 0.0)),
            turns_total=int(d.get("turns_total", 0)),
            last_turn=_frozen_map(d.get("last_turn")),
        )

    def to_dict(self) -> dict[str, Any]:
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
    """`inbox`: a message queued for, or taken by, the next turn (`prompt_id` names it)."""

    EVENT: ClassVar[str] = "inbox"

    state: str
    prompt_id: str = ""
    queued_at: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Inbox:
        return cls(
            state=_req(d, "state", "inbox"),
            prompt_id=d.get("prompt_id", ""),
            queued_at=d.get("queued_at"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "prompt_id": self.prompt_id}
        _put(out, "queued_at", self.queued_at)
        return out


@attrs.frozen
class TurnComplete:
    """`turn-complete`: a turn ended; tokens, latency and the turn's own `prompt_id`."""

    EVENT: ClassVar[str] = "turn-complete"

    prompt_id: str = ""
    model: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    latency_ms: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TurnComplete:
        return cls(
            prompt_id=d.get("prompt_id", ""),
            model=d.get("model", ""),
            tokens_in=int(d.get("tokens_in", 0)),
            tokens_out=int(d.get("tokens_out", 0)),
            cost_usd=d.get("cost_usd"),
            latency_ms=int(d.get("latency_ms", 0)),
        )

    def to_dict(self) -> dict[str, Any]:
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
    """`turn-error`. An unknown `kind` is read as "unknown" (forward compatibility)."""

    EVENT: ClassVar[str] = "turn-error"

    kind: str = attrs.field(converter=_known_kind)
    message: str = ""
    retryable: bool = False
    code: str | None = None
    hint: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TurnError:
        return cls(
            kind=d.get("kind", "unknown"),
            message=d.get("message", ""),
            retryable=bool(d.get("retryable", False)),
            code=d.get("code"),
            hint=d.get("hint"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        _put(out, "code", self.code)
        out["message"] = self.message
        out["retryable"] = self.retryable
        _put(out, "hint", self.hint)
        return out


@attrs.frozen
class Wake:
    """`wake`: the daemon woke to work on its inbox (`at` is when)."""

    EVENT: ClassVar[str] = "wake"

    at: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Wake:
        return cls(at=_req(d, "at", "wake"))

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at}


@attrs.frozen
class Pause:
    """`pause`: the daemon paused or resumed (`state`, with an optional reason)."""

    EVENT: ClassVar[str] = "pause"

    state: str
    at: str = ""
    reason: str | None = None
    interrupted: bool | None = None
    mode: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Pause:
        return cls(
            state=_req(d, "state", "pause"),
            at=d.get("at", ""),
            reason=d.get("reason"),
            interrupted=d.get("interrupted"),
            mode=d.get("mode"),
        )

    def to_dict(self) -> dict[str, Any]:
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

    (httpx-sse reports a missing `event:` line as "message".)
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
    except (ValueError, TypeError, KeyError, AttributeError, ProtocolError):
        return None
    return frame


def _compact(payload: Any) -> str:
    # Go's encoding/json writes compact JSON and keeps non-ASCII as UTF-8.
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def encode_sse(event: str, payload: Mapping[str, Any] | Sequence[Any]) -> bytes:
    """One SSE frame exactly as the daemon writes it: `event: X\\ndata: {json}\\n\\n`."""
    return f"event: {event}\ndata: {_compact(payload)}\n\n".encode()
