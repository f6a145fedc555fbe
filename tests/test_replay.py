"""Replaying recorded sessions as simulated peers: same result, same frames, new ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coreagent_sdk import (
    AttachClient,
    CallPeerResult,
    Recording,
    RecordingEntry,
    SessionRecorder,
    TurnComplete,
)
from coreagent_sdk.errors import PeerTurnError
from simulator import Fleet, Turn, behaviors
from simulator import _replay as replay_module

from .clocks import SteppedTime
from .conftest import CONFORMANCE, load_fixture


def shape(recording: Recording) -> list[Any]:
    """The frame sequence up to the turn's end, without what differs by session (ids, times)."""
    out: list[Any] = []
    for entry in recording.frames():
        if entry.event == "agent":
            event = entry.data["event"]
            out.append(("agent", event["Author"], event["Partial"], event["Content"]))
        else:
            out.append((entry.event,))
        if entry.event == "agent" and not entry.data["event"]["Partial"]:
            parts = entry.data["event"]["Content"]["parts"]
            final = any("text" in p for p in parts) and not any(
                "functionCall" in p or "functionResponse" in p for p in parts
            )
            if final and entry.data["event"]["Author"] != "user":
                break
        if entry.event in ("turn-complete", "turn-error"):
            break
    return out


async def record_served(behavior: Any, **call: Any) -> tuple[CallPeerResult, Recording]:
    fleet = Fleet()
    fleet.add_peer("prod-1", behavior)
    recorder = SessionRecorder()
    served = await fleet.serve()
    try:
        async with served.call_peer(transport=recorder.wrap(None), **call) as tool:
            result = await tool.acall(peer="prod-1", prompt="How is prod-1?")
    finally:
        await served.aclose()
    await fleet.aclose()
    (recording,) = recorder.recordings
    return result, recording


@pytest.mark.parametrize(
    "behavior",
    [
        behaviors.narrate(["listing nodes", "reading events"], "3 nodes ready"),
        behaviors.stream(5000, 700, char="é"),
    ],
    ids=["narrated", "truncated"],
)
async def test_a_session_recorded_from_a_served_peer_replays_in_process_the_same(
    behavior: Any, tmp_path: Path
) -> None:
    original, recording = await record_served(behavior, timeout=10, max_response_bytes=2001)
    path = recording.save(tmp_path / "prod-1.jsonl")

    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.replay(path))
    again = SessionRecorder()
    async with fleet.call_peer(timeout=10, max_response_bytes=2001) as plain:
        result = await plain.acall(peer="prod-1", prompt="How is prod-1?")
    async with fleet.call_peer(
        timeout=10, max_response_bytes=2001, transport=again.wrap(fleet.transport)
    ) as tool:
        await tool.acall(peer="prod-1", prompt="How is prod-1?")

    assert (result.response, result.truncated) == (original.response, original.truncated)
    assert result.session_id != original.session_id
    (replayed,) = again.recordings
    assert shape(replayed) == shape(recording)
    assert len(shape(recording)) >= 6


async def test_the_daemon_fixture_of_sub_agent_events_replays_as_a_peer() -> None:
    fixture = load_fixture("rest-subagent-events-v1.json")
    fleet = Fleet()
    fleet.add_peer("cluster", behaviors.replay(CONFORMANCE / "rest-subagent-events-v1.json"))
    recorder = SessionRecorder()
    async with fleet.call_peer(timeout=5, transport=recorder.wrap(fleet.transport)) as tool:
        result = await tool.acall(peer="cluster", prompt="list the nodes")
    assert result.response == "listing nodes in cluster prod-1"
    (recording,) = recorder.recordings
    replayed = [e.data["event"] for e in recording.frames() if e.event == "agent"][-1]
    original = fixture["events"][0]["event"]
    # The daemon's own event, field for field, but in the new turn's invocation.
    assert {k: v for k, v in replayed.items() if k != "InvocationID"} == {
        k: v for k, v in original.items() if k != "InvocationID"
    }
    assert replayed["InvocationID"] != original["InvocationID"]
    assert replayed["InvocationID"].startswith("inv-")


def recording_of(*entries: RecordingEntry, session_id: str = "s-old") -> Recording:
    return Recording(host="prod-1.sim", session_id=session_id, entries=entries)


def agent(text: str, t: float, author: str = "prod-1", inv: str = "inv-old") -> RecordingEntry:
    return RecordingEntry(
        t=t,
        kind="frame",
        event="agent",
        data={
            "seq": 1,
            "event": {
                "Content": {"role": "model", "parts": [{"text": text}]},
                "Author": author,
                "ID": "e-1",
                "InvocationID": inv,
                "Partial": False,
            },
        },
    )


def inject(t: float, message: str = "go") -> RecordingEntry:
    return RecordingEntry(t=t, kind="inject", message=message, data={})


