"""What a fleet looks like right now: one `RosterEntry` per peer daemon it runs.

The roster is read, never kept: each call asks the registry and the daemons
afresh, so a peer whose lease lapsed shows as expired at once, and a notebook
view built on it (`Fleet._repr_html_`, `coreagent_sdk.widgets.FleetView`)
can never drift from what the hub answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from coreagent_sdk.host import ModelAgent
from coreagent_sdk.host import fleet_html as _fleet_html

if TYPE_CHECKING:
    from ._fleet import Fleet

__all__ = ["RosterEntry", "fleet_html", "fleet_roster"]

_HUB = "hub"


def _behavior_name(behavior: object) -> str:
    # The fleet records every turn through a wrapper: name what it wraps.
    for _ in range(8):  # bounded: a wrapper of a wrapper, never a cycle
        inner = getattr(behavior, "__wrapped__", None)
        if inner is None:
            break
        behavior = inner
    if isinstance(behavior, ModelAgent):  # a model-driven peer: which model drives it
        return f"model: {behavior.model_name}"
    # Behaviours are closures made by a factory: "reply.<locals>.run" reads as "reply".
    qualname = getattr(behavior, "__qualname__", "") or type(behavior).__name__
    return qualname.split(".<locals>", 1)[0]


@attrs.frozen
class RosterEntry:
    """One peer of a fleet. ``state`` is live (registered) or expired (not listed).

    ``lease_left`` is seconds until the lease lapses (None when not
    registered; a heartbeating peer renews it at a third of its TTL);
    ``heartbeat`` is False for a peer added with ``heartbeat=False``; ``url``
    is the loopback URL while the fleet is served.

    Attributes:
        name: The peer's name.
        endpoint: The in-process base URL it registered (``http://<name>.sim``).
        labels: Its labels.
        behavior: What its turns do: the behaviour's name, such as ``narrate``, or for
            a model-driven peer its model, such as ``model: gpt-4o-mini``.
        state: live (registered) or expired (not listed).
        lease_left: Seconds until its lease lapses; None when not registered.
        heartbeat: False for a peer added with ``heartbeat=False``.
        url: Its loopback URL while the fleet is served; else None.
    """

    name: str
    endpoint: str
    labels: Mapping[str, str]
    behavior: str
    state: str
    lease_left: float | None = None
    heartbeat: bool = True
    url: str | None = None


def fleet_roster(fleet: Fleet) -> list[RosterEntry]:
    now = fleet.clock.now()
    listed = {e.name: e for e in fleet.registry.peers()}
    members = fleet._members
    served = fleet._served.urls if fleet._served is not None else {}

    def entry_of(name: str, behavior: str, url: str | None = None) -> RosterEntry:
        entry = listed.get(name)
        return RosterEntry(
            name=name,
            endpoint=entry.endpoint if entry is not None else "",
            labels=dict(entry.labels) if entry is not None else {},
            behavior=behavior,
            state="live" if entry is not None else "expired",
            lease_left=max(0.0, entry.lease_expires - now) if entry is not None else None,
            heartbeat=members[name].heartbeat if name in members else False,
            url=url,
        )

    out = [
        entry_of(name, _behavior_name(daemon.behavior), served.get(name))
        for name, daemon in fleet.daemons.items()
        if name != _HUB
    ]
    # The fleet's A2A agents (add_a2a_peer): listed by the same hub, named by their kind.
    out += [
        entry_of(name, f"a2a: {_behavior_name(agent.behavior)}")
        for name, agent in fleet.a2a_peers.items()
    ]
    return sorted(out, key=lambda e: e.name)


def fleet_html(fleet: Fleet) -> str:
    rows = [attrs.asdict(e) for e in fleet_roster(fleet)]
    served = fleet._served.urls if fleet._served is not None else {}
    return _fleet_html(fleet.hub_url, rows, served)
