"""`HubMembership`: a served fleet's peers registered on another hub, as real daemons would be.

Invariant: while a joined fleet is served, each of its peers holds a lease on
the joined hub under its loopback endpoint, renewed over HTTP at a third of
the lease the hub granted; when the fleet stops, each is deregistered; when
the process stops without deregistering (killed, frozen), the leases lapse on
the hub by themselves. One task and one connection pool keep them all,
whatever the number of peers: heartbeats that come due together go out
together, a bounded number at a time, and a peer the hub no longer knows
(404) registers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime

import attrs
import httpx

from coreagent_sdk import AttachClient, Clock
from coreagent_sdk.errors import NotFoundError

__all__ = ["HubMembership"]

# Requests to the hub at once. Few: httpcore scans its pool per request, so on this
# 2-core VM 1,000 registrations cost 0.9 ms of client CPU each one at a time, 1.6 ms
# at 16 in flight and 2.7 ms at 64; a handful keeps the round trips overlapped.
IN_FLIGHT = 4
MIN_HEARTBEAT_INTERVAL = 1.0  # protocol.md: never faster than once a second
STOP_SECONDS = 5.0  # deregistering on the way out is bounded; leases lapse for the rest

_log = logging.getLogger("simulator.join")


@attrs.define
class _Lease:
    name: str
    endpoint: str
    labels: dict[str, str]
    ttl: float
    registration_id: str = ""
    due: float = math.inf  # when the next heartbeat is due, on the fleet's clock


def _granted(lease_expires_at: str, last_heartbeat: str, fallback: float) -> float:
    """The lease the hub granted, from its own timestamps (it may clamp what was asked)."""
    try:
        expires = datetime.fromisoformat(lease_expires_at.replace("Z", "+00:00"))
        beat = datetime.fromisoformat(last_heartbeat.replace("Z", "+00:00"))
    except ValueError:
        return fallback
    seconds = (expires - beat).total_seconds()
    return seconds if seconds > 0 else fallback


class HubMembership:
    """Keep `peers` (name -> endpoint, labels, ttl) registered on the hub at `hub_url`."""

    def __init__(
        self,
        hub_url: str,
        *,
        clock: Clock,
        transport: httpx.AsyncBaseTransport | None = None,
        token: str | None = None,
    ) -> None:
        self.hub_url = hub_url
        self._clock = clock
        self._client = AttachClient(hub_url, transport=transport, token=token)
        self._leases: dict[str, _Lease] = {}
        self._task: asyncio.Task[None] | None = None
        self.heartbeats = 0
        self.registrations = 0

    def __repr__(self) -> str:
        return f"HubMembership({self.hub_url!r}, peers={len(self._leases)})"

    @property
    def names(self) -> list[str]:
        return sorted(self._leases)

    async def join(self, peers: Iterable[tuple[str, str, Mapping[str, str], float]]) -> None:
        """Register every peer (raising the first failure), keeping each alive from then on."""
        if self._task is None:
            # Running already while the rest register: with short leases and many peers,
            # the first registered would lapse before the last one is in.
            self._task = asyncio.get_running_loop().create_task(self._keep())
        leases = [_Lease(n, e, dict(labels), ttl) for n, e, labels, ttl in peers]
        await self._each(self._register, leases, raise_first=True)

    def forget(self, name: str) -> bool:
        """Stop heartbeating `name` without deregistering it: its lease lapses on the hub."""
        return self._leases.pop(name, None) is not None

    async def _register(self, lease: _Lease) -> None:
        record = await self._client.register_peer(
            lease.name, lease.endpoint, lease.labels, lease.ttl
        )
        self.registrations += 1
        self._beat(lease, record.registration_id, record.lease_expires_at, record.last_heartbeat)
        self._leases.setdefault(lease.name, lease)

    def _beat(self, lease: _Lease, rid: str, expires_at: str, beat_at: str) -> None:
        lease.registration_id = rid or lease.registration_id
        granted = _granted(expires_at, beat_at, lease.ttl)
        lease.due = self._clock.now() + max(MIN_HEARTBEAT_INTERVAL, granted / 3)

    async def _heartbeat(self, lease: _Lease) -> None:
        if not lease.registration_id:
            await self._register(lease)
            return
        try:
            record = await self._client.heartbeat(lease.registration_id)
        except NotFoundError:
            await self._register(lease)  # the hub forgot it (pruned, restarted): join again
            return
        self.heartbeats += 1
        self._beat(lease, record.registration_id, record.lease_expires_at, record.last_heartbeat)

    async def _each(
        self,
        step: Callable[[_Lease], Awaitable[None]],
        leases: list[_Lease],
        *,
        raise_first: bool = False,
    ) -> None:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(lease: _Lease) -> None:
            async with gate:
                await step(lease)

        outcomes = await asyncio.gather(*(one(lease) for lease in leases), return_exceptions=True)
        for lease, outcome in zip(leases, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if raise_first:
                    raise outcome
                # Retried at the next interval; the lease may lapse meanwhile, as a daemon's would.
                lease.due = self._clock.now() + MIN_HEARTBEAT_INTERVAL
                _log.warning("join: keeping %r on %s failed: %s", lease.name, self.hub_url, outcome)

    async def _keep(self) -> None:
        while True:
            now = self._clock.now()
            due = [lease for lease in self._leases.values() if lease.due <= now]
            if due:
                await self._each(self._heartbeat, due)
                continue
            soonest = min((lease.due for lease in self._leases.values()), default=math.inf)
            # At most a second: leases that join meanwhile may be due before the soonest.
            await self._clock.sleep(max(0.0, min(soonest - now, MIN_HEARTBEAT_INTERVAL)))

    async def aclose(self, *, deregister: bool = True) -> None:
        """Stop heartbeating; deregister every peer (within a bounded time) unless told not to."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        leases, self._leases = list(self._leases.values()), {}
        if deregister:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._each(self._deregister, leases), STOP_SECONDS)
        await self._client.aclose()

    async def _deregister(self, lease: _Lease) -> None:
        if lease.registration_id:
            await self._client.deregister(lease.registration_id)
