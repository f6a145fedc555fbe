"""`PeerRegistration`: join a hub as a peer for the duration of an `async with`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from types import TracebackType

import attrs
import httpx

from .._attach._client import AttachClient
from .._attach._token import credential_variable
from .._attach._wire import PeerRecord
from .._clock import Clock, SystemClock
from .._http._deadline import DEFAULT_REQUEST_TIMEOUT
from .._http._endpoint import checked_base_url, endpoint_problem, shown_url
from .._scrub import scrub
from ..errors import CoreAgentError, NotFoundError, RegistrationError
from ._directory import read_token

__all__ = ["MIN_HEARTBEAT_INTERVAL", "PeerRegistration", "RegistrationEvent"]

MIN_HEARTBEAT_INTERVAL = 1.0  # protocol.md: never faster than once a second

_log = logging.getLogger("coreagent_sdk.registration")


@attrs.frozen
class RegistrationEvent:
    """What `on_event` receives: registered, heartbeat, heartbeat_failed, deregistered.

    Attributes:
        kind: registered, heartbeat, heartbeat_failed or deregistered.
        name: The registered name.
        error: What went wrong, on heartbeat_failed (scrubbed of tokens).
    """

    kind: str
    name: str
    error: str | None = None


def _lease_seconds(record: PeerRecord, fallback: float) -> float:
    """The lease the hub granted: expiry minus last heartbeat, both in the hub's clock.

    Whatever the hub wrote there (garbage, naive and aware times mixed, years
    out of range), a bad value means the requested TTL, never an exception.
    """
    try:
        expires = datetime.fromisoformat(record.lease_expires_at.replace("Z", "+00:00"))
        beat = datetime.fromisoformat(record.last_heartbeat.replace("Z", "+00:00"))
        seconds = (expires - beat).total_seconds()
    except (ValueError, TypeError, OverflowError):
        return fallback
    return seconds if 0 < seconds < float("inf") else fallback


def _described(exc: BaseException) -> str:
    """An error for a log line or event; a foreign one is named and scrubbed like ours."""
    if isinstance(exc, CoreAgentError):
        return str(exc)
    return scrub(f"{type(exc).__name__}: {exc}")


class PeerRegistration:
    """Register `name` at `endpoint` on the hub, keep the lease alive, deregister on exit.

    Heartbeats go out at a third of the lease (never faster than once a
    second); a failed heartbeat (the hub forgot the registration, restarted,
    or pruned it) leads to a fresh registration. Errors inside the loop are
    logged and reported through `on_event`, never raised into your code; a
    failure to register on entry raises `RegistrationError`.

    Attributes:
        hub_url: The hub's base URL, checked when given.
        timeout: Seconds each request to the hub may take.
        name: The name registered.
        endpoint: The base URL registered, where callers reach this process.
        labels: The labels registered.
        ttl: The lease asked for, in seconds.
        heartbeats: Heartbeats the hub accepted so far.
        registrations: Registrations made so far (a forgotten one is redone).
        record: The hub's `PeerRecord` of the registration (None when not registered).
    """

    def __init__(
        self,
        hub_url: str,
        *,
        name: str,
        endpoint: str,
        labels: Mapping[str, str] | None = None,
        ttl: float = 60,
        transport: httpx.AsyncBaseTransport | None = None,
        token_env: str | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        on_event: Callable[[RegistrationEvent], None] | None = None,
        logger: logging.Logger | None = None,
        timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self.hub_url = checked_base_url(hub_url, "registration")
        self.timeout = timeout  # each request to the hub: checked by AttachClient
        if not name:
            raise ValueError("registration: name is required; pick the name callers will use")
        problem = endpoint_problem(endpoint)
        if problem is not None:
            raise ValueError(
                f"registration: endpoint {shown_url(endpoint)!r} is refused: {problem}; "
                "register an absolute http(s) URL with a host where this peer can be reached"
            )
        if ttl <= 0:
            raise ValueError(f"registration: ttl must be > 0 seconds, got {ttl!r}")
        self.name = name
        self.endpoint = endpoint
        self.labels = dict(labels or {})
        self.ttl = ttl
        self._transport = transport
        self._token_env = token_env
        credential_variable(token_env)  # never handed to an MCP server
        self._environ = environ
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._on_event = on_event
        self._log = logger if logger is not None else _log
        self.record: PeerRecord | None = None
        self.heartbeats = 0
        self.registrations = 0
        self._client: AttachClient | None = None
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        state = "registered" if self.record is not None else "not registered"
        return (
            f"PeerRegistration({self.name!r} at {shown_url(self.endpoint)!r} on "
            f"{shown_url(self.hub_url)!r}, {state})"
        )

    @property
    def registration_id(self) -> str:
        """The hub's id of the registration ("" when not registered)."""
        return self.record.registration_id if self.record is not None else ""

    def _emit(self, kind: str, error: str | None = None) -> None:
        if self._on_event is not None:
            try:
                self._on_event(RegistrationEvent(kind, self.name, error))
            except Exception:
                self._log.warning("registration: on_event hook raised on %s", kind, exc_info=True)

    async def _register(self) -> None:
        assert self._client is not None
        self.record = await self._client.register_peer(
            self.name, self.endpoint, self.labels, self.ttl
        )
        self.registrations += 1
        self._emit("registered")

    def interval(self) -> float:
        """Seconds until the next heartbeat: a third of the granted lease, at least 1 s."""
        lease = self.ttl if self.record is None else _lease_seconds(self.record, self.ttl)
        return max(MIN_HEARTBEAT_INTERVAL, lease / 3)

    async def __aenter__(self) -> PeerRegistration:
        token = read_token(self._token_env, self._environ, "registration")
        self._client = AttachClient(
            self.hub_url, transport=self._transport, token=token, timeout=self.timeout
        )
        self._client._timeout_option = "PeerRegistration(timeout=...)"
        try:
            await self._register()
        except CoreAgentError as exc:
            await self._client.aclose()
            raise RegistrationError(
                f"registration: could not register {self.name!r} on "
                f"{shown_url(self.hub_url)}: {exc}"
            ) from exc
        self._task = asyncio.get_running_loop().create_task(self._keep_alive())
        return self

    def _wait(self, failures: int) -> float:
        """Seconds until the next attempt: the interval, or sooner while attempts fail.

        After a failure the lease is at stake, so the retry comes after 1 s,
        then 2, 4, ... (backing off from a struggling hub) up to the interval.
        """
        interval = self.interval()
        if failures == 0:
            return interval
        return min(interval, MIN_HEARTBEAT_INTERVAL * 2.0 ** min(failures - 1, 30))

    async def _keep_alive(self) -> None:
        """Heartbeat until cancelled; no single answer, however bad, ends the loop."""
        assert self._client is not None
        failures = 0
        while True:
            await self._clock.sleep(self._wait(failures))
            try:
                if self.record is None or not self.record.registration_id:
                    await self._register()
                else:
                    self.record = await self._client.heartbeat(self.record.registration_id)
                    self.heartbeats += 1
                    self._emit("heartbeat")
                failures = 0
            except asyncio.CancelledError:
                raise
            except NotFoundError as exc:
                # The hub forgot this registration (restart, prune): register again now.
                self._log.warning("registration: heartbeat for %r failed: %s", self.name, exc)
                self._emit("heartbeat_failed", error=_described(exc))
                try:
                    await self._register()
                    failures = 0
                except Exception as again:
                    failures += 1
                    self._log.warning(
                        "registration: re-registering %r failed: %s", self.name, _described(again)
                    )
            except Exception as exc:
                # Any other bad answer: keep the registration, log, retry sooner.
                failures += 1
                self._log.warning(
                    "registration: heartbeat for %r failed: %s", self.name, _described(exc)
                )
                self._emit("heartbeat_failed", error=_described(exc))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop heartbeating, deregister and close, whatever happened before."""
        task, self._task = self._task, None
        if task is not None:
            # Cancel until it is done: on Python 3.10 asyncio.wait_for can swallow a
            # cancellation that lands as its inner request finishes (bpo-42130).
            for _ in range(100):
                task.cancel()
                await asyncio.wait({task}, timeout=0.05)
                if task.done():
                    break
            try:
                if task.done():
                    task.result()
                else:
                    self._log.error("registration: the keep-alive of %r would not stop", self.name)
            except asyncio.CancelledError:
                pass
            except Exception as died:
                # Never raised into the caller's `async with`: leaving must still clean up.
                self._log.error(
                    "registration: the keep-alive of %r had stopped: %s",
                    self.name,
                    _described(died),
                )
        client, self._client = self._client, None
        if client is None:
            return
        try:
            if self.record is not None and self.record.registration_id:
                await client.deregister(self.record.registration_id)
                self._emit("deregistered")
        except Exception as err:
            self._log.warning(
                "registration: deregistering %r failed: %s", self.name, _described(err)
            )
        finally:
            self.record = None
            await client.aclose()
