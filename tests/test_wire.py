"""Wire types against the daemon's own conformance fixtures."""

from __future__ import annotations

from typing import Any

import pytest

from coreagent_sdk import _wire as wire
from coreagent_sdk.errors import ProtocolError

from .conftest import CONFORMANCE, load_fixture

FIXTURE_TYPES: dict[str, Any] = {
    "capabilities-v1.4.0.json": wire.Capabilities,
    "rest-create-session-v1.json": wire.SessionCreated,
    "rest-inject-v1.json": wire.InjectResult,
    "rest-inject-v2.json": wire.InjectResult,
    "rest-perms-respond-v1.json": wire.PermsResponse,
    "rest-session-acl-v1.json": wire.ACL,
    "rest-session-title-v1.json": wire.SessionTitle,
    "rest-sessions-list-v1.json": wire.SessionList,
    "rest-sessions-list-v2.json": wire.SessionList,
    "rest-subagent-events-v1.json": wire.SubagentEvents,
    "rest-wake-v1.json": wire.WakeResult,
    "rest-whoami-v1.json": wire.WhoAmI,
    "status-update-with-capabilities-v1.4.0.json": wire.StatusUpdate,
    "wake-v1.7.0.json": wire.Wake,
}


def key_tree(value: Any) -> Any:
    """The JSON's keys, recursively (values dropped): what must survive a round trip."""
    if isinstance(value, dict):
        return {k: key_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [key_tree(v) for v in value]
    return None


def test_every_conformance_fixture_has_a_type() -> None:
    on_disk = {p.name for p in CONFORMANCE.glob("*.json")}
    assert on_disk == set(FIXTURE_TYPES)


@pytest.mark.parametrize("name", sorted(FIXTURE_TYPES))
def test_a_fixture_decodes_and_re_encodes_to_the_same_json_keys(name: str) -> None:
    raw = load_fixture(name)
    value = FIXTURE_TYPES[name].from_dict(raw)
    assert key_tree(value.to_dict()) == key_tree(raw)


@pytest.mark.parametrize("name", sorted(FIXTURE_TYPES))
def test_a_fixture_re_encodes_to_the_same_values(name: str) -> None:
    raw = load_fixture(name)
    assert FIXTURE_TYPES[name].from_dict(raw).to_dict() == raw


def test_the_created_session_reads_the_capitalised_session_id() -> None:
    created = wire.SessionCreated.from_dict(load_fixture("rest-create-session-v1.json"))
    assert created.session_id == "s-1a2b3c"
    assert created.path == "/sessions/core-agent/s-1a2b3c"


def test_optional_fields_are_omitted_rather_than_sent_empty() -> None:
    v1 = wire.SessionList.from_dict(load_fixture("rest-sessions-list-v1.json"))
    assert all(s.title is None for s in v1.sessions)
    assert "title" not in v1.to_dict()["sessions"][0]
    inject = wire.InjectResult.from_dict(load_fixture("rest-inject-v1.json"))
    assert "prompt_id" not in inject.to_dict()


def test_unknown_fields_are_ignored() -> None:
    raw = {**load_fixture("rest-whoami-v1.json"), "brand_new_field": {"x": 1}}
    assert wire.WhoAmI.from_dict(raw).identity == "release-bot@example.com"


def test_a_missing_required_field_names_the_field() -> None:
    with pytest.raises(ProtocolError, match="'sessionID'"):
        wire.SessionCreated.from_dict({"app": "core-agent"})


def test_the_adk_event_reads_the_go_spelling() -> None:
    frame = load_fixture("rest-subagent-events-v1.json")["events"][0]
    event = wire.AgentFrame.from_dict(frame).event
    assert event.author == "cluster"
    assert event.id == "e-7f3a"
    assert event.invocation_id == "inv-1"
    assert event.text == "listing nodes in cluster prod-1"
    assert not event.has_function


def test_the_adk_event_reads_the_newer_lower_camel_spelling() -> None:
    event = wire.AgentEvent.from_dict(
        {
            "Content": {
                "role": "model",
                "parts": [{"text": "hi"}, {"functionCall": {"name": "k"}}],
            },
            "Partial": False,
            "TurnComplete": True,
            "id": "e-1",
            "author": "prod-1",
            "invocationId": "inv-9",
            "timestamp": "2026-08-19T14:32:05Z",
        }
    )
    assert (event.id, event.author, event.invocation_id) == ("e-1", "prod-1", "inv-9")
    assert event.turn_complete and event.has_function and event.text == "hi"


def test_the_simulator_spelling_is_all_capitalised() -> None:
    out = wire.AgentEvent(author="prod-1", id="e-1").to_dict()
    assert {"Author", "ID", "InvocationID", "Timestamp", "Content", "Partial"} <= set(out)
    assert not {"author", "id"} & set(out)


def test_an_unknown_turn_error_kind_is_read_as_unknown() -> None:
    frame = wire.decode_frame("turn-error", '{"kind":"solar_flare","message":"m","retryable":true}')
    assert isinstance(frame, wire.TurnError)
    assert frame.kind == "unknown" and frame.retryable


@pytest.mark.parametrize(
    ("event", "data"),
    [
        ("brand-new-event", '{"x": 1}'),
        ("agent", "{not json"),
        ("turn-complete", "[1, 2]"),
        ("capabilities", '{"no_protocol_version": true}'),
    ],
)
def test_frames_a_consumer_must_skip_decode_to_none(event: str, data: str) -> None:
    assert wire.decode_frame(event, data) is None


def test_a_frame_without_an_event_line_is_a_legacy_agent_frame() -> None:
    data = '{"seq": 3, "event": {"Author": "a", "Content": {"role": "model", "parts": []}}}'
    frame = wire.decode_frame("message", data)
    assert isinstance(frame, wire.AgentFrame) and frame.seq == 3


def test_sse_encoding_is_exactly_event_then_one_line_of_data() -> None:
    assert wire.encode_sse("wake", {"at": "2026-08-19T14:32:05.117Z"}) == (
        b'event: wake\ndata: {"at":"2026-08-19T14:32:05.117Z"}\n\n'
    )


def test_sse_encoding_keeps_non_ascii_as_utf8() -> None:
    assert "é".encode() in wire.encode_sse("agent", {"t": "é"})


def test_both_spellings_of_an_adk_event_decode_to_the_same_value() -> None:
    go = load_fixture("rest-subagent-events-v1.json")["events"][0]["event"]
    renamed = {
        "ID": "id",
        "Author": "author",
        "InvocationID": "invocationId",
        "Timestamp": "timestamp",
        "Actions": "actions",
        "Branch": "branch",
    }
    tagged = {renamed.get(k, k): v for k, v in go.items()}
    assert wire.AgentEvent.from_dict(tagged) == wire.AgentEvent.from_dict(go)
