"""Directories: where `CallPeer` looks a peer's name up, on every call."""

from __future__ import annotations

import asyncio
import inspect
import operator
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, Union, runtime_checkable

import attrs
import httpx

from .. import _scrub
from .._attach._client import AttachClient
from .._attach._quote import names_text
from .._attach._token import checked_token, read_token
from .._attach._wire import PeerList, PeerRecord, labels_dict
from .._clock import Clock, SystemClock
from .._http._asyncio_only import require_asyncio
from .._http._deadline import DEFAULT_REQUEST_TIMEOUT, governed, outer_deadline, within
from .._http._endpoint import checked_base_url, shown_url
from .._http._hosts import HostAllowList
from .._http._plumbing import LoopBoundClient, parse_json
from ..errors import APIStatusError, CoreAgentError, DirectoryError, LoopBlockedError

__all__ = [
    "A2AInterface",
    "DEFAULT_HUB_CONNECTIONS",
    "Directory",
    "DirectoryFunc",
    "HubDirectory",
    "Peer",
    "Roster",
    "StaticDirectory",
    "lookup_peer",
    "read_token",
]


DEFAULT_HUB_CONNECTIONS = 10
"""Connections to the hub one `HubDirectory` may hold open per event loop, unless set.

Concurrent lookups with one credential share a single `GET /peers`, so a few
connections serve any number of calls; a lookup waiting for one waits inside
its deadline.
"""


@attrs.frozen
class A2AInterface:
    """How to speak A2A to a peer: what its agent card declared (see `A2ADirectory`).

    Attributes:
        card_url: Where its agent card was read.
        protocol_version: The A2A version of its JSON-RPC interface (such as ``"1.0"``).
        streaming: Whether its card says it streams (`SendStreamingMessage`).
    """

    card_url: str
    protocol_version: str = "1.0"
    streaming: bool = True


@attrs.frozen
class Peer:
    """The subset of a registry record a caller needs.

    An A2A agent's `Peer` has ``a2a`` set, and its ``endpoint`` is the JSON-RPC
    URL its card declares; `CallPeer` then speaks A2A to it.

    Attributes:
        name: The name the peer registered, which callers ask it by.
        endpoint: The peer's base URL (checked before every dial).
        labels: The peer's labels, such as ``{"cluster": "prod-1"}``.
        a2a: How to speak A2A to it, for an A2A agent (None: an attach-mode peer).
    """

    name: str
    endpoint: str
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=labels_dict)
    a2a: A2AInterface | None = attrs.field(default=None, kw_only=True)


class Roster(tuple[Peer, ...]):
    """The peers a directory listed: a tuple that shows as a table in a notebook."""

    __slots__ = ()

    def __repr__(self) -> str:
        from .._display import _render as _display  # at display time only

        return _display.roster_text(self)

    def _repr_html_(self) -> str:
        from .._display import _render as _display  # at display time only

        return _display.roster_html(self)


@runtime_checkable
class Directory(Protocol):
    """A roster of peers, consulted on every call and never cached by the caller.

    `peers()` is all a directory must have. It may also have a by-name
    ``async def lookup(self, name: str) -> Peer | None`` that answers without
    listing the whole roster (the built-in directories do); `CallPeer` uses
    it when present, else `lookup_peer`'s default, a scan of `peers()`, so a
    directory with only `peers()` keeps working unchanged.
    """

    async def peers(self) -> Sequence[Peer]:
        """Every peer registered now (asked again on every call)."""
        ...


async def lookup_peer(directory: Directory, name: str) -> Peer | None:
    """`directory.lookup(name)` when it has one; else the first peer of `peers()` so named."""
    lookup = getattr(directory, "lookup", None)
    if callable(lookup):
        found = await lookup(name)
        if found is not None and not isinstance(found, Peer):
            raise TypeError(
                f"directory: {type(directory).__name__}.lookup({name!r}) returned "
                f"{type(found).__name__}, not a Peer or None"
            )
        return found
    for peer in await directory.peers():
        if peer.name == name:
            return peer
    return None


