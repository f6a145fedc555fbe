"""The model protocol: what a model-driven agent asks a model, and what it gets back.

One async method, `complete(messages, tools) -> ModelReply`, is all a model
has to offer. The values here are the loop's own vocabulary, independent of
any vendor: an adapter translates them to a vendor's wire format and back,
and a scripted model builds replies from them directly. Keeping the
vocabulary this small is what lets one agent run with a scripted model in a
test, a recorded one offline and a real one in production.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from .._attach._wire import TURN_ERROR_KINDS
from ..errors import CoreAgentError

__all__ = [
    "CUT_STOP_REASONS",
    "TOKENS_MAX",
    "ROLES",
    "Message",
    "Model",
    "ModelError",
    "ModelReply",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "token_count",
]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
"""The roles a `Message` may have, in the order a conversation introduces them."""
CUT_STOP_REASONS = frozenset({"length", "max_tokens"})
"""Stop reasons that say the model hit its output limit (Chat Completions', Messages')."""


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    # A copy, so a caller who keeps mutating its dict does not change a value
    # already sent (or recorded).
    return dict(value)


def _calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


@attrs.frozen
class ToolCall:
    """A model's request to run one tool.

    Attributes:
        id: The model's id for this call; the tool's result answers it by id.
        name: The tool's name, as the model was offered it.
        arguments: The arguments the model chose, decoded from its JSON.
        error: Why the call cannot run as the model wrote it (its arguments were not
            a JSON object); empty for a call that can. The loop answers such a call
            with this error instead of running the tool, so the model can try again.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, hash=False)
    error: str = ""


@attrs.frozen
class ToolSpec:
    """A tool as the model is offered it: a name, what it does, a JSON Schema of its arguments.

    Attributes:
        name: The tool's name (what a `ToolCall` names).
        description: What the tool does, in words the model reads.
        parameters: A JSON Schema (`{"type": "object", ...}`) of the arguments.
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}},
        converter=_frozen_mapping,
        hash=False,
    )


TOKENS_MAX = 2**63 - 1
"""The largest token count on the wire: the daemon's counts are Go ints (int64)."""


def token_count(value: object) -> int:
    """`value` as a token count the wire can carry: a whole number in [0, `TOKENS_MAX`].

    A count comes from a model's server, so it may be anything; it is bookkeeping,
    not the answer, so no value fails a turn: a fraction is rounded down, past
    int64 is `TOKENS_MAX`, and a negative, a non-number or NaN is 0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        if math.isinf(value):
            return TOKENS_MAX if value > 0 else 0
        value = math.floor(value)
    return min(max(value, 0), TOKENS_MAX)


@attrs.frozen
class Usage:
    """Tokens a model reports for one reply (or, summed, for a turn).

    Attributes:
        input_tokens: Tokens of the prompt the model read.
        output_tokens: Tokens the model wrote.
    """

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input and output together."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


@attrs.frozen
class Message:
    """One message of the conversation a model reads.

    A `system` message holds the agent's instructions; `user` the prompt;
    `assistant` what the model said before (text and/or tool calls); `tool`
    one tool's result, answering the call whose id it names. Build them with
    the class methods rather than by hand.

    Attributes:
        role: One of `ROLES`.
        text: The message's text (a tool result's JSON text, for `tool`).
        tool_calls: An assistant message's tool calls.
        tool_call_id: A tool message's answer to this call id.
        tool_name: A tool message's tool name.
        is_error: A tool message that reports the tool's failure.
    """

    role: Role = attrs.field()
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    tool_call_id: str = ""
    tool_name: str = ""
    is_error: bool = False

    @role.validator
    def _check_role(self, _attribute: attrs.Attribute[str], value: str) -> None:
        if value not in ROLES:
            raise ValueError(
                f"Message: role {value!r} is not one of {', '.join(ROLES)}; "
                "build messages with Message.system/user/assistant/tool_result"
            )

    @classmethod
    def system(cls, text: str) -> Message:
        """The agent's instructions (its persona, as a daemon's system prompt)."""
        return cls("system", text)

    @classmethod
    def user(cls, text: str) -> Message:
        """What the turn was asked."""
        return cls("user", text)

    @classmethod
    def assistant(cls, text: str = "", tool_calls: Sequence[ToolCall] = ()) -> Message:
        """What the model said: text, tool calls, or both."""
        return cls("assistant", text, tool_calls)

    @classmethod
    def tool_result(cls, call: ToolCall, text: str, *, is_error: bool = False) -> Message:
        """One tool's result (its JSON text), answering `call`."""
        return cls("tool", text, tool_call_id=call.id, tool_name=call.name, is_error=is_error)


@attrs.frozen
class ModelReply:
    """A model's answer to one request: text, tool calls to run, or both, and its usage.

    A reply with tool calls asks the loop to run them and ask again; a reply
    with none is the turn's answer.

    Attributes:
        text: What the model wrote.
        tool_calls: The tools it asks to run, in its order.
        usage: The tokens it reports for this reply.
        model: The model's own name for itself, when it says.
        stop_reason: The vendor's reason for stopping (`stop`, `tool_use`, ...), as sent.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    usage: Usage = Usage()
    model: str = ""
    stop_reason: str = ""

    @property
    def cut(self) -> bool:
        """Whether the model stopped at its output limit (`length`, `max_tokens`): cut short."""
        return self.stop_reason in CUT_STOP_REASONS


@runtime_checkable
class Model(Protocol):
    """What a `ModelAgent` needs of a model: one reply to a conversation and its tools."""

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """Answer the conversation; `tools` are those the model may ask for."""
        ...


class ModelError(CoreAgentError):
    """A model request failed; `kind` says how, in the daemon's turn-error kinds.

    `kind` is one of `coreagent_sdk.TURN_ERROR_KINDS` (a 429 is `rate_limited`,
    a refused key `auth_error`, an unknown model `model_not_found`, a 5xx or a
    dropped connection `transient_network`), so a model's failure reaches the
    caller of `call_peer` as the same `PeerTurnError` a daemon's would.

    Attributes:
        kind: One of `TURN_ERROR_KINDS`.
        retryable: Whether trying again may work (a 429 or a 5xx, not a bad key).
        status: The HTTP status the model's API answered, when there was one.
    """

    def __init__(
        self, message: str, *, kind: str, retryable: bool, status: int | None = None
    ) -> None:
        if kind not in TURN_ERROR_KINDS:
            raise ValueError(
                f"ModelError: kind {kind!r} is not a turn-error kind; "
                f"use one of {', '.join(sorted(TURN_ERROR_KINDS))}"
            )
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.status = status
