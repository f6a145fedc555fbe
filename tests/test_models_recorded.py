"""Recording a model's exchanges once and replaying them offline, keys scrubbed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from coreagent_sdk.host import ModelAgent
from coreagent_sdk.models import (
    Message,
    ModelError,
    ModelReply,
    RecordingModel,
    ReplayModel,
    ScriptedModel,
    ToolSpec,
    Usage,
    when,
)

from .test_model_agent import hosted, run_turn


def router() -> ScriptedModel:
    return ScriptedModel(when("disk").ask("storage", "disks? {prompt}").answer("said: {results}"))


async def test_a_recorded_turn_replays_offline_to_the_same_answer(tmp_path: Path) -> None:
    path = tmp_path / "router.json"
    live = router()
    host, _ = hosted(ModelAgent(RecordingModel(live, path), persona="Route."), "storage")
    recorded = await run_turn(host, "disk full?")
    await host.aclose()
    assert live.requests == 2 and len(json.loads(path.read_text())["exchanges"]) == 2

    replay = ReplayModel(path)
    host, peers = hosted(ModelAgent(replay, persona="Route."), "storage")
    replayed = await run_turn(host, "disk full?")
    await host.aclose()

    assert replayed.answer == recorded.answer == "said: storage: DISKS? DISK FULL?"
    assert replay.used == 2 and peers["storage"].turns == 1  # the tools still run
    assert replayed.complete is not None and recorded.complete is not None
    assert replayed.complete.tokens_in == recorded.complete.tokens_in


async def test_a_changed_persona_fails_the_replay_saying_what_differs(tmp_path: Path) -> None:
    path = tmp_path / "router.json"
    host, _ = hosted(ModelAgent(RecordingModel(router(), path), persona="Route."), "storage")
    await run_turn(host, "disk full?")
    await host.aclose()

    host, peers = hosted(ModelAgent(ReplayModel(path), persona="Route well."), "storage")
    outcome = await run_turn(host, "disk full?")
    await host.aclose()

    assert outcome.error is not None and outcome.error.kind == "config_error"
    assert (
        'request.messages[0].text was "Route." when recorded, "Route well." now'
        in outcome.error.message
    )
    assert peers["storage"].turns == 0


async def test_a_changed_tool_and_a_longer_conversation_are_named() -> None:
    messages = [Message.user("hi")]
    replay = ReplayModel(
        [
            {
                "request": {
                    "messages": [{"role": "user", "text": "hi"}],
                    "tools": [{"name": "a", "description": "", "parameters": {}}],
                },
                "reply": {"text": "hello"},
            }
        ]
    )
    with pytest.raises(ModelError, match=r"request.tools\[0\].name was \"a\" when recorded, \"b\""):
        await replay.complete(messages, [ToolSpec("b", "", {})])
    with pytest.raises(ModelError, match=r"request.messages had 1 entries when recorded, 2 now"):
        await replay.complete([*messages, Message.user("more")], [ToolSpec("a", "", {})])
    reply = await replay.complete(messages, [ToolSpec("a", "", {})])
    assert reply.text == "hello"
    with pytest.raises(ModelError, match="all 1 recorded exchanges were replayed"):
        await replay.complete(messages, [ToolSpec("a", "", {})])


class Leaky:
    """A model that repeats what it read (a key a user pasted into a prompt, say)."""

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        return ModelReply(text=f"you said {messages[-1].text}", usage=Usage(3, 4), model="leaky")


async def test_api_keys_never_reach_the_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_key = "sk-env-" + "k3y" * 8
    given = "sk-given-" + "9z" * 10
    monkeypatch.setenv("OPENAI_API_KEY", env_key)
    path = tmp_path / "leaky.json"
    model = RecordingModel(Leaky(), path, secrets=[given])

    reply = await model.complete([Message.user(f"keys {env_key} and {given}")], [])

    assert env_key in reply.text  # the live reply is the model's own
    text = path.read_text()
    assert env_key not in text and given not in text
    assert "[redacted]" in text
    assert env_key not in repr(model.exchanges)
    replayed = await ReplayModel(path).complete([Message.user(f"keys {env_key} and {given}")], [])
    assert replayed.text == "you said keys [redacted] and [redacted]"
    assert replayed.usage == Usage(3, 4) and replayed.model == "leaky"


def test_a_missing_or_foreign_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"record one first with RecordingModel"):
        ReplayModel(tmp_path / "none.json")
    other = tmp_path / "other.json"
    other.write_text("[]")
    with pytest.raises(ValueError, match="is not a recording of format 1"):
        ReplayModel(other)
