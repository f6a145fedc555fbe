"""Wire types against the daemon's own conformance fixtures."""

from __future__ import annotations

from typing import Any

import pytest

from coreagent_sdk._attach import _wire as wire
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


# --- hostile JSON (hypothesis): every type decodes or fails typed ------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)
_WIRE_TYPES = [
    getattr(wire, name)
    for name in wire.__all__
    if isinstance(getattr(wire, name), type) and hasattr(getattr(wire, name), "from_dict")
]


def _keys_of(cls: type) -> list[str]:
    """The JSON keys a type reads, spelled as the daemon spells them, from a full example."""
    import attrs

    names = [f.name for f in attrs.fields(cls)]
    renamed = {"session_id": "sessionID", "function_call": "functionCall"}
    names = [renamed.get(n, n) for n in names]
    go = {n.lower(): n for n in wire._TAGGED_TO_GO.values()}
    return names + [go.get(n.replace("_", ""), n) for n in names]


@st.composite
def _shaped(draw: Any, cls: type) -> Any:
    """Mostly objects with the type's own keys holding arbitrary JSON; sometimes anything."""
    if draw(st.integers(0, 9)) == 0:
        return draw(_JSON)
    keys = [*_keys_of(cls), "Content", "parts", "event", "text", "peers", "sessions"]
    chosen = draw(st.lists(st.sampled_from(keys), max_size=8, unique=True))
    return {k: draw(_JSON) for k in chosen}


@pytest.mark.slow  # a soak: 60 generated documents for each wire type
@pytest.mark.parametrize("cls", _WIRE_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_arbitrary_json_decodes_to_a_value_or_fails_as_a_protocol_error(
    cls: type, data: Any
) -> None:
    payload = data.draw(_shaped(cls))
    try:
        value = cls.from_dict(payload)
    except ProtocolError:
        return
    assert isinstance(value, cls)
    value.to_dict()  # what decoded re-encodes
    repr(value)


@settings(max_examples=60, deadline=None)
@given(event=st.sampled_from(sorted(wire._FRAME_TYPES)), payload=_JSON)
def test_an_arbitrary_frame_decodes_or_is_skipped(event: str, payload: Any) -> None:
    import json as _json

    frame = wire.decode_frame(event, _json.dumps(payload))
    if frame is not None and isinstance(frame, wire.AgentFrame):
        assert isinstance(frame.event.text, str) and isinstance(frame.event.has_function, bool)


def test_a_deeply_nested_frame_is_skipped_not_a_recursion_error() -> None:
    assert wire.decode_frame("agent", "[" * 100_000 + "]" * 100_000) is None


def test_numbers_out_of_range_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError, match="tokens_in"):
        wire.TurnComplete.from_dict({"tokens_in": float("inf")})
    with pytest.raises(ProtocolError, match="cost_usd_total"):
        wire.UsageUpdate.from_dict({"cost_usd_total": float("nan")})


def test_a_null_turn_error_message_reads_as_empty_and_a_null_session_id_is_refused() -> None:
    assert wire.TurnError.from_dict({"kind": "unknown", "message": None}).message == ""
    with pytest.raises(ProtocolError, match="sessionID"):
        wire.SessionCreated.from_dict({"app": "a", "sessionID": None})


@pytest.mark.parametrize(
    ("app", "sid"),
    [
        ("../../../admin", "x"),
        ("a", "x?steal=1#"),
        ("a", ".."),
        ("a/b", "x"),
        ("a", "%2e%2e"),
        ("", "x"),
    ],
)
def test_server_supplied_ids_must_be_plain_path_segments(app: str, sid: str) -> None:
    with pytest.raises(ProtocolError, match="path segment"):
        wire.SessionCreated.from_dict({"app": app, "sessionID": sid})
    with pytest.raises(ProtocolError, match="path segment"):
        _ = wire.SessionCreated(app=app, user="", session_id=sid).path
