"""`A2ADirectory`: A2A agents found by their agent cards, read when a name is looked up.

A card is what an A2A agent says of itself, so everything in it is hostile:
its name, its URLs, its size. The card URLs are checked when given (the
endpoint policy, `allowed_hosts`); a card is read through the SDK's own card
resolver over our httpx transport with its body bounded; the JSON-RPC URL it
declares becomes the peer's endpoint, which `CallPeer` checks again before
it dials (a card pointing elsewhere passes the same policy as a registry
entry). By default every lookup reads the card again, as `HubDirectory`
asks the hub on every call; ``max_age`` trades that for speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from .._attach._quote import names_text
from .._clock import Clock, SystemClock
from .._http._deadline import DEFAULT_REQUEST_TIMEOUT, governed, outer_deadline, within
from .._http._endpoint import checked_base_url, shown_url
from .._http._hosts import HostAllowList
from .._http._plumbing import LoopBoundClient
from .._scrub import server_text
from ..errors import CallPeerError, DirectoryError
from ._a2a_bounds import BoundedBodies, limits
from ._directory import A2AInterface, Peer, Roster

__all__ = ["A2A_LABEL", "CARD_PATH", "MAX_CARD_BYTES", "A2ADirectory", "read_card"]

CARD_PATH = "/.well-known/agent-card.json"
"""Where an A2A agent serves its card, under its base URL."""
MAX_CARD_BYTES = 256 * 1024
"""The most of an agent card this SDK reads."""
A2A_LABEL = "protocol"
"""A registry label: a hub peer labelled ``protocol=a2a`` is an A2A agent (card read per call)."""
_MAX_CARDS = 64  # cards read at once by one lookup
_V1 = (1, 0)


def card_url_of(url: str) -> str:
    """`url` itself when it names a path, else the well-known card path under it."""
    path = urlsplit(url).path
    return url.rstrip("/") + CARD_PATH if path in ("", "/") else url


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return ()


async def read_card(http: Any, card_url: str, name: str | None) -> Peer:
    """The peer an agent card describes (named `name`, else by the card), its body bounded.

    Raises `DirectoryError` naming the card when it cannot be read or declares no
    JSON-RPC interface.
    """
    try:
        from a2a.client import A2ACardResolver
        from a2a.client.errors import AgentCardResolutionError
    except ImportError:
        raise DirectoryError(
            f"directory: the agent card {shown_url(card_url)} is an A2A agent's, and the A2A "
            "SDK is not installed; pip install 'coreagent-sdk[a2a]'"
        ) from None
    resolver = A2ACardResolver(http, card_url, agent_card_path="")
    try:
        with limits(MAX_CARD_BYTES, MAX_CARD_BYTES, "agent card"):
            card = await resolver.get_agent_card(
                http_kwargs={"headers": {"Accept-Encoding": "identity"}}
            )
    except CallPeerError:
        raise
    except AgentCardResolutionError as exc:
        said, cut = server_text(str(exc.__cause__ or exc), 300)
        raise DirectoryError(
            f"directory: could not read the agent card {shown_url(card_url)}: "
            f"{said}{'...' if cut else ''}; check the URL and that the agent is up",
            status_code=exc.status_code,
        ) from None
    except Exception as exc:  # our bounds (ProtocolError), protobuf's checks
        said, cut = server_text(str(exc), 300)
        raise DirectoryError(
            f"directory: could not read the agent card {shown_url(card_url)} "
            f"({type(exc).__name__}: {said}{'...' if cut else ''}); is it an A2A agent?"
        ) from None
    interfaces = [i for i in card.supported_interfaces if i.protocol_binding == "JSONRPC"]
    if not interfaces:
        declared = sorted({i.protocol_binding for i in card.supported_interfaces})
        shown, _ = server_text(", ".join(declared) or "none", 200)
        raise DirectoryError(
            f"directory: the agent card {shown_url(card_url)} declares no JSON-RPC interface "
            f"(declares: {shown}); call_peer speaks A2A's JSON-RPC binding"
        )
    best = next((i for i in interfaces if _version(i.protocol_version) == _V1), interfaces[0])
    own, _ = server_text(card.name, 200)
    return Peer(
        name if name is not None else own,
        best.url,
        {A2A_LABEL: "a2a"},
        a2a=A2AInterface(
            card_url=card_url,
            protocol_version=best.protocol_version or "1.0",
            streaming=bool(card.capabilities.streaming),
        ),
    )


class A2ADirectory:
    """A2A agents by their cards: ``A2ADirectory([card URLs])`` or ``A2ADirectory({name: URL})``.

    A list names each agent by its card's ``name``; a mapping by its key (and
    reads only that card on a lookup). A URL without a path means its
    well-known card (``/.well-known/agent-card.json``). ``transport`` reaches
    the agents (None: the real network); ``allowed_hosts`` limits the card
    URLs (checked here) and, given to `CallPeer` too, what their cards may
    point at. ``max_age`` (seconds, opt-in) reuses a card read that recently on
    ``clock``; None reads the card on every lookup.

    Attributes:
        cards: The card URLs, by name for a mapping (None for a list).
        allowed_hosts: The `HostAllowList` the card URLs had to pass (None: any host).
        timeout: Seconds one lookup may take outside `CallPeer` (whose deadline governs it).
        max_age: Seconds a card read may be reused (None: read on every lookup).
    """

    def __init__(
        self,
        cards: Iterable[str] | Mapping[str, str],
        *,
        transport: Any = None,
        allowed_hosts: Iterable[str] | HostAllowList | None = None,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_age: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        if isinstance(cards, str):
            raise TypeError(
                f"directory: A2ADirectory takes a list of card URLs, got the string "
                f"{shown_url(cards)!r}; write A2ADirectory([{shown_url(cards)!r}])"
            )
        hosts = (
            allowed_hosts
            if allowed_hosts is None or isinstance(allowed_hosts, HostAllowList)
            else HostAllowList(allowed_hosts)
        )
        named = dict(cards) if isinstance(cards, Mapping) else None
        urls = list(named.values()) if named is not None else list(cards)
        checked = [card_url_of(checked_base_url(u, "directory")) for u in urls]
        if hosts is not None:
            for url in checked:
                if not hosts.allows(url):
                    raise ValueError(
                        f"directory: the card URL {shown_url(url)!r} is at host "
                        f"{hosts.host_of(url)!r}, which is not in allowed_hosts "
                        f"({', '.join(hosts.patterns) or 'empty'}); add the host if it is trusted"
                    )
        if max_age is not None and (
            isinstance(max_age, bool) or not isinstance(max_age, (int, float)) or not max_age > 0
        ):
            raise ValueError(
                f"directory: max_age must be a positive number of seconds or None, got {max_age!r}"
            )
        self.cards = dict(zip(named, checked, strict=True)) if named is not None else None
        self._urls = tuple(checked)
        self.allowed_hosts = hosts
        self.timeout = float(timeout)
        self.max_age = None if max_age is None else float(max_age)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._http = LoopBoundClient(transport, None, wrap=BoundedBodies)
        self._kept: dict[tuple[str, str | None], tuple[float, Peer]] = {}

    def __repr__(self) -> str:
        if self.cards is not None:
            return f"A2ADirectory({{{names_text(self.cards)}}})"
        return f"A2ADirectory([{', '.join(repr(shown_url(u)) for u in self._urls[:10])}"
        f"{', ...' if len(self._urls) > 10 else ''}])"

    async def _read(self, url: str, name: str | None) -> Peer:
        key = (url, name)
        now = self._clock.now()
        kept = self._kept.get(key)
        if kept is not None and self.max_age is not None and 0 <= now - kept[0] <= self.max_age:
            return kept[1]
        peer = await read_card(self._http.get(), url, name)
        if self.max_age is not None:
            self._kept[key] = (now, peer)
        return peer

    async def _bounded(self, aw: Any) -> Any:
        if outer_deadline():
            return await aw
        with governed():
            try:
                return await within(self.timeout, aw)
            except asyncio.TimeoutError:
                raise DirectoryError(
                    f"directory: the agent cards were not read within {self.timeout:g} s; check "
                    "that the agents are up, or raise A2ADirectory(timeout=...)"
                ) from None

    async def _all(self) -> tuple[list[Peer], list[DirectoryError]]:
        todo = (
            [(u, n) for n, u in self.cards.items()]
            if self.cards is not None
            else [(u, None) for u in self._urls]
        )
        peers: list[Peer] = []
        errors: list[DirectoryError] = []
        for start in range(0, len(todo), _MAX_CARDS):
            got = await asyncio.gather(
                *(self._read(u, n) for u, n in todo[start : start + _MAX_CARDS]),
                return_exceptions=True,
            )
            for item in got:
                if isinstance(item, Peer):
                    peers.append(item)
                elif isinstance(item, DirectoryError):
                    errors.append(item)
                elif isinstance(item, BaseException):
                    raise item
        return peers, errors

    async def peers(self) -> Sequence[Peer]:
        """The agents whose cards could be read now (a `DirectoryError` if none could)."""
        peers, errors = await self._bounded(self._all())
        if errors and not peers:
            raise errors[0]
        return Roster(peers)

    async def lookup(self, name: str) -> Peer | None:
        """The agent named `name`, its card read now; None if no readable card names it."""
        if self.cards is not None:
            url = self.cards.get(name)
            return None if url is None else await self._bounded(self._read(url, name))
        peers, errors = await self._bounded(self._all())
        found = next((p for p in peers if p.name == name), None)
        if found is None and errors:
            raise errors[0]  # the unreadable card may be the one so named: say so
        return found

    async def aclose(self) -> None:
        """Release pooled connections; it stays usable."""
        await self._http.aclose()
