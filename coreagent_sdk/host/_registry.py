"""`PeerRegistry`: the hub's roster of peers, with leases, owners and the endpoint policy."""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import attrs

from coreagent_sdk import Clock, SystemClock, endpoint_problem

from .._attach._quote import go_quote
from .._http._endpoint import shown_url
from ._gowire import go_json

__all__ = [
    "DEFAULT_TTL",
    "MAX_TTL",
    "PRUNE_INTERVAL",
    "Identity",
    "PeerRegistry",
    "RegistryError",
    "rfc3339",
]

DEFAULT_TTL = 60.0
"""A lease's length in seconds when a registration names none."""
MAX_TTL = 300.0
"""The longest lease the hub grants, in seconds; longer requests are clamped to it."""
PRUNE_INTERVAL = 5.0  # a real hub sweeps expired leases on a 5 s ticker


def rfc3339(t: float) -> str:
    """A timestamp as the daemon writes it: UTC, milliseconds, `Z`."""
    stamp = datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@attrs.frozen
class Identity:
    """Who a token belongs to, as the daemon's token table says.

    Attributes:
        name: The identity's name (the owner of what it registers and opens).
        admin: Whether it may see and manage everyone's sessions and registrations.
    """

    name: str
    admin: bool = False


ANONYMOUS = Identity("anonymous")


class RegistryError(ValueError):
    """A registration the hub refuses (answered 400)."""


def _forget_rows(entry: _Entry, _attribute: attrs.Attribute[Any], value: Any) -> Any:
    # Any field set anew (a beat, a lease, an endpoint) may change what the entry lists.
    entry._rows.clear()
    return value


@attrs.define(on_setattr=_forget_rows)
class _Entry:
    """One peer's registration on a hub: its name, endpoint, labels, lease and owner.

    Attributes:
        registration_id: The id the hub gave the registration (heartbeats and
            deregistration name it).
        name: The peer's name, as callers ask for it.
        endpoint: The base URL callers dial.
        labels: The peer's labels (`GET /peers?label=k=v` filters on them).
        ttl: The lease in seconds.
        owner: The identity that registered the peer, or None when anonymous.
        registered_at: When the peer registered, on the registry's clock.
        last_heartbeat: When the lease was last renewed, on the registry's clock.
        lease_expires: When the lease lapses unless renewed, on the registry's clock.
        kept: True when its (simulated) daemon keeps the lease alive.
    """

    registration_id: str
    name: str
    endpoint: str
    labels: dict[str, str]
    ttl: float
    owner: str | None
    registered_at: float
    last_heartbeat: float
    lease_expires: float
    # Kept alive by its (simulated) daemon: renewed lazily, see PeerRegistry.keep_alive.
    kept: bool = False
    # The row as `GET /peers` encodes it, per view (redacted or not), dropped whenever a
    # field is set (_forget_rows): a 10,000-peer listing re-encodes only the rows whose
    # lease or endpoint moved since, not all of them whenever one lease renews. (Labels
    # are replaced, never changed in place: a new registration is a new entry.)
    _rows: dict[bool, str] = attrs.field(factory=dict, init=False, repr=False, eq=False)

    def renew(self, now: float) -> None:
        """Bring a kept lease up to `now` as heartbeats every third of the TTL would have."""
        if not self.kept:
            return
        period = self.ttl / 3
        beats = (now - self.last_heartbeat) // period
        if beats >= 1:
            self.last_heartbeat += beats * period
            self.lease_expires = self.last_heartbeat + self.ttl

    def record(self, *, redact: bool) -> dict[str, Any]:
        """The registration as `GET /peers` lists it; `redact` drops what others may not see."""
        # Redacted means absent, as the daemon's omitempty leaves it (not "").
        out: dict[str, Any] = {} if redact else {"registration_id": self.registration_id}
        out["name"] = self.name
        out["endpoint"] = self.endpoint
        if self.labels:
            out["labels"] = dict(self.labels)
        out["registered_at"] = rfc3339(self.registered_at)
        out["last_heartbeat"] = rfc3339(self.last_heartbeat)
        out["lease_expires_at"] = rfc3339(self.lease_expires)
        return out

    def kept_row(self, redact: bool) -> str | None:
        """The row `row(redact=...)` encoded last, if nothing it shows has moved since."""
        return self._rows.get(redact)

    def row(self, *, redact: bool) -> str:
        """`record(redact=...)` as Go encodes it, re-encoded only when what it shows moved."""
        text = self._rows.get(redact)
        if text is None:
            text = self._rows[redact] = go_json(self.record(redact=redact))
        return text


