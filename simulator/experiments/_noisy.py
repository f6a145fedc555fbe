"""`NoisyModel`: a scripted model that is wrong with a seeded probability.

Offline studies need models that are wrong sometimes, and wrong the same way
every time a trial is re-run. Each turn decides once, from the seed and the
user's prompt (never from a shared generator, whose draws would depend on
which turn of a concurrent fleet asked first), whether it goes wrong and how:
every round of that turn reads the same decision, so a wrong turn is wrong
consistently rather than switching peers half way.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence

import attrs

from coreagent_sdk.models import Message, ModelReply, ScriptedModel, ToolCall, ToolSpec

__all__ = ["NoisyModel"]

_MODES = ("peer", "rule")


def _peers_of(model: ScriptedModel) -> list[str]:
    peers: set[str] = set()
    for rule in model.rules:
        for step in rule.steps:
            if callable(step):
                continue
            for tool, arguments in step:
                if tool == "call_peer" and isinstance(arguments.get("peer"), str):
                    peers.add(arguments["peer"])
    return sorted(peers)


def _prompt(messages: Sequence[Message]) -> str:
    return next((m.text for m in reversed(messages) if m.role == "user"), "")


class NoisyModel:
    """`model`, but each turn goes wrong with probability `error_rate`, drawn from `seed`.

    ``mode="peer"`` (the default): a wrong turn sends each of its `call_peer`
    calls to another peer than the rule says (one of `peers`, by default
    every peer the rules ask). ``mode="rule"``: a wrong turn plays another
    rule than the one that matches (answers, tools and all). The same seed
    and prompt always give the same choice.

    Args:
        model: The `ScriptedModel` that is right.
        error_rate: The chance, from 0 to 1, that a turn goes wrong.
        seed: The seed (a trial's `seed`).
        mode: ``"peer"`` or ``"rule"``.
        peers: The peers a wrong call may go to (default: those the rules ask).

    Attributes:
        model: The right model.
        error_rate: The chance that a turn goes wrong.
        seed: The seed.
        mode: ``"peer"`` or ``"rule"``.
        peers: The peers a wrong call may go to.
        requests: Replies asked for.
        wrong_turns: Prompts of the turns that went wrong, as decided (a set).
    """

    def __init__(
        self,
        model: ScriptedModel,
        error_rate: float,
        seed: int,
        *,
        mode: str = "peer",
        peers: Iterable[str] | None = None,
    ) -> None:
        if not isinstance(model, ScriptedModel):
            raise TypeError(f"NoisyModel: model must be a ScriptedModel, got {model!r}")
        if isinstance(error_rate, bool) or not 0 <= error_rate <= 1:
            raise ValueError(
                f"NoisyModel: error_rate must be a probability from 0 to 1, got {error_rate!r}"
            )
        if mode not in _MODES:
            raise ValueError(f"NoisyModel: mode must be 'peer' or 'rule', got {mode!r}")
        self.model = model
        self.error_rate = float(error_rate)
        self.seed = int(seed)
        self.mode = mode
        self.peers = sorted(set(peers)) if peers is not None else _peers_of(model)
        if mode == "peer" and len(self.peers) < 2:
            raise ValueError(
                f"NoisyModel: mode='peer' needs two peers or more to pick a wrong one, got "
                f"{self.peers!r}; pass peers=[...] or use mode='rule'"
            )
        if mode == "rule" and len(model.rules) < 2:
            raise ValueError("NoisyModel: mode='rule' needs a model with two rules or more")
        self.requests = 0
        self.wrong_turns: set[str] = set()

    def __repr__(self) -> str:
        return f"NoisyModel({self.model!r}, error_rate={self.error_rate:g}, mode={self.mode!r})"

    def _rng(self, prompt: str) -> random.Random:
        digest = hashlib.sha256(f"{self.seed}\x00{prompt}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """The right model's reply, or, on a wrong turn, a wrong one."""
        self.requests += 1
        prompt = _prompt(messages)
        rng = self._rng(prompt)
        if rng.random() >= self.error_rate:
            return await self.model.complete(messages, tools)
        self.wrong_turns.add(prompt)
        if self.mode == "rule":
            right = next((i for i, r in enumerate(self.model.rules) if r.matches(prompt)), None)
            others = [i for i in range(len(self.model.rules)) if i != right]
            chosen = self.model.rules[rng.choice(others)]
            played = ScriptedModel(attrs.evolve(chosen, match=()), name=self.model.name)
            return await played.complete(messages, tools)
        reply = await self.model.complete(messages, tools)
        calls = []
        for call in reply.tool_calls:
            intended = call.arguments.get("peer")
            if call.name == "call_peer" and isinstance(intended, str):
                wrong = rng.choice([p for p in self.peers if p != intended])
                call = ToolCall(call.id, call.name, {**call.arguments, "peer": wrong})
            calls.append(call)
        return attrs.evolve(reply, tool_calls=tuple(calls))
