"""Directories: where `CallPeer` looks a peer's name up, on every call."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol, Union, runtime_checkable

import attrs
import httpx

from . import _display
from ._client import AttachClient
from ._endpoint import checked_base_url
from ._http import LoopBoundClient
from ._token import checked_token, read_token
from ._wire import labels_dict
from .errors import CoreAgentError, DirectoryError

__all__ = [
    "Directory",
    "DirectoryFunc",
    "HubDirectory",
    "Peer",
    "Roster",
    "StaticDirectory",
    "lookup_peer",
    "read_token",
]


@attrs.frozen
class Peer:
    """The subset of a registry record a caller needs."""

    name: str
    endpoint: str
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=labels_dict)


class Roster(tuple[Peer, ...]):
    """The peers a directory listed: a tuple that shows as a table in a notebook."""

    __slots__ = ()

    def __repr__(self) -> str:
        return _display.roster_text(self)

    def _repr_html_(self) -> str:
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

    async def peers(self) -> Sequence[Peer]: ...


async def lookup_peer(directory: Directory, name: str) -> Peer | None:
    """`directory.lookup(name)` when it has one; else the first peer of `peers()` so named."""
    lookup = getattr(directory, "lookup", None)
    if callable(lookup):
        found = await lookup(name)
        return found if isinstance(found, Peer) else None
    for peer in await directory.peers():
        if peer.name == name:
            return peer
    return None


PeersResult = Union[Iterable[Peer], None]  # noqa: UP007 - a runtime alias on 3.10
PeersFunc = Callable[[], PeersResult | Awaitable[PeersResult]]


class DirectoryFunc:
    """A directory backed by a function (sync or async); None means an empty roster."""

    def __init__(self, fn: PeersFunc) -> None:
        self._fn = fn

    def __repr__(self) -> str:
        return f"DirectoryFunc({getattr(self._fn, '__name__', repr(self._fn))})"

    async def peers(self) -> Sequence[Peer]:
        got = self._fn()
        if inspect.isawaitable(got):
            got = await got
        return Roster(got) if got is not None else Roster()

    async def lookup(self, name: str) -> Peer | None:
        return next((p for p in await self.peers() if p.name == name), None)


class StaticDirectory:
    """A fixed roster."""

    def __init__(self, peers: Iterable[Peer]) -> None:
        self._peers = Roster(peers)
        self._by_name: dict[str, Peer] = {}
        for peer in reversed(self._peers):  # the first of a duplicated name wins, as a scan
            self._by_name[peer.name] = peer

    def __repr__(self) -> str:
        return f"StaticDirectory({[p.name for p in self._peers]!r})"

    def _repr_html_(self) -> str:
        return self._peers._repr_html_()

    async def peers(self) -> Sequence[Peer]:
        return self._peers

    async def lookup(self, name: str) -> Peer | None:
        return self._by_name.get(name)


class HubDirectory:
    """The hub's registry: `GET /peers` on every call (labels: `?label=k=v`)."""

    def __init__(
        self,
        hub_url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        token: str | None = None,
        token_env: str | None = None,
        labels: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if token is not None and token_env is not None:
            raise ValueError(
                "directory: pass either token= or token_env=, not both (token_env is read per call)"
            )
        self.hub_url = checked_base_url(hub_url, "directory")
        self._http = LoopBoundClient(transport)
        self._token = checked_token(token, "token=", "directory")
        self._token_env = token_env
        self._environ = environ
        self.labels: dict[str, str] = dict(labels or {})

    def __repr__(self) -> str:
        return f"HubDirectory({self.hub_url!r}, labels={self.labels!r})"

    async def peers(self) -> Sequence[Peer]:
        token = self._token
        if self._token_env is not None:
            token = read_token(self._token_env, self._environ, "directory")
        try:
            client = AttachClient(self.hub_url, http_client=self._http.get(), token=token)
            records = await client.list_peers(self.labels or None)
        except CoreAgentError as exc:
            raise DirectoryError(
                f"directory: could not list peers on the hub {self.hub_url}: {exc}"
            ) from exc
        return Roster(Peer(r.name, r.endpoint, r.labels) for r in records)

    async def lookup(self, name: str) -> Peer | None:
        """The hub lists no single peer by name, so this reads the roster (`GET /peers`)."""
        return next((p for p in await self.peers() if p.name == name), None)

    async def aclose(self) -> None:
        """Release pooled connections; the directory stays usable."""
        await self._http.aclose()
