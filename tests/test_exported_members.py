"""The public surface is pinned: a change to it is a deliberate edit of this file."""

from __future__ import annotations

import ast
import pathlib

import coreagent_sdk
import coreagent_sdk.errors
import coreagent_sdk.host
import coreagent_sdk.mcp
import coreagent_sdk.models
import simulator
import simulator.behaviors
import simulator.experiments

SDK = {
    "A2ADirectory",
    "A2AInterface",
    "A2A_LABEL",
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
    "Pause",
    "RECORDING_VERSION",
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
}


HOST = {
    "CALL_PEER_SPEC",
    "DEFAULT_MAX_PEER_CALLS",
    "DEFAULT_MAX_TOOL_ROUNDS",
    "DEFAULT_MAX_SESSIONS_IN_MEMORY",
    "DEFAULT_SESSION_IDLE_TIMEOUT",
    "DEFAULT_TTL",
    "IDLE_TIMEOUT",
    "INBOX_CAP",
    "MAX_HEADER_BYTES",
    "MAX_INJECT_BYTES",
    "MAX_REGISTER_BYTES",
    "MAX_TTL",
    "READ_HEADER_TIMEOUT",
    "REPLAY_WINDOW",
    "STARTUP_SESSION",
    "SUBSCRIBER_QUEUE_LIMIT",
    "Agent",
    "AgentHost",
    "MultiAgentHost",
    "RuntimeBuildError",
    "Identity",
    "ModelAgent",
    "PeerRegistry",
    "RegistryEntry",
    "SessionRateLimit",
    "SharedStore",
    "StreamHook",
    "Turn",
    "uvicorn_options",
}


MODELS = {
    "ROLES",
    "AnthropicModel",
    "Message",
    "Model",
    "ModelError",
    "ModelReply",
    "OpenAIChatModel",
    "RecordingModel",
    "ReplayModel",
    "Rule",
    "ScriptState",
    "ScriptedModel",
    "Skill",
    "Tool",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "when",
}


def test_the_models_package_exports_exactly_the_pinned_names() -> None:
    assert set(coreagent_sdk.models.__all__) == MODELS
    for name in MODELS:
        assert hasattr(coreagent_sdk.models, name), name


def test_the_host_exports_exactly_the_pinned_names() -> None:
    assert set(coreagent_sdk.host.__all__) == HOST
    for name in HOST:
        assert hasattr(coreagent_sdk.host, name), name


def test_the_hosts_internal_helpers_stay_importable_but_out_of_its_api() -> None:
    # They were in __all__ once; code that imported them keeps working.
    helpers = {
        "checked_base_url",
        "checked_token",
        "fleet_html",
        "http_transport",
        "read_token",
        "server_text",
        "shown_url",
    }
    assert not helpers & set(coreagent_sdk.host.__all__)
    assert all(callable(getattr(coreagent_sdk.host, name)) for name in helpers)


def test_the_simulators_daemon_and_turn_are_the_hosts() -> None:
    # The public contract never renames: `simulator.Daemon` stays, as the host's name for it.
    assert simulator.Daemon is coreagent_sdk.host.AgentHost
    assert simulator.Turn is coreagent_sdk.host.Turn
    assert simulator.behaviors.Turn is coreagent_sdk.host.Turn


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
    assert coreagent_sdk.DEFAULT_MAX_CONNECTIONS == 100
    assert coreagent_sdk.DEFAULT_HUB_CONNECTIONS == 10


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
        "model",
        "narrate",
        "never_finish",
        "replay",
        "reply",
        "slow",
        "stream",
    }


# coreagent_sdk.mcp: agents and fleets served as MCP servers (the serving half).
MCP_SERVING = {
    "DEFAULT_CARD_TIMEOUT",
    "DEFAULT_MAX_SERVED_TOOLS",
    "DEFAULT_POLL_INTERVAL",
    "MAX_CHUNK_CHARS",
    "REQUEST_SCHEMA",
    "RESULT_SCHEMA",
    "AgentMCPServer",
    "FleetMCPServer",
    "ServedTool",
}


