"""The public surface is pinned: a change to it is a deliberate edit of this file."""

from __future__ import annotations

import coreagent_sdk
import coreagent_sdk.errors
import simulator
import simulator.behaviors

SDK = {
    "ASGITransport",
    "AgentBuilder",
    "AgentConfig",
    "AgentEvent",
    "AgentFrame",
    "AllowList",
    "AttachClient",
    "Builder",
    "BuilderConfig",
    "CacheEvent",
    "CacheStats",
    "CallLog",
    "CallPeer",
    "CallPeerEvent",
    "CallPeerResult",
    "CallRecord",
    "Capabilities",
    "Clock",
    "ConfigLoader",
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
    "Pause",
    "RECORDING_VERSION",
    "Peer",
    "PeerRecord",
    "PeerRegistration",
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
    "UsageUpdate",
    "Wake",
    "WhoAmI",
    "__version__",
    "endpoint_problem",
    "lookup_peer",
    "run_sync",
}


def test_the_sdk_exports_exactly_the_pinned_names() -> None:
    assert set(coreagent_sdk.__all__) == SDK
    for name in SDK:
        assert hasattr(coreagent_sdk, name), name


def test_every_exported_class_and_function_is_defined_in_the_sdk() -> None:
    import inspect
    import typing

    for name in coreagent_sdk.__all__:
        value = getattr(coreagent_sdk, name)
        if typing.get_origin(value) is not None:
            continue  # a type alias such as Gate (Python 3.10 calls those classes)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("coreagent_sdk"), name


def test_the_contract_constants_have_their_documented_values() -> None:
    assert coreagent_sdk.DEFAULT_TOOL_NAME == "call_peer"
    assert coreagent_sdk.DEFAULT_TIMEOUT == 120.0
    assert coreagent_sdk.MAX_TIMEOUT == 900.0
    assert coreagent_sdk.DEFAULT_MAX_RESPONSE_BYTES == 16 * 1024
    assert coreagent_sdk.DEFAULT_MAX_INSTANCES == 64


def test_every_error_derives_from_core_agent_error() -> None:
    errors = coreagent_sdk.errors
    for name in errors.__all__:
        value = getattr(errors, name)
        if isinstance(value, type):
            assert issubclass(value, errors.CoreAgentError), name
    for name in (
        "UnknownPeerError",
        "PeerTurnError",
        "PeerTimeoutError",
        "StreamEndedError",
        "TokenUnsetError",
        "InvalidTokenError",
        "PermissionDeniedError",
    ):
        assert issubclass(getattr(errors, name), errors.CallPeerError), name


def test_the_simulator_exports_fleet_and_behaviors() -> None:
    assert {"Fleet", "behaviors", "PeerRegistry", "Faults", "Identity", "SimulatedBuilder"} <= set(
        simulator.__all__
    )
    assert set(simulator.behaviors.__all__) == {
        "Behavior",
        "Turn",
        "custom",
        "delegate",
        "drop_stream",
        "echo",
        "fail",
        "fan_out",
        "join_answers",
        "narrate",
        "never_finish",
        "replay",
        "reply",
        "slow",
        "stream",
    }


def test_the_sdk_never_imports_the_simulator() -> None:
    import pathlib

    root = pathlib.Path(coreagent_sdk.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "import simulator" not in text and "from simulator" not in text, path
