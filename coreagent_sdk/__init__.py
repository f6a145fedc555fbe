"""coreagent-sdk: talk to fleets of core-agent daemons (attach mode: HTTP + SSE).

The public surface is what this module exports; everything in `_private`
modules may change. Exceptions live in `coreagent_sdk.errors`.
"""

from __future__ import annotations

from ._attach._agentcard import AgentCard, AgentSkill
from ._attach._client import AttachClient
from ._attach._oversized import OversizedFrame
from ._attach._quote import quote_name
from ._attach._recording import (
    RECORDING_VERSION,
    Recording,
    RecordingEntry,
    RecordingTransport,
    SessionRecorder,
)
from ._attach._sse import MAX_EVENT_BYTES, MAX_LINE_BYTES
from ._attach._wire import (
    PROTOCOL_VERSION,
    TURN_ERROR_KINDS,
    AgentEvent,
    AgentFrame,
    Capabilities,
    Frame,
    Inbox,
    InjectResult,
    Pause,
    PeerRecord,
    SessionCreated,
    SessionInfo,
    StatusUpdate,
    TurnComplete,
    TurnError,
    UsageUpdate,
    Wake,
    WhoAmI,
)
from ._clock import Clock, FakeClock, SystemClock
from ._display._callgraph import CallEdge, CallGraph, call_graph
from ._display._render import escape_html
from ._http._deadline import DEFAULT_REQUEST_TIMEOUT
from ._http._endpoint import endpoint_problem
from ._http._hosts import HostAllowList
from ._http._transport import ASGITransport, RoutingTransport
from ._peer._a2a_directory import A2A_LABEL, A2ADirectory
from ._peer._call_peer import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_TIMEOUT,
    DEFAULT_TOOL_NAME,
    MAX_TIMEOUT,
    AllowList,
    CallPeer,
    CallPeerEvent,
    CallPeerResult,
    Gate,
)
from ._peer._directory import (
    DEFAULT_HUB_CONNECTIONS,
    A2AInterface,
    Directory,
    DirectoryFunc,
    HubDirectory,
    Peer,
    Roster,
    StaticDirectory,
    lookup_peer,
)
from ._peer._registration import PeerRegistration, RegistrationEvent
from ._records._calllog import CallLog, CallRecord
from ._records._calltree import CallTree
from ._records._pricing import Price, PriceTable
from ._records._steps import TurnStep
from ._records._usage import TokenUsage, TurnUsage
from ._runtime._builder import AgentBuilder, BuilderConfig, ModelDefaults, RuntimeSpec, SecretSource
from ._runtime._runtime_cache import (
    DEFAULT_MAX_INSTANCES,
    AgentConfig,
    Builder,
    CacheEvent,
    CacheStats,
    ConfigLoader,
    RuntimeCache,
)
from ._version import __version__
from .jupyter import run_sync

__all__ = [
    "A2A_LABEL",
    "A2ADirectory",
    "A2AInterface",
    "ASGITransport",
    "AgentBuilder",
    "AgentCard",
    "AgentConfig",
    "AgentEvent",
    "AgentFrame",
    "AgentSkill",
    "AllowList",
    "AttachClient",
    "Builder",
    "BuilderConfig",
    "CacheEvent",
    "CacheStats",
    "CallEdge",
    "CallGraph",
    "CallLog",
    "CallPeer",
    "CallPeerEvent",
    "CallPeerResult",
    "CallRecord",
    "CallTree",
    "Capabilities",
    "Clock",
    "ConfigLoader",
    "DEFAULT_HUB_CONNECTIONS",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_INSTANCES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TOOL_NAME",
    "Directory",
    "DirectoryFunc",
    "FakeClock",
    "Frame",
    "Gate",
    "HostAllowList",
    "HubDirectory",
    "Inbox",
    "InjectResult",
    "MAX_EVENT_BYTES",
    "MAX_LINE_BYTES",
    "MAX_TIMEOUT",
    "ModelDefaults",
    "OversizedFrame",
    "PROTOCOL_VERSION",
    "RECORDING_VERSION",
    "Pause",
    "Peer",
    "PeerRecord",
    "PeerRegistration",
    "Price",
    "PriceTable",
    "Recording",
    "RecordingEntry",
    "RecordingTransport",
    "RegistrationEvent",
    "Roster",
    "RoutingTransport",
    "RuntimeCache",
    "RuntimeSpec",
    "SecretSource",
    "SessionCreated",
    "SessionInfo",
    "SessionRecorder",
    "StaticDirectory",
    "StatusUpdate",
    "SystemClock",
    "TURN_ERROR_KINDS",
    "TurnComplete",
    "TurnError",
    "TokenUsage",
    "TurnStep",
    "TurnUsage",
    "UsageUpdate",
    "Wake",
    "WhoAmI",
    "__version__",
    "call_graph",
    "endpoint_problem",
    "escape_html",
    "lookup_peer",
    "quote_name",
    "run_sync",
]
