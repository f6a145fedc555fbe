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

__all__ = [
    "Behavior",
    "Turn",
    "custom",
    "drop_stream",
    "echo",
    "fail",
    "narrate",
    "never_finish",
    "reply",
    "slow",
    "stream",
]
