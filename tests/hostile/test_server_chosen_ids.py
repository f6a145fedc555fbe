"""Issue 16 item 1: an id a server chose never carries the caller's token anywhere.

A peer answers `POST /sessions` with the caller's own bearer token as its
`sessionID` (a token of letters, digits and `-` is a valid path segment). The
SDK refuses such an id with a typed error before it is kept: it never reaches
a result, `to_dict()`, an event, a span attribute or a recording's header.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from coreagent_sdk import AttachClient, CallPeer, CallPeerEvent, SessionRecorder
from coreagent_sdk.errors import PeerRequestError, ProtocolError

from ..canary import CANARY, exception_texts, leaked
from .servers import daemon, one_peer, turn

ENV = {"FLEET_TOKEN": CANARY}
HOSTILE_SESSION = {"app": "core-agent", "user": "u", "sessionID": CANARY, "url": ""}


async def call_with_recording(
    app: Any, events: list[CallPeerEvent]
) -> tuple[BaseException | Any, SessionRecorder]:
    directory, transport = one_peer(app)
    recorder = SessionRecorder()
    tool = CallPeer(
        directory,
        transport=recorder.wrap(transport),
        token_env="FLEET_TOKEN",
        environ=ENV,
        on_event=events.append,
        timeout=5,
    )
    try:
        return await tool.acall(peer="evil", prompt="go"), recorder
    except Exception as exc:  # the outcome is what the test looks at
        return exc, recorder
    finally:
        await tool.aclose()


async def test_a_session_id_equal_to_the_token_is_refused_with_a_typed_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    events: list[CallPeerEvent] = []
    outcome, recorder = await call_with_recording(
        daemon(session=HOSTILE_SESSION, stream=turn("fine")), events
    )

    assert isinstance(outcome, PeerRequestError), outcome
    assert "POST /sessions" in str(outcome) and "credential" in str(outcome)
    assert [where for where, text in exception_texts(outcome) if leaked(text)] == []
    # The session was never taken as opened: no event names it.
    assert [e.kind for e in events] == ["started", "failed"]
    assert not [e for e in events if leaked(repr(e))]
    assert not [r for r in caplog.records if leaked(logging.Formatter().format(r))]
    # The recorder saw the raw answer; what it keeps went through the scrubber.
    (recording,) = recorder.recordings
    assert not leaked(recording.dumps())
    assert recording.session_id == "[redacted]"


async def test_a_session_id_that_contains_the_token_is_refused_too() -> None:
    session = dict(HOSTILE_SESSION, sessionID=f"s-{CANARY}-1")
    outcome, _ = await call_with_recording(daemon(session=session, stream=turn("x")), [])
    assert isinstance(outcome, PeerRequestError) and "credential" in str(outcome)


async def test_an_app_name_carrying_the_token_is_refused_before_it_goes_into_a_url() -> None:
    session = dict(HOSTILE_SESSION, sessionID="s-1", app=CANARY)
    seen: list[tuple[str, str, dict[str, str]]] = []
    outcome, _ = await call_with_recording(daemon(session=session, seen=seen), [])
    assert isinstance(outcome, PeerRequestError) and "credential" in str(outcome)
    assert [path for _, path, _ in seen] == ["/sessions"]  # nothing more was sent


async def test_attach_client_refuses_the_token_as_a_session_id_and_names_the_fix() -> None:
    _, transport = one_peer(daemon(session=HOSTILE_SESSION))
    async with AttachClient("http://evil.test", transport=transport, token=CANARY) as client:
        with pytest.raises(ProtocolError, match=r"the session id .*credential") as info:
            await client.new_session()
    assert not leaked(str(info.value)) and "[redacted]" in str(info.value)


async def test_an_honest_session_id_still_reaches_the_result_and_its_events() -> None:
    events: list[CallPeerEvent] = []
    outcome, recorder = await call_with_recording(daemon(stream=turn("fine")), events)
    assert not isinstance(outcome, BaseException), outcome
    assert outcome.session_id == "s-1" and outcome.to_dict()["session_id"] == "s-1"
    assert [e.session_id for e in events if e.kind == "finished"] == ["s-1"]
    assert json.loads(recorder.recordings[0].dumps().splitlines()[0])["session_id"] == "s-1"


async def test_the_other_text_a_session_and_an_inject_answer_carry_is_kept_scrubbed() -> None:
    echo = daemon(
        session=dict(HOSTILE_SESSION, sessionID="s-1", user=CANARY, url=f"http://h/{CANARY}"),
        inject={"injected": CANARY, "session": CANARY, "woke": True, "prompt_id": CANARY},
    )
    async with AttachClient("http://evil.test", transport=one_peer(echo)[1], token=CANARY) as c:
        session = await c.new_session()
        injected = await c.inject(session, "hi")
    assert (session.user, session.url) == ("[redacted]", "http://h/[redacted]")
    assert (injected.injected, injected.session, injected.prompt_id) == ("[redacted]",) * 3
