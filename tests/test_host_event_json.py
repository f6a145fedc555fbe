"""The host writes each agent event's JSON by a fast path: byte for byte `go_json(to_dict())`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coreagent_sdk._attach._wire import AgentEvent, Content, FunctionCall, Part
from coreagent_sdk.host._event_json import event_json
from coreagent_sdk.host._gowire import go_json

# Text that reaches every escape: HTML-unsafe characters, the JSON controls, quotes,
# backslashes, U+2028/9, astral characters and lone surrogates (a model's split pair).
_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from('<>&"\\\u2028\u2029\x00\x01\x1f\x7f\ud800\udfff\U0001f600é \n'),
        st.characters(),
    ),
    max_size=12,
)
_ODD = st.sampled_from([0, 1, None, 2.5, b"x", ["a"]])  # what a careless caller might set
_PART = st.builds(
    Part,
    text=st.one_of(st.none(), _TEXT),
    function_call=st.one_of(st.none(), st.just(FunctionCall("kubectl", {"get": "<x>"}))),
    thought=st.one_of(st.none(), st.booleans()),
)
_TEXT_PART = st.builds(Part, text=_TEXT)  # the shape a turn's own events have
_CONTENT = st.one_of(
    st.none(),
    st.builds(
        Content,
        role=st.one_of(_TEXT, _ODD),
        parts=st.one_of(st.lists(_TEXT_PART, max_size=3), st.lists(_PART, max_size=3)).map(tuple),
    ),
)
_DEFAULT: dict[str, Any] = AgentEvent().actions  # type: ignore[assignment]
_ACTIONS = st.one_of(
    st.just(None),
    st.builds(dict, st.just(_DEFAULT)),
    st.sampled_from(list(_DEFAULT)).flatmap(
        lambda key: st.one_of(_TEXT, _ODD, st.booleans()).map(lambda v: {**_DEFAULT, key: v})
    ),
)
_STRINGS = (
    "error_code",
    "error_message",
    "finish_reason",
    "id",
    "timestamp",
    "invocation_id",
    "branch",
    "author",
    "model_version",
)
# One field off the shape a turn's events have, of every kind the fast path must refuse
# (or must write as the encoder does): each draw changes zero to two of them.
_CHANGE = st.one_of(
    st.tuples(st.sampled_from(("partial", "turn_complete", "interrupted")), _ODD),
    st.tuples(st.sampled_from(_STRINGS), _ODD),
    st.tuples(st.just("actions"), _ACTIONS),
    st.tuples(st.just("avg_logprobs"), st.sampled_from([0.0, 1.5, True, -0])),
    st.tuples(
        st.sampled_from(
            ("usage_metadata", "citation_metadata", "custom_metadata", "logprobs_result")
        ),
        st.sampled_from([{"k": "<v>"}, 0, ""]),
    ),
    st.tuples(st.just("long_running_tool_ids"), st.sampled_from([(), ("t-1",)])),
    st.tuples(st.just("content"), _CONTENT),
    st.tuples(  # a text-shaped content but for one part: a thought, a call, no text
        st.just("content"),
        st.builds(Content, role=_TEXT, parts=st.lists(_PART, min_size=1, max_size=2).map(tuple)),
    ),
    st.tuples(  # the default actions but for one value
        st.just("actions"),
        st.sampled_from(list(_DEFAULT)).flatmap(
            lambda key: st.sampled_from([True, 0, 1, "", "x", None]).map(
                lambda v: {**_DEFAULT, key: v}
            )
        ),
    ),
)


@settings(max_examples=600, deadline=None)
@given(
    content=st.one_of(
        st.builds(Content, role=_TEXT, parts=st.lists(_TEXT_PART, max_size=3).map(tuple)),
        st.none(),
    ),
    flags=st.lists(st.booleans(), min_size=3, max_size=3),
    strings=st.lists(_TEXT, min_size=len(_STRINGS), max_size=len(_STRINGS)),
    changes=st.lists(_CHANGE, max_size=2),
)
def test_an_events_json_is_what_the_encoder_writes_of_its_dict_whatever_it_holds(
    content: Content | None, flags: list[bool], strings: list[str], changes: list[Any]
) -> None:
    fields: dict[str, Any] = dict(zip(_STRINGS, strings, strict=True))
    fields.update(partial=flags[0], turn_complete=flags[1], interrupted=flags[2])
    fields["content"] = content
    fields.update(dict(changes))
    event = AgentEvent(**fields)
    try:
        want = go_json(event.to_dict())
    except (TypeError, ValueError) as exc:  # not JSON (bytes): the same refusal, not a guess
        with pytest.raises(type(exc)):
            event_json(event)
        return
    assert event_json(event) == want


def test_a_turns_own_events_take_the_fast_path_and_read_back_as_they_were() -> None:
    """The shape the fast path writes is the one a turn's events have; each reads back equal."""
    from coreagent_sdk._attach._wire import decode_frame
    from coreagent_sdk.host import _event_json

    event = AgentEvent(
        content=Content(role="model", parts=(Part(text='say "<hi>" & go\u2028'),)),
        partial=True,
        id="e-1",
        timestamp="2026-12-02T03:00:00Z",
        invocation_id="inv-1",
        author="prod-1",
    )
    assert _event_json._fast(event) is not None
    text = event_json(event)
    assert "<" not in text and "&" not in text and "\u2028" not in text
    frame = decode_frame("agent", '{"seq":1,"event":' + text + "}")
    assert frame.event == event  # type: ignore[union-attr]


@pytest.mark.parametrize("key", [*AgentEvent().actions, "Extra"])  # type: ignore[union-attr]
@pytest.mark.parametrize("value", [True, False, 0, 1, "", "x", None, {}])
def test_actions_off_the_default_by_one_value_are_written_as_the_encoder_writes_them(
    key: str, value: Any
) -> None:
    event = AgentEvent(author="prod-1", actions={**_DEFAULT, key: value})
    assert event_json(event) == go_json(event.to_dict())


@pytest.mark.parametrize(
    "part",
    [
        Part(text="a", function_call=FunctionCall("kubectl", {})),
        Part(text="a", thought=True),
        Part(text="a", thought=False),
        Part(),
        Part(text=""),
        Part(text=1),  # type: ignore[arg-type]
    ],
)
def test_a_part_that_is_not_only_text_is_written_as_the_encoder_writes_it(part: Part) -> None:
    event = AgentEvent(content=Content(role="model", parts=(Part(text="first"), part)))
    assert event_json(event) == go_json(event.to_dict())


@settings(max_examples=300, deadline=None)
@given(text=_TEXT)
def test_html_unsafe_characters_are_escaped_as_gos_encoder_escapes_them(text: str) -> None:
    """`<`, `>`, `&`, U+2028 and U+2029 leave as \\u escapes and nothing else changes (the
    oracle: one table lookup per character, as the host wrote them before)."""
    import json

    table = str.maketrans(
        {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
    )
    plain = json.dumps(text + "<&>", ensure_ascii=False, separators=(",", ":"))
    assert go_json(text + "<&>") == plain.translate(table)
