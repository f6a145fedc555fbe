"""A simulated fleet of core-agent daemons that speaks the real attach wire protocol.

    from simulator import Fleet, behaviors
    fleet = Fleet()
    fleet.add_peer("prod-1", behaviors.echo(), labels={"cluster": "prod-1"})
    result = await fleet.call_peer().acall(peer="prod-1", prompt="hello")

Needs the `simulator` extra: `pip install 'coreagent-sdk[simulator]'`. Names
are loaded on first use, so importing the package (as the pytest plugin's
entry point does in every pytest run) costs nothing and never fails for an
install without the extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coreagent_sdk import FakeClock
    from coreagent_sdk.host import (
        DEFAULT_TTL,
        MAX_TTL,
        Identity,
        PeerRegistry,
        SessionRateLimit,
        Turn,
    )
    from coreagent_sdk.host import AgentHost as Daemon

    from . import behaviors
    from ._faults import Faults
    from ._fleet import Fleet, PortInUseError, ServedFleet
    from ._roster import RosterEntry
    from ._runtime import (
        SimulatedBuilder,
        SimulatedBuildError,
        SimulatedConfigLoader,
        SimulatedRuntime,
    )

# name -> (module, its name there); the daemons run on the agent host, whose names these are.
_WHERE: dict[str, str | tuple[str, str]] = {
    "DEFAULT_TTL": "coreagent_sdk.host",
    "MAX_TTL": "coreagent_sdk.host",
    "Daemon": ("coreagent_sdk.host", "AgentHost"),  # the public contract's name: kept
    "FakeClock": "coreagent_sdk",
    "Faults": "._faults",
    "Fleet": "._fleet",
    "Identity": "coreagent_sdk.host",
    "PeerRegistry": "coreagent_sdk.host",
    "RosterEntry": "._roster",
    "PortInUseError": "._fleet",
    "ServedFleet": "._fleet",
    "SessionRateLimit": "coreagent_sdk.host",
    "SimulatedBuildError": "._runtime",
    "SimulatedBuilder": "._runtime",
    "SimulatedConfigLoader": "._runtime",
    "SimulatedRuntime": "._runtime",
    "Turn": "coreagent_sdk.host",
}

__all__ = [*sorted(_WHERE), "behaviors"]


def _require_extra() -> None:
    try:
        importlib.import_module("starlette")
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "simulator: needs the 'simulator' extra: pip install 'coreagent-sdk[simulator]'"
        ) from exc


def __getattr__(name: str) -> Any:
    if name == "behaviors":
        value: Any = importlib.import_module(".behaviors", __name__)
    elif name in _WHERE:
        _require_extra()
        where = _WHERE[name]
        module, attr = where if isinstance(where, tuple) else (where, name)
        value = getattr(importlib.import_module(module, __name__), attr)
    else:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