def test_the_mcp_package_exports_exactly_both_halves_pinned_names() -> None:
    assert set(coreagent_sdk.mcp.__all__) == MCP | MCP_SERVING
    for name in MCP_SERVING:
        assert hasattr(coreagent_sdk.mcp, name), name


def test_a_plain_import_of_the_sdk_or_its_mcp_package_does_not_import_the_mcp_sdk() -> None:
    import subprocess
    import sys

    code = (
        "import sys, coreagent_sdk; a = 'mcp' in sys.modules; import coreagent_sdk.mcp; "
        "b = 'mcp' in sys.modules; coreagent_sdk.mcp.AgentMCPServer; "
        "print(a, b, 'mcp' in sys.modules)"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.split() == ["False", "False", "True"]


def test_the_sdk_never_imports_the_simulator() -> None:
    import pathlib

    root = pathlib.Path(coreagent_sdk.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "import simulator" not in text and "from simulator" not in text, path


def test_the_sdk_core_never_imports_the_host() -> None:
    # The host imports the core, never the reverse: a plain install has no web server.
    root = pathlib.Path(coreagent_sdk.__file__).parent
    for path in root.glob("*.py"):
        text = path.read_text()
        assert "from .host" not in text and "coreagent_sdk.host" not in text, path


def _sdk_imports(path: pathlib.Path) -> list[tuple[str, str]]:
    """(module, name) of every import of the SDK in a file, at any depth (TYPE_CHECKING too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return [(m, n) for m, n in found if m.split(".")[0] == "coreagent_sdk"]


def test_the_simulator_imports_only_public_sdk_names() -> None:
    root = pathlib.Path(simulator.__file__).parent
    private = []
    for path in sorted(root.rglob("*.py")):
        for module, name in _sdk_imports(path):
            if any(part.startswith("_") for part in [*module.split("."), name]):
                private.append(f"{path.name}: {module} {name}")
    assert private == [], "the simulator imports only public SDK names"


def test_the_private_import_check_sees_a_private_import(tmp_path: pathlib.Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from coreagent_sdk._attach._wire import encode_sse\n"
        "from coreagent_sdk import _display\n"
        "if True:\n    import coreagent_sdk._telemetry._tracing\n"
        "from coreagent_sdk.host import Turn\n"
    )
    assert sorted(_sdk_imports(sample)) == [
        ("coreagent_sdk", "_display"),
        ("coreagent_sdk._attach._wire", "encode_sse"),
        ("coreagent_sdk._telemetry._tracing", ""),
        ("coreagent_sdk.host", "Turn"),
    ]


EXPERIMENTS = {
    "INTERVAL",
    "Budget",
    "Case",
    "CaseDiff",
    "Experiment",
    "ExperimentFileError",
    "MaxDelegations",
    "MaxDepth",
    "NoisyModel",
    "Outcome",
    "Plan",
    "Results",
    "Scenario",
    "ScenarioError",
    "Scorer",
    "Trial",
    "TrialTree",
    "answer_contains",
    "arun",
    "no_error",
    "no_truncation",
    "routed",
    "run",
    "run_trial",
}


def test_the_experiments_package_exports_exactly_the_pinned_names() -> None:
    assert set(simulator.experiments.__all__) == EXPERIMENTS
    for name in EXPERIMENTS:
        assert hasattr(simulator.experiments, name), name


# coreagent_sdk.mcp: declaring MCP servers for a skill's tools (the client half).
MCP = {
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_MAX_RESTARTS",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_MAX_TOOLS",
    "DEFAULT_START_TIMEOUT",
    "MAX_TOOL_NAME",
    "MCP_FILE_NAME",
    "HttpServer",
    "McpServer",
    "McpServerStatus",
    "McpTool",
    "StdioServer",
    "namespaced",
    "parse_mcp_json",
    "read_mcp_json",
    "sanitize_prefix",
}


def test_the_mcp_package_exports_exactly_the_pinned_names() -> None:
    import coreagent_sdk.mcp

    assert set(coreagent_sdk.mcp.__all__) >= MCP  # the serving half adds its own names
    for name in coreagent_sdk.mcp.__all__:
        assert hasattr(coreagent_sdk.mcp, name), name