PeersResult = Union[Iterable[Peer], None]  # noqa: UP007 - a runtime alias on 3.10
PeersFunc = Callable[[], PeersResult | Awaitable[PeersResult]]


class DirectoryFunc:
    """A directory backed by a function (sync or async) returning peers or None.

    None (the function's answer, or ``DirectoryFunc(None)`` itself, as in the Go
    original) is an empty roster.
    """

    def __init__(self, fn: PeersFunc | None) -> None:
        if fn is not None and not callable(fn):
            raise TypeError(
                f"directory: DirectoryFunc needs a function returning peers (or None for an "
                f"empty roster), got {type(fn).__name__}; for a fixed list use StaticDirectory"
            )
        self._fn = fn

    def __repr__(self) -> str:
        return f"DirectoryFunc({getattr(self._fn, '__name__', repr(self._fn))})"

    async def peers(self) -> Sequence[Peer]:
        """The function's peers, asked now (None: no peers)."""
        if self._fn is None:
            return Roster()
        got = self._fn()
        if inspect.isawaitable(got):
            got = await got
        return Roster(got) if got is not None else Roster()

    async def lookup(self, name: str) -> Peer | None:
        """The first of the function's peers named `name`, or None."""
        return next((p for p in await self.peers() if p.name == name), None)


class StaticDirectory:
    """A fixed roster: the peers given, in their order (the first of a repeated name wins)."""

    def __init__(self, peers: Iterable[Peer]) -> None:
        self._peers = Roster(peers)
        self._by_name: dict[str, Peer] = {}
        for peer in reversed(self._peers):  # the first of a duplicated name wins, as a scan
            self._by_name[peer.name] = peer

    def __repr__(self) -> str:
        return f"StaticDirectory([{names_text(p.name for p in self._peers)}])"

    def _repr_html_(self) -> str:
        return self._peers._repr_html_()

    async def peers(self) -> Sequence[Peer]:
        """The peers given, as a `Roster`."""
        return self._peers

    async def lookup(self, name: str) -> Peer | None:
        """The peer named `name`, or None."""
        return self._by_name.get(name)


class _Answer:
    """One `GET /peers` answer, decoded once and shared by every caller that rode on it."""

    __slots__ = ("_by_name", "peers")

    def __init__(self, peers: Roster) -> None:
        self.peers = peers
        self._by_name: dict[str, Peer] | None = None

    def get(self, name: str) -> Peer | None:
        if self._by_name is None:  # built on the first by-name lookup, once per answer
            # reversed: a hostile hub listing a name twice resolves to its first row,
            # as a scan of the roster would.
            self._by_name = {p.name: p for p in reversed(self.peers)}
        return self._by_name.get(name)


