"""A simulated fleet of core-agent daemons that speaks the real attach wire protocol.

    from simulator import Fleet, behaviors
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.echo(), labels={"cluster": "prod-1"})
    result = await fleet.call_peer().acall(peer="prod-1", prompt="hello")

Needs the `simulator` extra: `pip install 'coreagent-sdk[simulator]'`.
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "simulator: needs the 'simulator' extra: pip install 'coreagent-sdk[simulator]'"
    ) from exc

from coreagent_sdk import FakeClock

from . import behaviors
from ._agents import Turn
from ._daemon import Daemon
from ._faults import Faults
from ._fleet import Fleet, ServedFleet
from ._registry import DEFAULT_TTL, MAX_TTL, Identity, PeerRegistry
from ._runtime import (
    SimulatedBuilder,
    SimulatedBuildError,
    SimulatedConfigLoader,
    SimulatedRuntime,
)

__all__ = [
    "DEFAULT_TTL",
    "MAX_TTL",
    "Daemon",
    "FakeClock",
    "Faults",
    "Fleet",
    "Identity",
    "PeerRegistry",
    "ServedFleet",
    "SimulatedBuildError",
    "SimulatedBuilder",
    "SimulatedConfigLoader",
    "SimulatedRuntime",
    "Turn",
    "behaviors",
]
