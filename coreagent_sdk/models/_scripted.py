"""`ScriptedModel`: a deterministic model made of rules, for tests and notebooks.

    model = ScriptedModel(
        when("disk").ask("storage", "How full are the disks? {prompt}"),
        when("cpu", "load").ask_all(("compute", "CPU load?"), ("storage", "IO wait?")),
        when().answer("I route disk and cpu questions only."),
    )

The first rule whose `when` matches the user's prompt (what an `[Inbox]`
bundle asks, without the daemon's guidance) plays its rounds in
order: each round is one reply asking for tools (a `call_peer` to a peer, or
a Python tool); when the rounds are done it answers, by default with the
tools' results. The model keeps no state between requests: which round comes
next is read from the conversation itself, so one model serves any number
of concurrent turns and a replayed conversation plays the same way.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from .._attach._inbox import inbox_ask
from ._protocol import Message, ModelError, ModelReply, ToolCall, ToolSpec, Usage
from ._recorded import _steady

__all__ = ["Rule", "ScriptState", "ScriptedModel", "when"]

CALL_PEER = "call_peer"
DEFAULT_ANSWER = "{results}"


@attrs.frozen
class ScriptState:
    """What a rule's `step` function sees: the prompt, the round, the tools' results so far.

    Attributes:
        prompt: The user's prompt: what was asked (an `[Inbox]` bundle's message, or its
            message lines, without the daemon's guidance).
        round: The round about to be played (0 before any tool ran).
        results: Every tool result of the turn so far, oldest first.
        last: The last round's tool results.
    """

    prompt: str
    round: int
    results: tuple[Message, ...] = ()
    last: tuple[Message, ...] = ()

    def render(self, template: str) -> str:
        """`template` with ``{prompt}`` and ``{results}`` (the results, one a line) filled in."""
        text = template.replace("{prompt}", self.prompt)
        if "{results}" in text:  # decoding every result only when the template shows them
            text = text.replace("{results}", "\n".join(_result_line(m) for m in self.results))
        return text


def _result_line(message: Message) -> str:
    # A peer's answer reads as "peer: answer", a failure as "tool failed: why".
    try:
        data = json.loads(message.text)
    except ValueError:
        return message.text
    if isinstance(data, dict):
        if "error" in data:
            return f"{message.tool_name} failed: {data['error']}"
        if "response" in data:
            return f"{data.get('peer', message.tool_name)}: {data['response']}"
        if set(data) == {"result"}:
            return f"{message.tool_name}: {data['result']}"
    return f"{message.tool_name}: {message.text}"


StepResult = str | ModelReply | Sequence[ToolCall]
Step = tuple[tuple[str, Mapping[str, Any]], ...] | Callable[[ScriptState], StepResult]
Match = str | re.Pattern[str] | Callable[[str], bool] | None


def _describe(match: tuple[Match, ...]) -> str:
    if not match:
        return "when()"
    shown = [
        repr(m) if isinstance(m, str) else getattr(m, "pattern", None) or repr(m) for m in match
    ]
    return f"when({', '.join(map(str, shown))})"


@attrs.frozen
class Rule:
    """When the prompt matches, the rounds of tool calls to make, then the answer.

    Build rules with `when(...)` and chain: each `ask`, `ask_all`, `call` or
    `step` adds one round; `answer` sets the final text (``{prompt}`` and
    ``{results}`` are filled in; the default is the results, one a line).

    Attributes:
        match: What the prompt must contain: words (any one, case-insensitive),
            regular expressions, or predicates of the prompt; none matches every prompt.
        steps: The rounds, in order.
        final: The answer template.
    """

    match: tuple[Match, ...] = ()
    steps: tuple[Step, ...] = ()
    final: str = DEFAULT_ANSWER

    def matches(self, prompt: str) -> bool:
        """Whether this rule applies to `prompt`."""
        if not self.match:
            return True
        lowered = prompt.lower()
        for m in self.match:
            if isinstance(m, str) and m.lower() in lowered:
                return True
            if isinstance(m, re.Pattern) and m.search(prompt):
                return True
            if callable(m) and not isinstance(m, (str, re.Pattern)) and m(prompt):
                return True
        return False

    def ask(self, peer: str, prompt: str = "{prompt}") -> Rule:
        """A round asking one peer (`call_peer`); ``{prompt}`` in `prompt` is the user's prompt."""
        return self.ask_all((peer, prompt))

    def ask_all(self, *calls: tuple[str, str]) -> Rule:
        """A round asking several peers at once (one reply, parallel `call_peer` calls)."""
        if not calls:
            raise ValueError("Rule.ask_all: give at least one (peer, prompt) pair")
        return attrs.evolve(
            self,
            steps=(
                *self.steps,
                tuple((CALL_PEER, {"peer": peer, "prompt": text}) for peer, text in calls),
            ),
        )

    def call(self, tool: str, **arguments: Any) -> Rule:
        """A round calling one Python tool with these arguments (strings get ``{prompt}``)."""
        return attrs.evolve(self, steps=(*self.steps, ((tool, arguments),)))

    def step(self, fn: Callable[[ScriptState], StepResult]) -> Rule:
        """A round decided by `fn(state)`: tool calls to make, or a text that is the answer."""
        return attrs.evolve(self, steps=(*self.steps, fn))

    def answer(self, text: str) -> Rule:
        """The final answer's template (``{prompt}``, ``{results}``)."""
        return attrs.evolve(self, final=text)

    def __str__(self) -> str:
        return _describe(self.match)