class _Flight:
    """One `GET /peers` in flight, when it was sent, and how many callers wait on it."""

    __slots__ = ("loop", "sent", "task", "waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop, sent: float) -> None:
        self.loop = loop
        self.sent = sent  # the directory's clock: an answer is at most this old
        self.task: asyncio.Task[_Answer] | None = None
        self.waiters = 0


class _Decoded:
    """One credential's last decoded `GET /peers`: what the next one may reuse."""

    __slots__ = ("_by_name", "answer", "body", "hosts", "peers", "rows", "secrets")

    def __init__(
        self,
        body: bytearray,
        hosts: HostAllowList | None,
        secrets: int,
        answer: _Answer,
        rows: list[Any],
        peers: list[Peer | None],
    ) -> None:
        self.body = body
        self.hosts = hosts  # the allow-list it was filtered by
        self.secrets = secrets  # the scrubber's generation its ids were checked against
        self.answer = answer
        self.rows = rows  # the rows as decoded, every one accepted
        self.peers = peers  # each row's peer (None: filtered out by the allow-list)
        self._by_name: dict[Any, int] | None = None

    def find(self, row: dict[str, Any]) -> int | None:
        """The index of a row equal to `row` (found by its name), if one was accepted."""
        if self._by_name is None:
            self._by_name = {r.get("name"): i for i, r in enumerate(self.rows)}
        try:
            index = self._by_name.get(row.get("name"))
        except TypeError:  # an unhashable name: refused when checked
            return None
        return index if index is not None and self.rows[index] == row else None


def _peers(records: Iterable[PeerRecord], hosts: HostAllowList | None) -> Iterator[Peer]:
    for r in records:
        if hosts is None or hosts.allows(r.endpoint):
            yield Peer(r.name, r.endpoint, r.labels)


def _retrieve(task: asyncio.Task[_Answer]) -> None:
    # A flight every caller walked away from still ends; its error is nobody's to raise.
    if not task.cancelled():
        task.exception()


class HubDirectory:
    """The hub's registry: `GET /peers` per lookup (labels: `?label=k=v`).

    Concurrent lookups share one request: a caller that arrives while a
    `GET /peers` with the same credential is in flight waits for that answer
    instead of sending its own, and the rows are decoded once per answer. A
    caller never gets an answer from a request that had already finished when
    it started, so a shared answer is at most one round trip older than the
    call: the hub read its registry at some moment while that request was in
    flight, and the request ended after the caller arrived. Sequential calls
    never share, so a lease that lapsed before a call is gone on that call.

    ``max_connections`` caps the connections to the hub per event loop
    (default `DEFAULT_HUB_CONNECTIONS`); a lookup waiting for one waits inside
    its deadline (the call's, under `CallPeer`).

    ``max_age`` (seconds, opt-in) trades that freshness for speed: a lookup is
    answered from the last roster if its request was sent at most ``max_age``
    ago on ``clock``, and a lookup that finds it past half that age starts a
    refresh in the background (one request at a time, bounded by ``timeout``).
    A roster older than ``max_age`` is never used: the lookup waits for a new
    one. Lookups then cost no request and no decoding of the whole roster,
    but a lease that lapsed may still be listed for up to ``max_age`` (a call
    to it then fails as a call to a stopped peer does). The default, None,
    asks the hub on every lookup, as the daemon does.

    Attributes:
        hub_url: The hub's base URL, checked when given.
        timeout: Seconds one lookup may take (None: no bound of its own; inside
            `CallPeer` the call's deadline governs).
        labels: Only peers with all these labels are listed (``?label=k=v``).
        allowed_hosts: The `HostAllowList` of peer hosts kept in the roster (None: any).
        max_connections: Connections to the hub per event loop.
        max_age: Seconds a roster may be old and still answer a lookup (None: ask the
            hub on every lookup).
    """

    def __init__(
        self,
        hub_url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        token: str | None = None,
        token_env: str | None = None,
        labels: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        allowed_hosts: Iterable[str] | HostAllowList | None = None,
        max_connections: int = DEFAULT_HUB_CONNECTIONS,
        max_age: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        if (
            isinstance(max_connections, bool)
            or not isinstance(max_connections, int)
            or max_connections < 1
        ):
            raise ValueError(
                f"directory: max_connections must be a positive int, got {max_connections!r}; "
                f"the default is {DEFAULT_HUB_CONNECTIONS}"
            )
        if token is not None and token_env is not None:
            raise ValueError(
                "directory: pass either token= or token_env=, not both (token_env is read per call)"
            )
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout < float("inf")
        ):
            raise ValueError(
                f"directory: timeout must be a positive number of seconds or None, got "
                f"{timeout!r}; the default is {DEFAULT_REQUEST_TIMEOUT:g}"
            )
        if max_age is not None and (
            isinstance(max_age, bool)
            or not isinstance(max_age, (int, float))
            or not 0 < max_age < float("inf")
        ):
            raise ValueError(
                f"directory: max_age must be a positive number of seconds or None, got "
                f"{max_age!r}; None (the default) asks the hub on every lookup"
            )
        # Each lookup's deadline; inside CallPeer the call's own deadline governs instead.
        self.timeout = None if timeout is None else float(timeout)
        self.max_age = None if max_age is None else float(max_age)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self.hub_url = checked_base_url(hub_url, "directory")
        self.max_connections = max_connections
        self._http = LoopBoundClient(transport, max_connections)
        # Peers on other hosts are left out of the roster, as if not registered.
        self.allowed_hosts = (
            allowed_hosts
            if allowed_hosts is None or isinstance(allowed_hosts, HostAllowList)
            else HostAllowList(allowed_hosts)
        )
        self._token = checked_token(token, "token=", "directory")
        self._token_env = token_env
        self._environ = environ
        self.labels: dict[str, str] = dict(labels or {})
        # In-flight requests by credential: callers with different tokens may see
        # different rosters (redaction, auth), so only callers with the same one share.
        self._flights: dict[str | None, _Flight] = {}
        # With max_age: the newest answer per credential, and when its request was sent.
        self._kept: dict[str | None, tuple[float, _Answer]] = {}
        # The last body per credential, the host filter it was decoded under, its answer.
        self._decoded: dict[str | None, _Decoded] = {}

    def __repr__(self) -> str:
        aged = "" if self.max_age is None else f", max_age={self.max_age:g}"
        return f"HubDirectory({shown_url(self.hub_url)!r}, labels={self.labels!r}{aged})"

    async def peers(self) -> Sequence[Peer]:
        """Every peer the hub lists now (with the labels asked for), from a shared answer."""
        return (await self._answer()).peers

    async def lookup(self, name: str) -> Peer | None:
        """The peer registered as `name` (None if there is none), from a shared answer."""
        return (await self._answer()).get(name)

    async def _answer(self) -> _Answer:
        require_asyncio("directory")
        token = self._token
        if self._token_env is not None:
            token = read_token(self._token_env, self._environ, "directory")
        loop = asyncio.get_running_loop()
        kept = self._kept.get(token) if self.max_age is not None else None
        if kept is not None and self.max_age is not None:
            age = self._clock.now() - kept[0]
            if 0 <= age <= self.max_age:
                if age >= self.max_age / 2 and token not in self._flights:
                    # Refreshed in the background, with a deadline of its own: nobody waits.
                    self._start(token, loop, self.timeout or DEFAULT_REQUEST_TIMEOUT)
                return kept[1]
        flight = self._flights.get(token)
        if flight is None or flight.loop is not loop:
            # The request's own deadline, whoever waits on it: a caller's deadline ends
            # only its wait. Under CallPeer's deadline the callers' deadlines govern, and
            # the request ends when the last of them leaves (below).
            flight = self._start(token, loop, None if outer_deadline() else self.timeout)
        task = flight.task
        assert task is not None
        flight.waiters += 1
        try:
            if self.timeout is None or outer_deadline():
                return await asyncio.shield(task)
            try:
                return await within(self.timeout, asyncio.shield(task))
            except asyncio.TimeoutError:
                pass
            raise DirectoryError(
                f"directory: the hub {shown_url(self.hub_url)} did not answer GET /peers within "
                f"{self.timeout:g} s; check that the hub is up, or raise HubDirectory(timeout=...)"
            )
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and not task.done():
                # The last caller left (cancelled, or out of time): stop the request rather
                # than finish it for nobody, and forget it, so the next caller asks anew
                # instead of riding on a request that may never end.
                self._land(token, flight)
                task.cancel()

    def _start(
        self, token: str | None, loop: asyncio.AbstractEventLoop, limit: float | None
    ) -> _Flight:
        flight = _Flight(loop, self._clock.now())
        flight.task = loop.create_task(self._fetch(token, flight, limit))
        flight.task.add_done_callback(_retrieve)
        self._flights[token] = flight
        return flight

    def _land(self, token: str | None, flight: _Flight) -> None:
        if self._flights.get(token) is flight:
            del self._flights[token]

    async def _fetch(self, token: str | None, flight: _Flight, limit: float | None) -> _Answer:
        try:
            client = AttachClient(
                self.hub_url, http_client=self._http.get(), token=token, timeout=None
            )
            answer = self._decode(token, await self._list(client, limit))
        except (DirectoryError, LoopBlockedError):
            raise  # a LoopBlockedError's message says the fix: wrapped, it read as the hub's fault
        except CoreAgentError as exc:
            raise DirectoryError(
                f"directory: could not list peers on the hub {shown_url(self.hub_url)}: {exc}",
                status_code=exc.status_code if isinstance(exc, APIStatusError) else None,
            ) from exc
        finally:
            # Synchronously with the answer, before any waiter resumes: from here on a
            # new caller starts a new request instead of riding on a finished one.
            self._land(token, flight)
        if self.max_age is not None:
            kept = self._kept.get(token)
            if kept is None or kept[0] <= flight.sent:
                self._kept[token] = (flight.sent, answer)
        return answer

    def _decode(self, token: str | None, got: tuple[bytearray, str] | None) -> _Answer:
        """The answer in `got` (a body and the host that sent it).

        A 10,000-peer roster cost ~0.15 s of the event loop to decode and check
        row by row, and from one answer to the next it is mostly unchanged: the
        same bytes reuse the last answer whole, and a row equal to one the last
        answer accepted reuses that row's peer. What the last answer accepted
        is trusted again only under the same host filter and the same secrets.
        """
        hosts = self.allowed_hosts
        secrets = _scrub.generation()
        last = self._decoded.get(token)
        if last is not None and (last.hosts is not hosts or last.secrets != secrets):
            last = None
        if got is not None and last is not None and last.body == got[0]:
            return last.answer
        data: Any = None if got is None else parse_json(*got, "peer list")
        rows = data.get("peers") if type(data) is dict else None
        if type(rows) is not list:  # null, absent or wrong: as PeerList reads (and refuses) it
            records = PeerList.from_dict(data).peers
            return _Answer(Roster(_peers(records, hosts)))
        before = last.rows if last is not None else []
        # What is kept for next time is the rows seen before where they are unchanged:
        # the new copies die young, and only changed rows join the long-lived objects
        # (keeping all 10,000 fresh copies set off a full garbage collection every few
        # refreshes).
        if last is not None and len(rows) == len(before):
            # As many rows as last time (no peer came or went, the usual case): each row
            # equal to the one at its place is found by one C-level pass over the pairs,
            # and only the others go through the loop below (a 10,000-peer roster with 3%
            # of its leases renewed: 9 ms of a refresh's 27 went to comparing in Python).
            kept = list(before)
            peers = list(last.peers)
            same = list(map(operator.eq, rows, before))
            todo: Iterable[int] = [index for index, equal in enumerate(same) if not equal]
        else:
            kept, peers, todo = [None] * len(rows), [None] * len(rows), range(len(rows))
        for index in todo:
            row = rows[index]
            # Mostly the row at the same place last time (the hub sorts by name): equal
            # rows decode alike, no need to check them again.
            if index < len(before) and before[index] == row:
                kept[index] = before[index]
                peers[index] = last.peers[index]  # type: ignore[union-attr]
                continue
            if last is not None and type(row) is dict:
                moved = last.find(row)  # a peer came or went before this one
                if moved is not None:
                    kept[index] = before[moved]
                    peers[index] = last.peers[moved]
                    continue
            # Refused here exactly as PeerList.from_dict refuses the first bad row.
            peers[index] = next(_peers((PeerRecord.from_dict(row),), hosts), None)
            kept[index] = row
        answer = _Answer(Roster(p for p in peers if p is not None))
        if got is not None:
            self._decoded[token] = _Decoded(got[0], hosts, secrets, answer, kept, peers)
        return answer

    async def _list(
        self, client: AttachClient, limit: float | None
    ) -> tuple[bytearray, str] | None:
        # governed(): httpx's per-operation timers off; a deadline bounds the whole request.
        with governed():
            if limit is None:  # bounded by each waiter's deadline (see _answer)
                return await client._peer_list_body(self.labels or None)
            try:
                return await within(limit, client._peer_list_body(self.labels or None))
            except asyncio.TimeoutError:
                pass
        raise DirectoryError(
            f"directory: the hub {shown_url(self.hub_url)} did not answer GET /peers within "
            f"{limit:g} s; check that the hub is up, or raise HubDirectory(timeout=...)"
        )

    async def aclose(self) -> None:
        """Stop refreshes nobody waits for, release pooled connections; it stays usable."""
        for token, flight in list(self._flights.items()):
            if flight.waiters == 0 and flight.task is not None and not flight.task.done():
                self._land(token, flight)
                flight.task.cancel()
        await self._http.aclose()
