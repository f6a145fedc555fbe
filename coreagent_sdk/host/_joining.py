"""Every agent of a multi-agent host registered with one hub, by one task.

A daemon registers itself; a host of many agents registers each of them under
its own name and its own endpoint, as that many daemons would, but it keeps
them with one task and one connection pool: a host of 10,000 agents does not
run 10,000 heartbeat loops. The invariant: while the host serves, each agent
holds a lease renewed at a third of what the hub granted (never faster than
once a second); an agent the hub forgot (404) registers again at once; any
other failure is retried after 1, 2, 4 ... seconds up to the interval; on the
way out every agent is deregistered within one bounded wait. No answer,
however odd, ends the task or raises into the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence

import attrs
import httpx

from .._attach._client import AttachClient
from .._attach._wire import PeerRecord
from .._clock import Clock, SystemClock
from .._peer._directory import read_token
from .._peer._registration import _described, _lease_seconds
from ..errors import NotFoundError, RegistrationError

__all__ = ["HostRegistrations"]

MIN_INTERVAL = 1.0  # protocol.md: heartbeats never faster than once a second
CONCURRENCY = 32  # requests to the hub in flight at once, whatever the number of agents

_log = logging.getLogger("coreagent_sdk.host.joining")


@attrs.define
class _Lease:
    name: str
    endpoint: str
    labels: Mapping[str, str]
    record: PeerRecord | None = None
    due: float = 0.0
    failures: int = 0


class HostRegistrations:
    """Register `agents` (name, endpoint, labels) on the hub; keep them; deregister on close.

    ``request_timeout`` bounds each registration or heartbeat; ``timeout``
    bounds deregistering them all on the way out (the rest lapse).
    """

    def __init__(
        self,
        hub_url: str,
        agents: Sequence[tuple[str, str, Mapping[str, str]]],
        *,
        ttl: float = 60,
        token_env: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 2.0,
        request_timeout: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self.hub_url = hub_url
        self.ttl = ttl
        self.timeout = timeout  # deregistering every agent on the way out, in all
        self.request_timeout = request_timeout  # each registration or heartbeat
        self.leases = [_Lease(name, endpoint, labels) for name, endpoint, labels in agents]
        self._token_env = token_env
        self._transport = transport
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._client: AttachClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._gate = asyncio.Semaphore(CONCURRENCY)
        self._stopping = asyncio.Event()
        self.heartbeats = 0
        self.registrations = 0

    def _interval(self, lease: _Lease) -> float:
        granted = self.ttl if lease.record is None else _lease_seconds(lease.record, self.ttl)
        return max(MIN_INTERVAL, granted / 3)

    async def _register(self, lease: _Lease) -> None:
        assert self._client is not None
        async with self._gate:
            lease.record = await self._client.register_peer(
                lease.name, lease.endpoint, lease.labels, self.ttl
            )
        self.registrations += 1

    async def start(self) -> None:
        """Register every agent; `RegistrationError` when none could be (no hub there).

        An agent whose registration failed while others succeeded is retried
        by the renewal task after a backoff (logged), as after a lost lease:
        one slow answer among 10,000 does not stop the host.
        """
        token = read_token(self._token_env, None, "host")
        self._client = AttachClient(
            self.hub_url, transport=self._transport, token=token, timeout=self.request_timeout
        )
        results = await asyncio.gather(
            *(self._register(lease) for lease in self.leases), return_exceptions=True
        )
        failed = [
            (lease, result)
            for lease, result in zip(self.leases, results, strict=True)
            if isinstance(result, BaseException)
        ]
        if failed and len(failed) == len(self.leases):
            lease, error = failed[0]
            await self.aclose()
            raise RegistrationError(
                f"host: could not register agent {lease.name!r} (nor any other) on the hub: "
                f"{_described(error)}; check register_to= and the host's token"
            ) from error
        now = self._clock.now()
        for lease in self.leases:
            lease.due = now + self._interval(lease)
        for lease, error in failed:
            lease.failures = 1
            lease.due = now + MIN_INTERVAL
            _log.warning("host: registering agent %r failed: %s", lease.name, _described(error))
        self._task = asyncio.get_running_loop().create_task(self._keep())

    async def _renew(self, lease: _Lease) -> None:
        assert self._client is not None
        try:
            if lease.record is None or not lease.record.registration_id:
                await self._register(lease)
            else:
                try:
                    async with self._gate:
                        lease.record = await self._client.heartbeat(lease.record.registration_id)
                    self.heartbeats += 1
                except NotFoundError:
                    # The hub forgot it (restart, prune): register again now.
                    await self._register(lease)
            lease.failures = 0
            lease.due = self._clock.now() + self._interval(lease)
        except Exception as exc:
            lease.failures += 1
            wait = min(self._interval(lease), MIN_INTERVAL * 2.0 ** min(lease.failures - 1, 30))
            lease.due = self._clock.now() + wait
            _log.warning("host: renewing agent %r failed: %s", lease.name, _described(exc))

    async def _keep(self) -> None:
        while not self._stopping.is_set():
            now = self._clock.now()
            due = [lease for lease in self.leases if lease.due <= now]
            if due:
                await asyncio.gather(*(self._renew(lease) for lease in due))
                continue
            # Only the wait is cut short by a stop, never a renewal in flight (see aclose).
            nap = asyncio.ensure_future(self._clock.sleep(min(x.due for x in self.leases) - now))
            stop = asyncio.ensure_future(self._stopping.wait())
            try:
                await asyncio.wait({nap, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                nap.cancel()
                stop.cancel()

    async def aclose(self) -> None:
        """Stop renewing; deregister every registered agent, within one `timeout` in all.

        A registration in flight is let finish first (within the same
        `timeout`): cancelled after the hub took it, it would leave a lease
        under an id the host never read, which no deregistration can reach.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        task, self._task = self._task, None
        self._stopping.set()
        if task is not None:
            with contextlib.suppress(Exception):  # a timeout: cancelled below, the rest lapse
                await asyncio.wait_for(asyncio.shield(task), self.timeout)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        client, self._client = self._client, None
        if client is None:
            return
        held = [lease for lease in self.leases if lease.record is not None]

        async def leave(lease: _Lease) -> None:
            assert lease.record is not None
            async with self._gate:
                await client.deregister(lease.record.registration_id)
            lease.record = None

        try:
            gone = asyncio.gather(*(leave(lease) for lease in held), return_exceptions=True)
            await asyncio.wait_for(gone, max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            _log.warning("host: the hub did not take every deregistration in time; leases lapse")
        finally:
            await client.aclose()