class PeerRegistry:
    """Leases (default 60 s, at most 5 min), owners, label filters, pruning on a clock.

    Expired leases are pruned on a `PRUNE_INTERVAL` (5 s) tick of the clock,
    as a real hub does: until the tick after a lease lapses, list and
    heartbeat still see it (a heartbeat then renews it).

    Entries marked with `keep_alive` belong to daemons that heartbeat at a
    third of their lease, as real daemons do. No task runs for them: their
    lease is brought up to date when it is read, on the registry's clock, so
    a fleet of any size idles for free and a `FakeClock` jump keeps them.

    Attributes:
        clock: The clock leases and prune ticks read.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._by_name: dict[str, _Entry] = {}
        self._ids: dict[str, _Entry] = {}  # by registration id; may hold stale ids, see _by_id
        # The names sorted, as listings show them: None whenever a name comes or goes
        # (sorting 10,000 names cost a listing as much as encoding its changed rows).
        self._order: list[str] | None = None
        self._swept: float | None = None  # the prune tick last swept
        self._epoch = self.clock.now()  # the prune ticker starts with the registry
        # What `version()` serves: a counter bumped by every write, and the moment
        # before which no lease can lapse or beat by itself (None: not known yet).
        self._version = 0
        self._quiet_until: float | None = None

    def _changed(self) -> None:
        self._version += 1
        self._quiet_until = None

    def version(self) -> int:
        """A number that changes whenever what `GET /peers` lists could have changed.

        Every write bumps it, and so does the clock reaching the first moment a
        lease lapses or a kept lease beats, so a listing cached under one
        version is exactly what the hub would encode again (O(1) while quiet).
        """
        if self._quiet_until is None:
            self._quiet_until = min(
                (self._changes_at(e) for e in self._by_name.values()), default=math.inf
            )
        if self.clock.now() >= self._quiet_until:
            self._changed()
        return self._version

    def _changes_at(self, entry: _Entry) -> float:
        """When `entry`'s listing changes by itself: its next beat, or the prune tick
        that drops it (the first at or after its lease lapses)."""
        if entry.kept:
            return entry.last_heartbeat + entry.ttl / 3
        ticks = math.ceil((entry.lease_expires - self._epoch) / PRUNE_INTERVAL)
        return self._epoch + ticks * PRUNE_INTERVAL

    def __len__(self) -> int:
        self.prune()
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"PeerRegistry(peers={sorted(self._by_name)!r})"

    def _last_tick(self, now: float) -> float:
        """When the prune ticker last ran: leases that lapsed by then are gone."""
        return self._epoch + math.floor((now - self._epoch) / PRUNE_INTERVAL) * PRUNE_INTERVAL

    def prune(self) -> list[str]:
        """Drop leases that lapsed by the last tick; returns the names dropped."""
        tick = self._last_tick(self.clock.now())
        if tick == self._swept:
            # Swept at this tick already, and no write makes a lease lapse by a past tick
            # (new and renewed leases end after now), except un-keeping one (keep_alive).
            return []
        self._swept = tick
        # A kept lease never lapses (its next beat is due before it would), so it
        # needs no renewal here; readers renew what they show.
        gone = [n for n, e in self._by_name.items() if not e.kept and e.lease_expires <= tick]
        for name in gone:
            del self._by_name[name]
            self._order = None
        return gone

    def register(
        self,
        name: Any,
        endpoint: Any,
        labels: Any = None,
        ttl: Any = None,
        owner: str | None = None,
    ) -> _Entry:
        """Register (or replace, with a new id) `name`; RegistryError for a bad request."""
        # In the daemon's words (`pkg/attach/peers.go` `RegisterOwned`, `validatePeerEndpoint`);
        # a blank name is refused too (differences.md: no caller could name it).
        if not isinstance(name, str) or not name.strip():
            raise RegistryError("attach: peer Name is required")
        if not isinstance(endpoint, str) or not endpoint:
            raise RegistryError("attach: peer Endpoint is required")
        problem = endpoint_problem(endpoint)
        if problem is not None:
            raise RegistryError(
                "attach: peer Endpoint must be an absolute http or https URL with a host: "
                f"{go_quote(shown_url(endpoint))}: {problem}"
            )
        if labels is None:
            labels = {}
        if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise RegistryError("peers: labels must be an object of strings")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float, type(None))):
            raise RegistryError(f"peers: heartbeat_ttl_sec must be a number, got {ttl!r}")
        if ttl is not None and not math.isfinite(ttl):
            raise RegistryError(f"peers: heartbeat_ttl_sec must be finite, got {ttl!r}")
        if ttl is None or ttl <= 0:  # the daemon's rule: zero or less means the default
            ttl = DEFAULT_TTL
        ttl = min(float(ttl), MAX_TTL)
        self.prune()
        now = self.clock.now()
        entry = _Entry(
            registration_id="reg-" + secrets.token_hex(8),
            name=name,
            endpoint=endpoint,
            labels=dict(labels),
            ttl=ttl,
            owner=owner,
            registered_at=now,
            last_heartbeat=now,
            lease_expires=now + ttl,
        )
        self._by_name[name] = entry
        self._order = None
        self._ids[entry.registration_id] = entry
        if len(self._ids) > 2 * len(self._by_name) + 64:  # drop ids of entries long gone
            self._ids = {e.registration_id: e for e in self._by_name.values()}
        self._changed()
        return entry

    def _by_id(self, registration_id: str) -> _Entry | None:
        # O(1): a fleet joining with 1,000 peers heartbeats hundreds of times a second.
        entry = self._ids.get(registration_id)
        if entry is not None and self._by_name.get(entry.name) is not entry:
            del self._ids[registration_id]  # replaced, deregistered or pruned since
            return None
        return entry

    def heartbeat(self, registration_id: str) -> _Entry | None:
        """Extend the lease by its original TTL; None when the id is unknown or expired."""
        self.prune()
        entry = self._by_id(registration_id)
        if entry is not None:
            now = self.clock.now()
            entry.last_heartbeat = now
            entry.lease_expires = now + entry.ttl
            self._changed()
        return entry

    def deregister(self, registration_id: str, caller: Identity | None) -> bool:
        """Remove a registration. False: the caller may not (not owner, not admin).

        Unknown ids succeed (idempotent). `caller=None` is an open hub: anyone may.
        """
        self.prune()
        entry = self._by_id(registration_id)
        if entry is None:
            return True
        if not self.may_manage(entry, caller):
            return False
        del self._by_name[entry.name]
        self._order = None
        self._changed()
        return True

    @staticmethod
    def may_manage(entry: _Entry, caller: Identity | None) -> bool:
        """Whether `caller` may change `entry`: its owner, an admin, or anyone on an open hub."""
        if caller is None or caller.admin:
            return True
        return entry.owner == caller.name

    def peers(self, labels: Mapping[str, str] | None = None) -> list[_Entry]:
        """Live entries sorted by name, keeping those whose labels include every pair."""
        self.prune()
        wanted = dict(labels or {})
        now = self.clock.now()
        by_name = self._by_name
        if self._order is None:
            self._order = sorted(by_name)
        listed = [by_name[name] for name in self._order]
        if wanted:
            listed = [
                e
                for e in listed
                # A missing label reads as "", so `k=` matches peers without `k`, as on a daemon.
                if all(e.labels.get(k, "") == v for k, v in wanted.items())
            ]
        for entry in listed:
            # The test renew() makes, inline: of 10,000 kept leases only those a beat is due
            # for pay a call (a listing made 10,000 calls, a third of the hub's cost of it).
            if entry.kept and now - entry.last_heartbeat >= entry.ttl / 3:
                entry.renew(now)
        return listed

    def get(self, name: str) -> _Entry | None:
        """The live entry for `name` (None if none), after pruning lapsed leases."""
        self.prune()
        return self.lookup(name)

    def lookup(self, name: str) -> _Entry | None:
        """The live entry for `name`, checking only that entry's lease (O(1))."""
        entry = self._by_name.get(name)
        if entry is None:
            return None
        now = self.clock.now()
        entry.renew(now)
        if entry.lease_expires <= self._last_tick(now):
            del self._by_name[name]
            self._order = None
            return None
        return entry

    def keep_alive(self, name: str, keep: bool = True) -> bool:
        """Mark `name`'s lease as kept by heartbeats (or stop keeping it); False if unknown."""
        entry = self.lookup(name)
        if entry is None:
            return False
        entry.kept = keep
        if not keep:
            # An un-kept lease may have lapsed by the current tick already. (Only then:
            # re-sweeping on every keep made adding n peers to a fleet O(n^2).)
            self._swept = None
        self._changed()
        return True

    def expire(self, name: str) -> bool:
        """Let `name`'s lease lapse now (as if its heartbeats stopped long ago)."""
        entry = self._by_name.get(name)
        if entry is None:
            return False
        # Lapsed long ago, so every prune tick since has dropped it: gone now.
        del self._by_name[name]
        self._order = None
        self._changed()
        return True

    def remove(self, name: str) -> bool:
        """Drop `name`'s registration whoever owns it (the simulator's own bookkeeping)."""
        self._changed()
        self._order = None
        return self._by_name.pop(name, None) is not None

    def set_endpoint(self, name: str, endpoint: str) -> None:
        """Point `name`'s entry at `endpoint` (nothing if it is not registered)."""
        entry = self._by_name.get(name)
        if entry is not None:
            entry.endpoint = endpoint
            self._changed()
