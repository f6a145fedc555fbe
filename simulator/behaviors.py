"""Behaviours for simulated agents: `from simulator import behaviors`."""

from ._agents import (
    Behavior,
    Turn,
    custom,
    drop_stream,
    echo,
    fail,
    narrate,
    never_finish,
    reply,
    slow,
    stream,
)
from ._delegation import delegate, fan_out, join_answers
from ._replay import replay

__all__ = [
    "Behavior",
    "Turn",
    "custom",
    "delegate",
    "drop_stream",
    "echo",
    "fail",
    "fan_out",
    "join_answers",
    "narrate",
    "never_finish",
    "replay",
    "reply",
    "slow",
    "stream",
]
