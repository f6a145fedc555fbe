"""Scorers: functions of an `Outcome` that give a check (bool), a metric (a number) or None.

A trial passes when every check that applies to it is True; metrics and
None (a check that does not apply, say routing for a case without an
expected peer) never fail it. Scorers that take settings are small frozen
values rather than closures, so a scenario that uses them still pickles and
can go to a process pool or a dask cluster.
"""

from __future__ import annotations

import attrs

from ._scenario import Outcome

__all__ = [
    "MaxDelegations",
    "MaxDepth",
    "answer_contains",
    "no_error",
    "no_truncation",
    "routed",
]


def answer_contains(outcome: Outcome) -> bool | None:
    """The answer contains the case's `expected` text (any case); None without one."""
    expected = outcome.case.expected
    if expected is None:
        return None
    return outcome.answer is not None and expected.lower() in outcome.answer.lower()


def routed(outcome: Outcome) -> bool | None:
    """The entry peer's first delegation went to the case's `expected_peer`; None without one."""
    expected = outcome.case.expected_peer
    if expected is None:
        return None
    asked = outcome.asked
    return bool(asked) and asked[0] == expected


def no_error(outcome: Outcome) -> bool:
    """The entry call answered (no error of any kind)."""
    return outcome.error_kind is None


def no_truncation(outcome: Outcome) -> bool:
    """No answer anywhere in the call tree was cut at a byte cap."""
    return outcome.truncations == 0 and not outcome.truncated


@attrs.frozen
class MaxDepth:
    """The call tree is at most `levels` deep (1: the entry answered alone).

    Attributes:
        levels: The deepest tree that passes.
    """

    levels: int

    def __call__(self, outcome: Outcome) -> bool:
        return outcome.tree.depth() <= self.levels


@attrs.frozen
class MaxDelegations:
    """The fleet made at most `calls` delegations for the trial.

    Attributes:
        calls: The most delegations that pass.
    """

    calls: int

    def __call__(self, outcome: Outcome) -> bool:
        return outcome.delegations <= self.calls
