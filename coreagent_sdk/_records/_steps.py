"""`TurnStep`: what happened inside one turn (a model round, a tool call, an error).

The invariant: a step holds no secret and is bounded, whoever builds it.
Every text field passes `scrub` and is cut to `MAX_STEP_TEXT` characters in
the value's own converters, so a model that echoes an API key, a tool that
returns its secret or a peer that answers with a token cannot put it in a
record, a tree, a table or a span; and a turn of a thousand tool calls keeps
a few hundred characters per call, not the calls' answers.

Steps reach a record through the turn: a `Turn` carries an ``on_step``
callable (None unless someone records the turn, as a simulated fleet does),
and `report` hands it each step. Nothing here knows the model protocol or
the host, so the core stays free of both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .._scrub import scrub

__all__ = ["MAX_STEP_TEXT", "STEP_KINDS", "TurnStep", "report", "step_text"]

MAX_STEP_TEXT = 300
"""Characters a step keeps of what was sent, what came back and an error (scrubbed first)."""

STEP_KINDS = ("chat", "tool", "error")
"""A model round, a tool call (a peer's or a Python function's), a turn error."""


def step_text(value: object) -> str:
    """`value` as a step keeps it: text, scrubbed, then cut to `MAX_STEP_TEXT` characters."""
    text = scrub(value if isinstance(value, str) else str(value))
    if len(text) > MAX_STEP_TEXT:
        return text[: MAX_STEP_TEXT - 1] + "…"
    return text


def _optional_text(value: object) -> str | None:
    return None if value is None else step_text(value)


def _kind(_instance: object, _attribute: object, value: str) -> None:
    if value not in STEP_KINDS:
        raise ValueError(f"TurnStep: kind must be one of {', '.join(STEP_KINDS)}, got {value!r}")


@attrs.frozen
class TurnStep:
    """One thing a turn did: a model round (``chat``), a tool call (``tool``) or an ``error``.

    Text fields are scrubbed and cut to `MAX_STEP_TEXT` characters when the
    value is made. ``started`` is set by the `CallLog` that records the step
    (seconds on its timer, as a `CallRecord`'s times).

    Attributes:
        kind: ``chat``, ``tool`` or ``error``.
        name: The model (chat), the tool (tool) or the error's kind (error).
        duration_ms: How long the round or the tool took, in milliseconds (fractions kept:
            a scripted model's round takes well under one).
        sent: What went in, in short: the messages a model was sent, a tool's arguments.
        received: What came back, in short: the model's reply and the tools it asked
            for, a tool's result.
        input_tokens: Tokens the model read in this round (chat), if it said.
        output_tokens: Tokens the model wrote in this round (chat), if it said.
        error: What failed: the model's error, the tool's, the turn's.
        peer: For a ``call_peer`` tool call: the peer asked.
        session_id: For a ``call_peer`` tool call: the peer's session (its call's).
        server: For an MCP tool call: the server whose tool it is (the name is
            ``<server>_<tool>``).
        started: Seconds since the recording log was made, when the step started.
    """

    kind: str = attrs.field(validator=_kind)
    name: str = attrs.field(converter=step_text)
    duration_ms: float = attrs.field(default=0.0, converter=float)
    sent: str = attrs.field(default="", converter=step_text)
    received: str = attrs.field(default="", converter=step_text)
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = attrs.field(default=None, converter=_optional_text)
    peer: str = attrs.field(default="", converter=step_text)
    session_id: str = attrs.field(default="", converter=step_text)
    started: float = 0.0
    server: str = attrs.field(default="", converter=step_text)


def report(turn: Any, step: TurnStep) -> None:
    """Hand `step` to whoever records `turn` (its ``on_step``); nothing when no one does."""
    sink: Callable[[TurnStep], None] | None = getattr(turn, "on_step", None)
    if sink is not None:
        sink(step)
