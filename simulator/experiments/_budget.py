"""`Budget`: when a run stops by itself, with the trials done kept.

How each bound holds, and what it may overshoot by:

- tokens and cost are counted as each trial's row arrives; once the total
  reaches the bound no new trial starts, and the trials already running
  finish and are kept (their tokens are spent: throwing their rows away
  would waste them). Overshoot: at most the trials in flight at that moment
  (``concurrency`` in one process; the pending chunks on an executor).
- wall time is a deadline: at it, no new trial starts and the running ones
  are cancelled (not recorded, so a resumed run does them).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

__all__ = ["Budget"]


def _bound(name: str) -> Any:
    def check(_inst: Any, _attr: Any, value: object) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"Budget: {name} must be a positive number or None, got {value!r}")
        if math.isnan(value):
            raise ValueError(f"Budget: {name} must be a positive number or None, got nan")

    return check


@attrs.frozen
class Budget:
    """Bounds on one run: tokens, dollars and seconds of wall time (None: unbounded).

    Attributes:
        tokens: Input and output tokens of every trial together.
        cost: Dollars, by the scenario's price table (it needs one).
        wall_time: Seconds from the run's start.
    """

    tokens: int | None = attrs.field(default=None, validator=_bound("tokens"))
    cost: float | None = attrs.field(default=None, validator=_bound("cost"))
    wall_time: float | None = attrs.field(default=None, validator=_bound("wall_time"))


class Tally:
    """What a run has spent so far, and which bound, if any, it reached."""

    def __init__(self, budget: Budget | None) -> None:
        self.budget = budget or Budget()
        self.trials = 0
        self.failures = 0
        self.tokens = 0
        self.cost = 0.0

    def add(self, row: dict[str, Any]) -> None:
        self.trials += 1
        self.failures += 0 if row.get("passed") else 1
        self.tokens += int(row.get("tokens_in") or 0) + int(row.get("tokens_out") or 0)
        self.cost += float(row.get("cost") or 0.0)

    def reached(self) -> str | None:
        """The spending bound reached ("budget: tokens" or "budget: cost"), or None."""
        if self.budget.tokens is not None and self.tokens >= self.budget.tokens:
            return "budget: tokens"
        if self.budget.cost is not None and self.cost >= self.budget.cost:
            return "budget: cost"
        return None
