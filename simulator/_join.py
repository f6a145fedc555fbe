"""`HubMembership`: a served fleet's peers registered on another hub, as real daemons would be.

Invariant: while a joined fleet is served, each of its peers holds a lease on
the joined hub under its loopback endpoint, renewed over HTTP at a third of
the lease the hub granted; when the fleet stops (or a peer is removed), each
is deregistered; when the process stops without deregistering (killed,
frozen), the leases lapse on the hub by themselves. One task and one
connection keep them all, whatever the number of peers: the requests that
come due together are written to the hub back to back (HTTP/1.1 pipelining,
answered in order) and their answers read after, so 1,000 heartbeats cost a
few milliseconds of this process's CPU instead of a second through a
general-purpose client; a peer the hub no longer knows (404) registers again
at the next turn.

Each request carries the peer's own token (a daemon registers with its
attach token, `PeerClient.do`), so a protected hub records that identity as
the owner. No answer, however odd, ends the task: a request that fails is
retried after a backoff that doubles from 1 s up to the heartbeat interval,
with jitter, so a fleet of 1,000 peers does not hammer a hub that is down.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random as _random
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

import attrs

from coreagent_sdk import Clock
from coreagent_sdk.host import server_text, shown_url

__all__ = ["HubMembership", "JoinError"]

MIN_HEARTBEAT_INTERVAL = 1.0  # protocol.md: never faster than once a second
BATCH = 256  # requests written back to back before their answers are read
TIMEOUT = 10.0  # for one batch: connecting, writing, and reading every answer
ATTEMPTS = 3  # a registration batch cut off is sent again on a fresh connection
# Deregistering on the way out is bounded (Go gives it 2 s); leases lapse for the rest.
STOP_SECONDS = 2.0
# ...and given up sooner on a hub that stalls: when no answer comes for this long, so that
# a stop signal ends the process within a second while a hub holds every request.
STALL_SECONDS = 0.5
MAX_LINE = 8 * 1024  # of a status or header line
MAX_HEADERS = 100
MAX_BODY = 64 * 1024  # a peer record is a few hundred bytes

_log = logging.getLogger("simulator.join")

Request = tuple[str, str, bytes, str | None]  # method, path, body, bearer token


class JoinError(RuntimeError):
    """The joined hub refused a registration, or could not be reached."""


@attrs.define
class _Lease:
    name: str
    endpoint: str
    labels: dict[str, str]
    ttl: float
    token: str | None = attrs.field(default=None, repr=False)
    registration_id: str = ""
    due: float = math.inf  # when the next heartbeat (or registration) is due, fleet clock
    interval: float = 0.0  # a third of the granted lease: the heartbeat cadence
    failures: int = 0  # requests failed in a row; the backoff grows with them


def _granted(record: Mapping[str, Any], fallback: float) -> float:
    """The lease the hub granted, from its own timestamps (it may clamp what was asked).

    Whatever the hub wrote there (garbage, naive and aware times mixed, years
    out of range, a number), a bad value means the requested TTL, never an exception.
    """
    try:
        expires = datetime.fromisoformat(str(record["lease_expires_at"]).replace("Z", "+00:00"))
        beat = datetime.fromisoformat(str(record["last_heartbeat"]).replace("Z", "+00:00"))
        seconds = (expires - beat).total_seconds()
    except (KeyError, ValueError, TypeError, OverflowError):
        return fallback
    return seconds if 0 < seconds < math.inf else fallback


class _Pipe:
    """One keep-alive HTTP/1.1 connection to the hub; requests go out in pipelined batches."""

    def __init__(self, hub_url: str) -> None:
        parts = urlsplit(hub_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(
                f"simulator: a fleet joins a hub over plain http, got {shown_url(hub_url)!r}; "
                "use the hub's http://host:port URL"
            )
        self.host = parts.hostname
        self.port = parts.port or 80
        self.base = parts.path.rstrip("/")
        # Host is host[:port], never the userinfo a URL may carry (user:password@).
        host = parts.netloc.rpartition("@")[2]
        self._head = f"Host: {host}\r\nContent-Type: application/json\r\n"
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def batch(
        self, requests: list[Request], *, stall: float | None = None
    ) -> list[tuple[int, bytes]]:
        """(status, body) for each request, in order; JoinError if cut off or malformed.

        ``stall`` gives up when that many seconds pass without the next answer.
        """
        try:
            return await asyncio.wait_for(self._batch(requests, stall), TIMEOUT)
        except (
            OSError,
            EOFError,
            ValueError,
            asyncio.TimeoutError,
            asyncio.LimitOverrunError,  # a line past MAX_LINE (not a ValueError)
        ) as exc:
            self.close()
            # The exception may quote what the hub sent (a status line): scrubbed, then cut.
            detail = server_text(str(exc) or "no answer in time", 300)[0]
            raise JoinError(
                f"simulator: the hub at {self.host}:{self.port} did not answer "
                f"{len(requests)} request(s): {type(exc).__name__}: {detail}"
            ) from None
        except BaseException:
            # Cancelled (a stop signal) mid-batch: the connection holds half an exchange,
            # and the next request (a deregistration) must not read the rest of it.
            self.close()
            raise

    async def _batch(self, requests: list[Request], stall: float | None) -> list[tuple[int, bytes]]:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port, limit=MAX_LINE)
        reader, writer = self._streams
        writer.write(b"".join(self._request(*request) for request in requests))
        await writer.drain()
        answers = []
        keep = True
        for _ in requests:
            status, body, keep_this = await asyncio.wait_for(self._answer(reader), stall)
            answers.append((status, body))
            keep = keep and keep_this
        if not keep:
            self.close()
        return answers

    def _request(self, method: str, path: str, body: bytes, token: str | None) -> bytes:
        # Each peer's own token (PeerClient.do sets the daemon's on every request).
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        head = f"{method} {self.base}{path} HTTP/1.1\r\n{self._head}{auth}"
        return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body

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
    """Keep peers (name, endpoint, labels, ttl, token) registered on the hub at `hub_url`.

    ``random`` (a function returning a float in [0, 1)) draws the jitter of the
    retry backoff; ``clock`` times leases, heartbeats and retries.
    """

    def __init__(
        self,
        hub_url: str,
        *,
        clock: Clock,
        random: Callable[[], float] = _random.random,
        stop_seconds: float = STOP_SECONDS,
    ) -> None:
        self.hub_url = hub_url
        self._clock = clock
        self._random = random
        self.stop_seconds = stop_seconds
        self._pipe = _Pipe(hub_url)
        self._leases: dict[str, _Lease] = {}
        # Registrations to delete (peers removed while the fleet runs), sent by the keeper.
        self._leaving: list[tuple[str, str | None]] = []
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self.heartbeats = 0
        self.registrations = 0
        self.deregistrations = 0
        self.failures = 0

    def __repr__(self) -> str:
        return f"HubMembership({shown_url(self.hub_url)!r}, peers={len(self._leases)})"

    @property
    def names(self) -> list[str]:
        return sorted(self._leases)

    def _backoff(self, lease: _Lease) -> float:
        """Seconds until a failed request is tried again: doubling, jittered, capped.

        From [1, 2) s after the first failure, [2, 4) after the second, ..., up to
        [interval/2, interval): peers that failed together spread out instead of
        retrying in step, and never more often than once a second.
        """
        cap = max(MIN_HEARTBEAT_INTERVAL, lease.interval or lease.ttl / 3)
        high = min(cap, MIN_HEARTBEAT_INTERVAL * 2.0 ** min(lease.failures, 30))
        low = max(MIN_HEARTBEAT_INTERVAL, high / 2)
        return low + (high - low) * self._random()

    def _failed(self, lease: _Lease) -> None:
        lease.failures += 1
        self.failures += 1
        lease.due = self._clock.now() + self._backoff(lease)

    async def join(
        self, peers: Iterable[tuple[str, str, Mapping[str, str], float, str | None]]
    ) -> None:
        """Register every peer, then keep them alive; JoinError if the hub refuses one."""
        leases = [_Lease(n, e, dict(labels), ttl, token) for n, e, labels, ttl, token in peers]
        for start in range(0, len(leases), BATCH):
            # A long join (a busy hub, thousands of peers) must not let the first leases
            # lapse before the keeper starts: renew what is due between batches.
            for _ in range(len(self._leases) // BATCH + 1):  # bounded: each pass renews some
                due = [x for x in self._leases.values() if x.due <= self._clock.now()]
                if not due:
                    break
                await self._renew(due[:BATCH])
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
                    excerpt = " ".join(server_text(body[:400], 200)[0].split())
                    raise JoinError(
                        f"simulator: the hub at {shown_url(self.hub_url)} refused to register "
                        f"{lease.name!r} ({status}): {excerpt}"
                        + (
                            "; give the peers a token the hub accepts (add_peer(token=...), "
                            "serve --token-env)"
                            if status in (401, 403)
                            else ""
                        )
                    )
                self._registered(lease, body)
                self._leases[lease.name] = lease
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._keep())

    def forget(self, name: str) -> bool:
        """Stop heartbeating `name` without deregistering it: its lease lapses on the hub."""
        return self._leases.pop(name, None) is not None

    def leave(self, name: str) -> bool:
        """Stop heartbeating `name` and deregister it (soon, by the keeper); False if unknown."""
        lease = self._leases.pop(name, None)
        if lease is None:
            return False
        if lease.registration_id:
            self._leaving.append((lease.registration_id, lease.token))
            self._wake.set()
        return True

    def add(
        self,
        name: str,
        endpoint: str,
        labels: Mapping[str, str],
        ttl: float,
        token: str | None = None,
    ) -> None:
        """Register `name` (again) at the keeper's next turn, and keep it."""
        lease = _Lease(name, endpoint, dict(labels), ttl, token, due=self._clock.now())
        self._leases[name] = lease
        self._wake.set()

    @staticmethod
    def _registration(lease: _Lease) -> Request:
        body: dict[str, Any] = {"name": lease.name, "endpoint": lease.endpoint}
        if lease.labels:
            body["labels"] = lease.labels
        body["heartbeat_ttl_sec"] = int(lease.ttl)
        return "POST", "/peers", json.dumps(body).encode(), lease.token

    def _registered(self, lease: _Lease, body: bytes) -> None:
        self.registrations += 1
        self._renewed(lease, body)

    def _renewed(self, lease: _Lease, body: bytes) -> None:
        try:
            record = json.loads(body)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict):
            record = {}
        rid = record.get("registration_id")
        if isinstance(rid, str) and rid:
            lease.registration_id = rid
        lease.failures = 0
        lease.interval = max(MIN_HEARTBEAT_INTERVAL, _granted(record, lease.ttl) / 3)
        lease.due = self._clock.now() + lease.interval

    async def _keep(self) -> None:
        # Not `while True`: on Python 3.11 asyncio.wait_for can swallow a cancellation
        # that lands as its inner call finishes, and a keeper that missed its cancel
        # must still stop (seen as a joiner that never exited after SIGTERM).
        while not self._closing:
            try:
                await self._turn()
            except asyncio.CancelledError:
                raise
            except Exception:
                # No answer may end the keeper (the peers would lapse silently): log it,
                # and the leases it was renewing are retried after their backoff.
                _log.exception("join: keeping the leases on %s failed", shown_url(self.hub_url))
                await self._clock.sleep(MIN_HEARTBEAT_INTERVAL)

    async def _turn(self) -> None:
        if self._leaving:
            gone, self._leaving = self._leaving[:BATCH], self._leaving[BATCH:]
            try:
                await self._deregister(gone)
            except JoinError as exc:  # best effort, as Go's Deregister: the leases lapse
                _log.warning("join: deregistering %d peer(s) failed: %s", len(gone), exc)
            return
        now = self._clock.now()
        due = [lease for lease in self._leases.values() if lease.due <= now][:BATCH]
        if due:
            await self._renew(due)
            return
        soonest = min((lease.due for lease in self._leases.values()), default=math.inf)
        # At most a second: a lease that joins meanwhile may be due before the soonest.
        self._wake.clear()
        sleeper = asyncio.ensure_future(
            self._clock.sleep(max(0.0, min(soonest - now, MIN_HEARTBEAT_INTERVAL)))
        )
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waker.cancel()

    async def _renew(self, due: list[_Lease]) -> None:
        requests = [
            ("POST", f"/peers/{quote(x.registration_id, safe='')}/heartbeat", b"", x.token)
            if x.registration_id
            else self._registration(x)
            for x in due
        ]
        try:
            answers = await self._pipe.batch(requests)
        except JoinError as exc:
            # Retried after a jittered backoff; the leases may lapse meanwhile, as a
            # daemon's would.
            _log.warning("join: %s", exc)
            for lease in due:
                self._failed(lease)
            return
        for lease, (status, body) in zip(due, answers, strict=True):
            if status in (200, 201):
                if lease.registration_id and status == 200:
                    self.heartbeats += 1
                    self._renewed(lease, body)
                else:
                    self._registered(lease, body)
                if self._leases.get(lease.name) is not lease and lease.registration_id:
                    # Removed while its request was out: delete what the hub just renewed.
                    self._leaving.append((lease.registration_id, lease.token))
            elif status == 404:  # the hub forgot it (pruned, restarted): register again now
                lease.registration_id = ""
            else:
                _log.warning("join: the hub answered %d for %r", status, lease.name)
                self._failed(lease)

    async def aclose(self, *, deregister: bool = True) -> None:
        """Stop heartbeating; deregister every peer unless told not to.

        Deregistering takes at most `stop_seconds`, and is given up once the hub leaves a
        request unanswered for `STALL_SECONDS`: the leases it did not remove lapse.

        Never raises: whatever the hub answers (or fails to), the caller's cleanup goes on.
        """
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
        gone = [*self._leaving, *((x.registration_id, x.token) for x in leases)]
        gone = [(rid, token) for rid, token in gone if rid]
        self._leaving = []
        if deregister and gone:
            try:
                await asyncio.wait_for(self._deregister(gone), self.stop_seconds)
            except (Exception, asyncio.TimeoutError) as exc:
                _log.warning(
                    "join: deregistering %d peer(s) from %s failed (their leases lapse): %s",
                    len(gone),
                    shown_url(self.hub_url),
                    server_text(f"{type(exc).__name__}: {exc}", 500)[0],
                )
        self._pipe.close()

    async def _deregister(self, gone: list[tuple[str, str | None]]) -> None:
        for start in range(0, len(gone), BATCH):
            chunk = gone[start : start + BATCH]
            answers = await self._pipe.batch(
                [("DELETE", f"/peers/{quote(rid, safe='')}", b"", token) for rid, token in chunk],
                stall=STALL_SECONDS,
            )
            self.deregistrations += sum(1 for status, _ in answers if status < 400)
