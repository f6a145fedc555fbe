"""`TokenUsage`: the tokens each turn's model reported, per turn and per agent, and their cost.

The invariant: every token counted comes from one model round a record
kept (a ``chat`` `TurnStep`), counted once, under the model that reported it.
Cost comes only from a `PriceTable` the user passes, priced per round by
that round's model, so a turn that used two models is priced by both; a
model the table does not price is the table's `KeyError` naming the fix,
never a silent zero. Rounds a bounded record did not keep cannot be
counted: their number shows as ``steps_dropped``, so an undercount is seen.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

from ._pricing import PriceTable

if TYPE_CHECKING:
    from ._record import CallRecord

__all__ = ["AGENT_COLUMNS", "TURN_COLUMNS", "TokenUsage", "TurnUsage"]

TURN_COLUMNS = (
    "call_id",
    "agent",
    "session_id",
    "models",
    "model_rounds",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost_usd",
    "steps_dropped",
)
"""The columns of `TokenUsage.to_pandas()` (one row per turn)."""

AGENT_COLUMNS = (
    "agent",
    "turns",
    "model_rounds",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost_usd",
    "steps_dropped",
)
"""The columns of `TokenUsage.to_pandas(by="agent")` (one row per agent)."""


@attrs.frozen
class TurnUsage:
    """The tokens of one turn (one call's callee turn) and, with prices, what they cost.

    Attributes:
        call_id: The call whose turn this was.
        agent: The agent (peer) that ran the turn.
        session_id: The session the turn ran in.
        models: The models its rounds used, in first-use order.
        model_rounds: How many model rounds it made (that the record kept).
        input_tokens: Tokens its models read, all rounds together.
        output_tokens: Tokens its models wrote, all rounds together.
        cost_usd: What those tokens cost by the prices given; None without prices.
        steps_dropped: Steps the record did not keep (their tokens are not counted).
    """

    call_id: int
    agent: str
    session_id: str
    models: tuple[str, ...]
    model_rounds: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    steps_dropped: int = 0

    @property
    def total_tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens


def _turn(record: CallRecord, prices: PriceTable | None) -> TurnUsage | None:
    chats = [s for s in record.steps if s.kind == "chat"]
    if not chats:
        return None
    models: dict[str, None] = {}
    cost = 0.0
    for step in chats:
        models.setdefault(step.name, None)
        if prices is not None:
            cost += prices.cost(step.name, step.input_tokens or 0, step.output_tokens or 0)
    return TurnUsage(
        call_id=record.call_id,
        agent=record.peer,
        session_id=record.session_id,
        models=tuple(models),
        model_rounds=len(chats),
        input_tokens=sum(s.input_tokens or 0 for s in chats),
        output_tokens=sum(s.output_tokens or 0 for s in chats),
        cost_usd=cost if prices is not None else None,
        steps_dropped=record.steps_dropped,
    )


@attrs.frozen(repr=False)
class TokenUsage:
    """Tokens per turn and per agent, from a record of calls (`CallLog.usage()`).

    Only turns whose record holds model rounds count (a model-driven peer's,
    recorded by a simulated fleet); costs need ``prices``.

    Attributes:
        turns: One `TurnUsage` per turn that made model rounds, oldest first.
        priced: Whether costs were computed (a `PriceTable` was given).
    """

    turns: tuple[TurnUsage, ...]
    priced: bool = False

    @classmethod
    def of(cls, records: Iterable[CallRecord], prices: PriceTable | None = None) -> TokenUsage:
        """The usage of `records`, priced by `prices` when given."""
        if prices is not None and not isinstance(prices, PriceTable):
            raise TypeError(
                f"usage: prices must be a PriceTable, got {type(prices).__name__}; build one "
                'with PriceTable({"model": Price(input_per_mtok, output_per_mtok)})'
            )
        turns = (_turn(r, prices) for r in sorted(records, key=lambda r: (r.started, r.call_id)))
        return cls(tuple(t for t in turns if t is not None), priced=prices is not None)

    @property
    def input_tokens(self) -> int:
        """Input tokens of every turn."""
        return sum(t.input_tokens for t in self.turns)

    @property
    def output_tokens(self) -> int:
        """Output tokens of every turn."""
        return sum(t.output_tokens for t in self.turns)

    @property
    def cost_usd(self) -> float | None:
        """What every turn cost, or None without prices."""
        return sum(t.cost_usd or 0.0 for t in self.turns) if self.priced else None

    def rows(self, by: str = "turn") -> list[dict[str, Any]]:
        """The table as dicts: one per turn (``by="turn"``) or per agent (``by="agent"``)."""
        if by == "turn":
            return [
                {
                    **attrs.asdict(t),
                    "models": ", ".join(t.models),
                    "total_tokens": t.total_tokens,
                }
                for t in self.turns
            ]
        if by != "agent":
            raise ValueError(f'usage: by must be "turn" or "agent", got {by!r}')
        agents: dict[str, dict[str, Any]] = {}
        for t in self.turns:
            row = agents.setdefault(
                t.agent,
                {
                    "agent": t.agent,
                    "turns": 0,
                    "model_rounds": 0,
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "total_tokens": 0,
                    "cost_usd": 0.0 if self.priced else None,
                    "steps_dropped": 0,
                },
            )
            row["turns"] += 1
            for key in ("model_rounds", "input_tokens", "output_tokens", "steps_dropped"):
                row[key] += getattr(t, key)
            row["total_tokens"] += t.total_tokens
            if self.priced:
                row["cost_usd"] += t.cost_usd or 0.0
        return sorted(agents.values(), key=lambda r: r["agent"])

    def to_pandas(self, by: str = "turn") -> Any:
        """A DataFrame: one row per turn (``by="turn"``) or per agent (``by="agent"``)."""
        rows = self.rows(by)
        from . import _frames  # tables are built when asked for (pandas is lazy too)

        return _frames.frame(rows, TURN_COLUMNS if by == "turn" else AGENT_COLUMNS)

    def __repr__(self) -> str:
        cost = "" if self.cost_usd is None else f", ${self.cost_usd:,.6f}"
        return (
            f"TokenUsage({len(self.turns)} turns, {self.input_tokens:,} in, "
            f"{self.output_tokens:,} out{cost})"
        )

    def _repr_html_(self) -> str:
        from .._display import _render as _display  # at display time only

        rows = [
            (
                r["agent"],
                f"{r['turns']:,}",
                f"{r['model_rounds']:,}",
                f"{r['input_tokens']:,}",
                f"{r['output_tokens']:,}",
                "" if r["cost_usd"] is None else f"${r['cost_usd']:,.6f}",
            )
            for r in self.rows("agent")
        ]
        return _display.table_html(
            ("agent", "turns", "model rounds", "input tokens", "output tokens", "cost"),
            rows,
            title=repr(self),
            note="tokens as each model round reported them; cost from the prices given"
            if self.priced
            else "tokens as each model round reported them; pass prices= for cost",
        )
