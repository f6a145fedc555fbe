"""`FleetDirectory`: a fleet's own hub registry read in-process, by name, on every call.

Invariant: it answers exactly what the hub's `GET /peers` would (same leases,
same label filter; a lapsed lease is unknown on the very next call), without
HTTP and without reading the roster to resolve one name, the way the Go
daemon's own directory reads its registry. A fleet daemon's endpoint is given
as its in-process URL even while the fleet is served on sockets, so the
fleet's in-process calls keep working then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from coreagent_sdk import Peer, Roster

if TYPE_CHECKING:
    from coreagent_sdk.host import RegistryEntry as _Entry

    from ._fleet import Fleet

__all__ = ["FleetDirectory"]


class FleetDirectory:
    """The fleet's registry as a `Directory`, with a by-name `lookup`.

    It is the hub's own view: hub faults and the hub's token check apply to
    its HTTP API only, so to exercise those pass ``directory=fleet.directory()``.
    """

    def __init__(self, fleet: Fleet, labels: Mapping[str, str] | None = None) -> None:
        self._fleet = fleet
        self.labels: dict[str, str] = dict(labels or {})

    def __repr__(self) -> str:
        return f"FleetDirectory({self._fleet.hub_url!r}, labels={self.labels!r})"

    def _peer(self, entry: _Entry) -> Peer:
        fleet = self._fleet
        endpoint = entry.endpoint
        own = entry.name in fleet.daemons or entry.name in fleet.a2a_peers
        if own and endpoint in fleet._own_endpoints(entry.name):
            endpoint = fleet.url(entry.name)
        return Peer(entry.name, endpoint, entry.labels)

    async def peers(self) -> Sequence[Peer]:
        return Roster(self._peer(e) for e in self._fleet.registry.peers(self.labels))

    async def lookup(self, name: str) -> Peer | None:
        entry = self._fleet.registry.lookup(name)
        if entry is None or any(entry.labels.get(k) != v for k, v in self.labels.items()):
            return None
        return self._peer(entry)