def when(*match: Match) -> Rule:
    """A rule for prompts containing any of `match` (words, regexes, predicates); none: any."""
    return Rule(tuple(match))


def _estimate(text: str) -> int:
    return max(1, len(text) // 4)


def _fill(value: Any, state: ScriptState) -> Any:
    return state.render(value) if isinstance(value, str) else value


class ScriptedModel:
    """A deterministic `Model` playing the first rule that matches the user's prompt.

    No network, no randomness: the same conversation gets the same reply,
    whatever else runs at the same time. Usage is estimated (a token per four
    characters) so usage views have numbers to show. A prompt no rule matches
    is a `ModelError` (kind ``config_error``) naming the rules; add a
    catch-all `when().answer(...)` last to answer everything.

    Args:
        *rules: The rules, tried in order.
        delay: Seconds each reply takes (a slow model, for timelines).
        name: The model's name in its replies.

    Attributes:
        rules: The rules, in order.
        delay: Seconds each reply takes.
        name: The model's name in its replies.
        requests: How many replies it was asked for (all turns together).
    """

    def __init__(self, *rules: Rule, delay: float = 0.0, name: str = "scripted") -> None:
        for rule in rules:
            if not isinstance(rule, Rule):
                raise TypeError(
                    f"ScriptedModel: {rule!r} is not a rule; build rules with when(...), "
                    "e.g. when('disk').ask('storage', '{prompt}')"
                )
        if not delay >= 0:
            raise ValueError(f"ScriptedModel: delay must be seconds >= 0, got {delay!r}")
        self.rules = tuple(rules)
        self.delay = float(delay)
        self.name = name
        self.requests = 0  # replies asked for, for tests and benchmarks

    def __repr__(self) -> str:
        return f"ScriptedModel({', '.join(map(str, self.rules))})"

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """The reply the matching rule gives at this point of the conversation."""
        self.requests += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        state = _state(messages)
        rule = next((r for r in self.rules if r.matches(state.prompt)), None)
        if rule is None:
            raise ModelError(
                f"ScriptedModel: no rule matches the prompt {state.prompt[:120]!r} "
                f"(rules: {', '.join(map(str, self.rules)) or 'none'}); add a rule for it, "
                "or a catch-all when().answer(...) last",
                kind="config_error",
                retryable=False,
            )
        # A peer's session id and duration differ on every run: counted as recorded (as *),
        # so the same conversation reports the same usage whatever its timing.
        used = sum(_estimate(_steady(m)) for m in messages)
        if state.round >= len(rule.steps):
            return self._answer(state.render(rule.final), used)
        step = rule.steps[state.round]
        if callable(step):
            made = step(state)
            if isinstance(made, ModelReply):
                return made
            if isinstance(made, str):
                return self._answer(made, used)
            calls = tuple(made)
        else:
            calls = tuple(
                ToolCall(
                    f"call-{state.round}-{i}",
                    tool,
                    {k: _fill(v, state) for k, v in arguments.items()},
                )
                for i, (tool, arguments) in enumerate(step)
            )
        offered = {t.name for t in tools}
        for call in calls:
            if call.name == CALL_PEER and CALL_PEER not in offered:
                raise ModelError(
                    f"ScriptedModel: {rule} asks a peer, but the agent offers no {CALL_PEER} "
                    f"tool (tools: {', '.join(sorted(offered)) or 'none'}); "
                    "give the agent call_peer=True",
                    kind="config_error",
                    retryable=False,
                )
        written = sum(_estimate(json.dumps(dict(c.arguments))) for c in calls)
        return ModelReply(
            tool_calls=calls,
            usage=Usage(used, written),
            model=self.name,
            stop_reason="tool_use",
        )

    def _answer(self, text: str, used: int) -> ModelReply:
        return ModelReply(
            text=text, usage=Usage(used, _estimate(text)), model=self.name, stop_reason="stop"
        )


def _state(messages: Sequence[Message]) -> ScriptState:
    """The prompt (the last user message), the round, and the tool results after it."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    # A host's model reads the daemon's [Inbox] bundle; rules match what it asks.
    prompt = inbox_ask(messages[last_user].text) if last_user >= 0 else ""
    after = messages[last_user + 1 :]
    rounds = sum(1 for m in after if m.role == "assistant" and m.tool_calls)
    results = tuple(m for m in after if m.role == "tool")
    last_call = max((i for i, m in enumerate(after) if m.role == "assistant"), default=-1)
    last = tuple(m for m in after[last_call + 1 :] if m.role == "tool")
    return ScriptState(prompt, rounds, results, last)
