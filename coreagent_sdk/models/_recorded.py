"""Record a model's exchanges once, replay them offline: `RecordingModel`, `ReplayModel`.

    model = RecordingModel(OpenAIChatModel(...), "exchanges.json")  # once, online
    model = ReplayModel("exchanges.json")                             # every run after

A recording is a JSON file of exchanges: each request (the messages and the
tools offered) and the reply the model gave. Secrets never reach it: the
whole file goes through the SDK's one scrubbing chokepoint (every token the
SDK knows, the API keys of the environment and any `secrets=` given) before
it is written. A replayed request is matched to a recorded one exactly (but for a peer's
session id and duration, recorded as ``*``: they differ on every run); a
request the recording does not hold fails with the first place it differs
from the next recorded one, so a changed persona, prompt or tool shows as
what it is rather than as a wrong answer.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._scrub import register, scrub
from ._protocol import Message, Model, ModelError, ModelReply, ToolCall, ToolSpec, Usage

__all__ = ["RecordingModel", "ReplayModel"]

FORMAT_VERSION = 1
# The environment's API keys are scrubbed from every recording, whether or not the
# model's adapter registered them itself.
_KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def _call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}


_VOLATILE = ("session_id", "duration_ms")  # a peer's answer's fields that differ every run


def _steady(message: Message) -> str:
    """A tool result's text with what differs on every run (a peer's session, its timing) as *."""
    if message.role != "tool" or message.tool_name != "call_peer":
        return message.text
    try:
        data = json.loads(message.text)
    except ValueError:
        return message.text
    if not isinstance(data, dict):
        return message.text
    return json.dumps({k: "*" if k in _VOLATILE else v for k, v in data.items()})


def _message(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "text": _steady(message)}
    if message.tool_calls:
        data["tool_calls"] = [_call(c) for c in message.tool_calls]
    if message.role == "tool":
        data.update(tool_call_id=message.tool_call_id, tool_name=message.tool_name)
        data["is_error"] = message.is_error
    return data


def _request(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
    request = {
        "messages": [_message(m) for m in messages],
        "tools": [
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in tools
        ],
    }
    # Scrubbed as the file is: a live request compares equal to its recorded self.
    loaded: dict[str, Any] = json.loads(scrub(json.dumps(request, default=str)))
    return loaded


def _reply_dict(reply: ModelReply) -> dict[str, Any]:
    return {
        "text": reply.text,
        "tool_calls": [_call(c) for c in reply.tool_calls],
        "usage": {
            "input_tokens": reply.usage.input_tokens,
            "output_tokens": reply.usage.output_tokens,
        },
        "model": reply.model,
        "stop_reason": reply.stop_reason,
    }


def _reply(data: Mapping[str, Any]) -> ModelReply:
    usage = data.get("usage") or {}
    return ModelReply(
        text=str(data.get("text", "")),
        tool_calls=[
            ToolCall(str(c["id"]), str(c["name"]), dict(c.get("arguments") or {}))
            for c in data.get("tool_calls") or ()
        ],
        usage=Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))),
        model=str(data.get("model", "")),
        stop_reason=str(data.get("stop_reason", "")),
    )


def _difference(recorded: Any, live: Any, path: str = "request") -> str | None:
    """The first place `live` differs from `recorded`, in words; None when they are equal."""
    if isinstance(recorded, dict) and isinstance(live, dict):
        for key in list(recorded) + [k for k in live if k not in recorded]:
            if key not in live:
                return f"{path}.{key} was recorded but is missing now"
            if key not in recorded:
                return f"{path}.{key} is new (not in the recording)"
            found = _difference(recorded[key], live[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(live, list):
        for i, (a, b) in enumerate(zip(recorded, live, strict=False)):
            found = _difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(recorded) != len(live):
            return f"{path} had {len(recorded)} entries when recorded, {len(live)} now"
        return None
    if recorded != live:
        return f"{path} was {_short(recorded)} when recorded, {_short(live)} now"
    return None


def _short(value: Any) -> str:
    shown = json.dumps(value, default=str)
    return shown if len(shown) <= 120 else shown[:117] + "..."


class RecordingModel:
    """A `Model` that answers with `model` and writes every exchange to `path` (scrubbed JSON).

    The file is rewritten after each exchange (to a temporary file, then
    renamed), so a run that stops half way leaves a readable recording.

    Args:
        model: The model to record.
        path: The JSON file to write.
        secrets: More values to scrub (the SDK's registered tokens and the
            environment's ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` always are).

    Attributes:
        model: The recorded model.
        path: The file it writes.
        exchanges: The exchanges recorded so far, as written.
    """

    def __init__(self, model: Model, path: str | os.PathLike[str], *, secrets: Iterable[str] = ()):
        if not callable(getattr(model, "complete", None)):
            raise TypeError(f"RecordingModel: {model!r} is not a model (no complete())")
        self.model = model
        self.path = Path(path)
        self.exchanges: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        for secret in secrets:
            register(secret)
        for name in _KEY_VARIABLES:
            register(os.environ.get(name))

    def __repr__(self) -> str:
        return f"RecordingModel({self.model!r}, {str(self.path)!r})"

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """The wrapped model's reply, recorded with its request."""
        reply = await self.model.complete(messages, tools)
        exchange = {"request": _request(messages, tools), "reply": _reply_dict(reply)}
        with self._lock:
            self.exchanges.append(json.loads(scrub(json.dumps(exchange, default=str))))
            text = scrub(
                json.dumps(
                    {"version": FORMAT_VERSION, "exchanges": self.exchanges},
                    indent=1,
                    ensure_ascii=False,
                )
            )
            partial = self.path.with_name(self.path.name + ".partial")
            partial.write_text(text + "\n", encoding="utf-8")
            partial.replace(self.path)
        return reply


class ReplayModel:
    """A `Model` answering from a recording: each request must be one the recording holds.

    Requests are matched exactly (after scrubbing), each recorded exchange
    used once, so concurrent turns replay in any order. A request the
    recording does not hold is a `ModelError` (kind ``config_error``) saying
    where it first differs from the next unused recorded request.

    Args:
        source: The recording's path, or its exchanges (as `RecordingModel.exchanges`).

    Attributes:
        exchanges: The recorded exchanges.
        used: How many of them were replayed.
    """

    def __init__(self, source: str | os.PathLike[str] | Sequence[Mapping[str, Any]]) -> None:
        if isinstance(source, (str, os.PathLike)):
            where = Path(source)
            try:
                data = json.loads(where.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"ReplayModel: no recording at {str(where)!r}; record one first with "
                    "RecordingModel(model, path)"
                ) from None
            if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
                raise ValueError(
                    f"ReplayModel: {str(where)!r} is not a recording of format "
                    f"{FORMAT_VERSION} (a JSON object with version and exchanges); "
                    "record it again with RecordingModel"
                )
            exchanges = data.get("exchanges") or []
        else:
            exchanges = list(source)
        self.exchanges: list[Mapping[str, Any]] = list(exchanges)
        self._unused = list(range(len(self.exchanges)))
        self.used = 0

    def __repr__(self) -> str:
        return f"ReplayModel({len(self.exchanges)} exchanges, {self.used} replayed)"

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """The recorded reply to this exact request."""
        live = _request(messages, tools)
        for position, index in enumerate(self._unused):
            if self.exchanges[index].get("request") == live:
                del self._unused[position]
                self.used += 1
                return _reply(self.exchanges[index].get("reply") or {})
        if not self._unused:
            raise ModelError(
                f"ReplayModel: all {len(self.exchanges)} recorded exchanges were replayed and "
                "the agent asked for another; record the run again with RecordingModel",
                kind="config_error",
                retryable=False,
            )
        # The likeliest counterpart: an unused exchange at the same point of a conversation.
        count = len(live["messages"])
        nearest = next(
            (i for i in self._unused if len(self.exchanges[i]["request"]["messages"]) == count),
            self._unused[0],
        )
        found = _difference(self.exchanges[nearest].get("request"), live)
        raise ModelError(
            f"ReplayModel: the request does not match the recording: {found} "
            f"(compared with recorded exchange {nearest}); record again with RecordingModel "
            "if the change is meant",
            kind="config_error",
            retryable=False,
        )
