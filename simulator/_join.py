"""`HubMembership`: a served fleet's peers registered on another hub, as real daemons would be.

Invariant: while a joined fleet is served, each of its peers holds a lease on
the joined hub under its loopback endpoint, renewed over HTTP at a third of
the lease the hub granted; when the fleet stops, each is deregistered; when
the process stops without deregistering (killed, frozen), the leases lapse on
the hub by themselves. One task and one connection keep them all, whatever
the number of peers: the requests that come due together are written to the
hub back to back (HTTP/1.1 pipelining, answered in order) and their answers
read after, so 1,000 heartbeats cost a few milliseconds of this process's
CPU instead of a second through a general-purpose client; a peer the hub no
longer knows (404) registers again at the next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

import attrs

from coreagent_sdk import Clock

__all__ = ["HubMembership", "JoinError"]

MIN_HEARTBEAT_INTERVAL = 1.0  # protocol.md: never faster than once a second
BATCH = 256  # requests written back to back before their answers are read
TIMEOUT = 10.0  # for one batch: connecting, writing, and reading every answer
ATTEMPTS = 3  # a registration batch cut off is sent again on a fresh connection
STOP_SECONDS = 5.0  # deregistering on the way out is bounded; leases lapse for the rest
MAX_LINE = 8 * 1024  # of a status or header line
MAX_HEADERS = 100
MAX_BODY = 64 * 1024  # a peer record is a few hundred bytes

_log = logging.getLogger("simulator.join")


class JoinError(RuntimeError):
    """The joined hub refused a registration, or could not be reached."""


@attrs.define
class _Lease:
    name: str
    endpoint: str
    labels: dict[str, str]
    ttl: float
    registration_id: str = ""
    due: float = math.inf  # when the next heartbeat (or registration) is due, fleet clock


def _granted(record: Mapping[str, Any], fallback: float) -> float:
    """The lease the hub granted, from its own timestamps (it may clamp what was asked)."""
    try:
        expires = datetime.fromisoformat(str(record["lease_expires_at"]).replace("Z", "+00:00"))
        beat = datetime.fromisoformat(str(record["last_heartbeat"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return fallback
    seconds = (expires - beat).total_seconds()
    return seconds if seconds > 0 else fallback


class _Pipe:
    """One keep-alive HTTP/1.1 connection to the hub; requests go out in pipelined batches."""

    def __init__(self, hub_url: str, token: str | None) -> None:
        parts = urlsplit(hub_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(
                f"simulator: a fleet joins a hub over plain http, got {hub_url!r}; "
                "use the hub's http://host:port URL"
            )
        self.host = parts.hostname
        self.port = parts.port or 80
        self.base = parts.path.rstrip("/")
        self._head = f"Host: {parts.netloc}\r\nContent-Type: application/json\r\n"
        if token:
            self._head += f"Authorization: Bearer {token}\r\n"
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def batch(self, requests: list[tuple[str, str, bytes]]) -> list[tuple[int, bytes]]:
        """(status, body) for each (method, path, body), in order; JoinError if cut off."""
        try:
            return await asyncio.wait_for(self._batch(requests), TIMEOUT)
        except (OSError, EOFError, ValueError, asyncio.TimeoutError) as exc:
            self.close()
            raise JoinError(
                f"simulator: the hub at {self.host}:{self.port} did not answer "
                f"{len(requests)} request(s): {type(exc).__name__}: {exc}"
            ) from exc

    async def _batch(self, requests: list[tuple[str, str, bytes]]) -> list[tuple[int, bytes]]:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port, limit=MAX_LINE)
        reader, writer = self._streams
        writer.write(
            b"".join(
                f"{method} {self.base}{path} HTTP/1.1\r\n{self._head}"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
                for method, path, body in requests
            )
        )
        await writer.drain()
        answers = []
        keep = True
        for _ in requests:
            status, body, keep_this = await self._answer(reader)
            answers.append((status, body))
            keep = keep and keep_this
        if not keep:
            self.close()
        return answers

    @staticmethod
    async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
        line = await reader.readuntil(b"\n")
        fields = line.split(None, 2)
        if len(fields) < 2 or not fields[0].startswith(b"HTTP/1.") or not fields[1].isdigit():
            raise ValueError(f"not an HTTP/1.1 status line: {line[:80]!r}")
        status = int(fields[1])
        length = 0
        keep = fields[0] == b"HTTP/1.1"
        for _ in range(MAX_HEADERS + 1):
            header = await reader.readuntil(b"\n")
            if header in (b"\r\n", b"\n"):
                break
            key, _, value = header.decode("latin-1").partition(":")
            key, value = key.strip().lower(), value.strip().lower()
            if key == "content-length":
                length = int(value)
            elif key == "transfer-encoding" and value != "identity":
                raise ValueError(f"transfer-encoding {value!r} is not read here")
            elif key == "connection":
                keep = value != "close"
        else:
            raise ValueError(f"more than {MAX_HEADERS} header lines")
        if not 0 <= length <= MAX_BODY:
            raise ValueError(f"a body of {length} bytes (at most {MAX_BODY})")
        return status, await reader.readexactly(length), keep

    def close(self) -> None:
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()


class HubMembership:
    """Keep peers (name, endpoint, labels, ttl) registered on the hub at `hub_url`."""

    def __init__(self, hub_url: str, *, clock: Clock, token: str | None = None) -> None:
        self.hub_url = hub_url
        self._clock = clock
        self._pipe = _Pipe(hub_url, token)
        self._leases: dict[str, _Lease] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.heartbeats = 0
        self.registrations = 0

    def __repr__(self) -> str:
        return f"HubMembership({self.hub_url!r}, peers={len(self._leases)})"

    @property
    def names(self) -> list[str]:
        return sorted(self._leases)

    async def join(self, peers: Iterable[tuple[str, str, Mapping[str, str], float]]) -> None:
        """Register every peer, then keep them alive; JoinError if the hub refuses one."""
        leases = [_Lease(n, e, dict(labels), ttl) for n, e, labels, ttl in peers]
        for start in range(0, len(leases), BATCH):
            chunk = leases[start : start + BATCH]
            requests = [self._registration(x) for x in chunk]
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    answers = await self._pipe.batch(requests)
                    break
                except JoinError as exc:  # registering again is harmless: a new id
                    if attempt == ATTEMPTS:
                        raise
                    _log.warning("join: %s; sending the batch again", exc)
            for lease, (status, body) in zip(chunk, answers, strict=True):
                if status != 201:
                    raise JoinError(
                        f"simulator: the hub at {self.hub_url} refused to register "
                        f"{lease.name!r} ({status}): {body[:200].decode('utf-8', 'replace')}"
                    )
                self._registered(lease, body)
                self._leases[lease.name] = lease
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._keep())

    def forget(self, name: str) -> bool:
        """Stop heartbeating `name` without deregistering it: its lease lapses on the hub."""
        return self._leases.pop(name, None) is not None

    @staticmethod
    def _registration(lease: _Lease) -> tuple[str, str, bytes]:
        body: dict[str, Any] = {"name": lease.name, "endpoint": lease.endpoint}
        if lease.labels:
            body["labels"] = lease.labels
        body["heartbeat_ttl_sec"] = int(lease.ttl)
        return "POST", "/peers", json.dumps(body).encode()

    def _registered(self, lease: _Lease, body: bytes) -> None:
        self.registrations += 1
        self._renewed(lease, body)

    def _renewed(self, lease: _Lease, body: bytes) -> None:
        try:
            record = json.loads(body)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            record = {}
        rid = record.get("registration_id")
        if isinstance(rid, str) and rid:
            lease.registration_id = rid
        granted = _granted(record, lease.ttl)
        lease.due = self._clock.now() + max(MIN_HEARTBEAT_INTERVAL, granted / 3)

    async def _keep(self) -> None:
        # Not `while True`: on Python 3.11 asyncio.wait_for can swallow a cancellation
        # that lands as its inner call finishes, and a keeper that missed its cancel
        # must still stop (seen as a joiner that never exited after SIGTERM).
        while not self._closing:
            now = self._clock.now()
            due = [lease for lease in self._leases.values() if lease.due <= now][:BATCH]
            if due:
                await self._renew(due)
                continue
            soonest = min((lease.due for lease in self._leases.values()), default=math.inf)
            # At most a second: a lease that joins meanwhile may be due before the soonest.
            await self._clock.sleep(max(0.0, min(soonest - now, MIN_HEARTBEAT_INTERVAL)))

    async def _renew(self, due: list[_Lease]) -> None:
        requests = [
            ("POST", f"/peers/{quote(x.registration_id, safe='')}/heartbeat", b"")
            if x.registration_id
            else self._registration(x)
            for x in due
        ]
        try:
            answers = await self._pipe.batch(requests)
        except JoinError as exc:
            # Retried in a second; the leases may lapse meanwhile, as a daemon's would.
            _log.warning("join: %s", exc)
            for lease in due:
                lease.due = self._clock.now() + MIN_HEARTBEAT_INTERVAL
            return
        for lease, (status, body) in zip(due, answers, strict=True):
            if status in (200, 201):
                if lease.registration_id and status == 200:
                    self.heartbeats += 1
                    self._renewed(lease, body)
                else:
                    self._registered(lease, body)
            elif status == 404:  # the hub forgot it (pruned, restarted): register again now
                lease.registration_id = ""
            else:
                _log.warning("join: the hub answered %d for %r", status, lease.name)
                lease.due = self._clock.now() + MIN_HEARTBEAT_INTERVAL

    async def aclose(self, *, deregister: bool = True) -> None:
        """Stop heartbeating; deregister every peer (within a bounded time) unless told not to."""
        self._closing = True
        task, self._task = self._task, None
        for _ in range(10):  # bounded: a keeper that missed one cancel gets another
            if task is None or task.done():
                break
            task.cancel()
            await asyncio.wait([task], timeout=1)
        if task is not None and task.done() and not task.cancelled():
            task.exception()  # retrieved: a keeper's error is not the caller's
        leases, self._leases = list(self._leases.values()), {}
        gone = [
            ("DELETE", f"/peers/{quote(x.registration_id, safe='')}", b"")
            for x in leases
            if x.registration_id
        ]
        if deregister and gone:
            with contextlib.suppress(JoinError, asyncio.TimeoutError):
                await asyncio.wait_for(self._deregister(gone), STOP_SECONDS)
        self._pipe.close()

    async def _deregister(self, requests: list[tuple[str, str, bytes]]) -> None:
        for start in range(0, len(requests), BATCH):
            await self._pipe.batch(requests[start : start + BATCH])