async def test_a_replay_substitutes_the_session_id_where_ids_are_and_leaves_text_alone() -> None:
    """Issue 16 item 2(f): a recording of session `default` kept "the default namespace"."""
    said = agent("the default namespace holds session default", 0.01)
    said.data["event"]["Content"]["parts"].append(
        {"functionResponse": {"name": "look", "response": {"session": "default", "ns": "default"}}}
    )
    rec = recording_of(inject(0.0), said, session_id="default")
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.replay(rec))
    recorder = SessionRecorder()
    async with fleet.call_peer(timeout=5, transport=recorder.wrap(fleet.transport)) as tool:
        result = await tool.acall(peer="prod-1", prompt="go")
    assert result.response == "the default namespace holds session default"
    (replayed,) = [e for e in recorder.recordings[0].frames() if e.event == "agent"][-1:]
    response = replayed.data["event"]["Content"]["parts"][1]["functionResponse"]["response"]
    assert response == {"session": result.session_id, "ns": "default"}
    # The recording itself is unchanged, so the next replay starts from it again.
    assert said.data["event"]["Content"]["parts"][1]["functionResponse"]["response"] == {
        "session": "default",
        "ns": "default",
    }


async def test_replay_keeps_the_recorded_pacing_scaled_by_speed_or_none_at_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The replay's clock moves only by the turn's own sleeps, which are counted, not slept:
    # the gaps it asks for are exact however slowly a loaded machine runs the rest.
    clock = SteppedTime()
    gaps: dict[str, list[float]] = {}  # session id -> the sleeps its turn asked for

    async def sleep(turn: Turn, seconds: float) -> None:
        gaps.setdefault(turn.session_id, []).append(seconds)
        clock.step(seconds)

    monkeypatch.setattr(replay_module, "time", clock)
    monkeypatch.setattr(Turn, "sleep", sleep)
    rec = recording_of(inject(0.0), agent("first", 2.0), agent("done", 3.0))
    fleet = Fleet()
    fleet.add_peer("paced", behaviors.replay(rec, speed=10.0))  # 0.2 s: a tenth of 2 s
    fleet.add_peer("fast", behaviors.replay(rec))
    async with fleet.call_peer(timeout=5) as tool:
        paced = await tool.acall(peer="paced", prompt="go")
        fast = await tool.acall(peer="fast", prompt="go")
    await fleet.aclose()
    assert paced.response == fast.response == "first"  # "first" is final text: the turn ends
    assert gaps[paced.session_id][0] == pytest.approx(0.2)  # the recorded 2 s at 10x speed
    assert fast.session_id not in gaps  # speed=None: no pacing at all


async def test_each_turn_of_a_session_replays_the_next_recorded_turn_then_says_it_ran_out() -> None:
    rec = recording_of(
        inject(0.0, "one"),
        agent("one", 0.0, author="user"),
        agent("answer one", 0.01),
        RecordingEntry(t=0.02, kind="frame", event="turn-complete", data={}),
        agent("after the end", 0.03),
        inject(0.1, "two"),
        RecordingEntry(
            t=0.11,
            kind="frame",
            event="turn-error",
            data={"kind": "rate_limited", "message": "slow down", "retryable": True},
        ),
    )
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.replay(rec))
    async with AttachClient(fleet.url("prod-1"), transport=fleet.transport) as client:
        session = await client.new_session()
        seen: list[str] = []
        async with client.events(session) as frames:
            for prompt in ("a", "b", "c"):
                await client.inject(session, prompt)
                async for frame in frames:
                    name = type(frame).__name__
                    if name == "AgentFrame" and frame.event.author != "user":  # type: ignore[union-attr]
                        seen.append(frame.event.text)  # type: ignore[union-attr]
                    if isinstance(frame, TurnComplete):
                        break
                    if name == "TurnError":
                        seen.append(f"error {frame.kind}: {frame.message}")  # type: ignore[union-attr]
                        break
    assert seen == [
        "answer one",
        "error rate_limited: slow down",
        "error unknown: replay: the recording has 2 turn(s) and this session asked for turn 3; "
        "record a longer session or open a new one",
    ]


async def test_a_replayed_turn_error_reaches_call_peer_as_the_peer_turn_error() -> None:
    rec = recording_of(
        inject(0.0),
        RecordingEntry(
            t=0.0, kind="frame", event="turn-error", data={"kind": "cost_ceiling", "message": "$$"}
        ),
    )
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.replay(rec))
    async with fleet.call_peer(timeout=5) as tool:
        with pytest.raises(PeerTurnError) as caught:
            await tool.acall(peer="prod-1", prompt="go")
    assert caught.value.kind == "cost_ceiling"


def test_replay_checks_speed_and_the_file_when_it_is_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="speed must be a positive number"):
        behaviors.replay(recording_of(), speed=0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "coreagent-sdk/session-recording", "version": 9}\n')
    with pytest.raises(ValueError, match="version 9 is not supported"):
        behaviors.replay(bad)


async def test_frames_a_client_could_not_read_are_skipped_and_the_rest_replayed() -> None:
    rec = recording_of(
        inject(0.0),
        RecordingEntry(t=0.0, kind="frame", event="agent", data="{not json"),
        RecordingEntry(t=0.0, kind="frame", event="agent", data={"seq": 1}),
        RecordingEntry(t=0.0, kind="frame", event="agent", data={"event": "a string"}),
        RecordingEntry(t=0.0, kind="frame", event="agent", data={"event": {"Content": [1]}}),
        RecordingEntry(t=0.0, kind="frame", event="surprise", data={"x": 1}),
        agent("still here", 0.0),
    )
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.replay(rec))
    async with fleet.call_peer(timeout=5) as tool:
        result = await tool.acall(peer="prod-1", prompt="go")
    assert result.response == "still here"
