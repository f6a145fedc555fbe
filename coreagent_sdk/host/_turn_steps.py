"""A `ModelAgent` turn's model rounds and tool calls, as `TurnStep`s for whoever records it.

The invariant: recording never changes what the turn does. Each wrapper
awaits exactly what it is given, returns its value or raises its exception
unchanged, and reports one step afterwards (to `Turn.on_step`, a no-op when
no one records the turn). What a step keeps is cut and scrubbed by
`TurnStep` itself, so nothing here can leak a secret into a record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Sequence
from typing import Any

from .._attach._inbox import inbox_ask
from .._records._steps import TurnStep, report
from ..models._protocol import Message, Model, ModelReply, ToolCall, ToolSpec

__all__ = ["configured_name", "model_name", "recorded_complete", "recorded_tool"]


def configured_name(model: object) -> str | None:
    """The model id a model was configured with (``gpt-4o-mini``), or None when it has none.

    Wrappers that hold another model in ``.model`` (a recording) are looked through.
    """
    for _ in range(8):  # a wrapper of a wrapper...; bounded, for a model that holds itself
        inner = getattr(model, "model", None)
        if isinstance(inner, str) and inner:
            return inner
        if inner is None or isinstance(inner, str):
            return None
        model = inner
    return None


def model_name(model: object) -> str:
    """A model's name for a person: its configured model id, else its class's name."""
    return configured_name(model) or type(_innermost(model)).__name__


def _innermost(model: object) -> object:
    for _ in range(8):
        inner = getattr(model, "model", None)
        if inner is None or isinstance(inner, str):
            break
        model = inner
    return model


def _reply_name(model: object) -> str | None:
    # A model with no configured id that names its replies itself (ScriptedModel(name=...)).
    named = getattr(_innermost(model), "name", None)
    return named if isinstance(named, str) and named else None


def _arguments(call: ToolCall) -> str:
    return json.dumps(dict(call.arguments), ensure_ascii=False, default=str)


def _sent(messages: Sequence[Message]) -> str:
    counts: dict[str, int] = {}
    for m in messages:
        counts[m.role] = counts.get(m.role, 0) + 1
    roles = ", ".join(f"{role} {n}" if n > 1 else role for role, n in counts.items())
    newest = messages[-1] if messages else None
    if newest is None:
        return "no messages"
    # A user message is the daemon's [Inbox] bundle: the record shows what it asks.
    text = inbox_ask(newest.text) if newest.role == "user" else newest.text
    said = text or ", ".join(c.name for c in newest.tool_calls)
    return f"{len(messages)} messages ({roles}); newest, {newest.role}: {said}"


def _received(reply: ModelReply) -> str:
    asks = "; ".join(f"{c.name} {_arguments(c)}" for c in reply.tool_calls)
    if asks:
        return f"{reply.text} → {asks}" if reply.text else f"→ {asks}"
    return reply.text


async def recorded_complete(
    turn: Any, model: Model, messages: Sequence[Message], tools: Sequence[ToolSpec]
) -> ModelReply:
    """``model.complete(messages, tools)``, reported as one ``chat`` step of `turn`."""
    if getattr(turn, "on_step", None) is None:
        return await model.complete(tuple(messages), tuple(tools))
    started = time.perf_counter()
    try:
        reply = await model.complete(tuple(messages), tuple(tools))
    except BaseException as exc:
        report(
            turn,
            TurnStep(
                "chat",
                # The name its replies would carry (a ScriptedModel's name), so a price table
                # that prices the model's answered rounds prices its failed one too.
                configured_name(model) or _reply_name(model) or model_name(model),
                duration_ms=(time.perf_counter() - started) * 1000,
                sent=_sent(messages),
                error=f"{type(exc).__name__}: {exc}",
            ),
        )
        raise
    took = (time.perf_counter() - started) * 1000
    if isinstance(reply, ModelReply):
        report(
            turn,
            TurnStep(
                "chat",
                # The name a price table knows: the configured id (a vendor answers with a
                # dated one), else what the model calls itself ("scripted").
                configured_name(model) or reply.model or model_name(model),
                duration_ms=took,
                sent=_sent(messages),
                received=_received(reply),
                input_tokens=reply.usage.input_tokens,
                output_tokens=reply.usage.output_tokens,
            ),
        )
    return reply


async def recorded_tool(
    turn: Any, call: ToolCall, running: Awaitable[dict[str, Any]], server: str = ""
) -> dict[str, Any]:
    """A local tool's result (``running``: the agent's own run of `call`), reported as a step.

    `server` names the MCP server whose tool it is (empty: a Python function).
    """
    started = time.perf_counter()
    result = await running
    if getattr(turn, "on_step", None) is not None:
        failed = "error" in result
        report(
            turn,
            TurnStep(
                "tool",
                call.name,
                duration_ms=(time.perf_counter() - started) * 1000,
                sent=_arguments(call),
                received="" if failed else json.dumps(result, ensure_ascii=False, default=str),
                error=str(result["error"]) if failed else None,
                server=server,
            ),
        )
    return result
