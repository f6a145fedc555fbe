"""`A2ADirectory`: A2A agents found by their agent cards, read when a name is looked up.

A card is what an A2A agent says of itself, so everything in it is hostile:
its name, its URLs, its size. The card URLs are checked when given (the
endpoint policy, `allowed_hosts`); a card is read over our httpx transport
with its body bounded and parsed by the SDK's own card parser; the JSON-RPC URL it
declares becomes the peer's endpoint, which `CallPeer` checks again before
it dials (a card pointing elsewhere passes the same policy as a registry
entry, and without `allowed_hosts` must stay on the card's own origin). A
lookup reuses a card for as long as the agent's own caching headers allow,
and revalidates it after (see `_a2a_cards`); ``max_age`` overrides them.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from .._attach._quote import names_text
from .._clock import Clock, SystemClock
from .._http._deadline import DEFAULT_REQUEST_TIMEOUT, governed, outer_deadline, within
from .._http._endpoint import checked_base_url, shown_url
from .._http._hosts import HostAllowList
from .._http._plumbing import LoopBoundClient
from ..errors import DirectoryError
from ._a2a_bounds import BoundedBodies
from ._a2a_cards import A2A_LABEL, MAX_CARD_BYTES, CardCache
from ._directory import Peer, Roster

__all__ = ["A2A_LABEL", "CARD_PATH", "MAX_CARD_BYTES", "A2ADirectory"]

CARD_PATH = "/.well-known/agent-card.json"
"""Where an A2A agent serves its card, under its base URL."""
_MAX_CARDS = 64  # cards read at once by one lookup


def card_url_of(url: str) -> str:
    """`url` itself when it names a path, else the well-known card path under it."""
    path = urlsplit(url).path
    return url.rstrip("/") + CARD_PATH if path in ("", "/") else url


def _load_sdk() -> None:
    # The A2A SDK's client takes about a second to import (more on a busy machine): done
    # here, as the directory is made, not inside the first call's deadline, where it ran
    # and also held the event loop. Without the SDK the first call says how to install it.
    with contextlib.suppress(ImportError):
        importlib.import_module("a2a.client")


class A2ADirectory:
    """A2A agents by their cards: ``A2ADirectory([card URLs])`` or ``A2ADirectory({name: URL})``.

    A list names each agent by its card's ``name``; a mapping by its key (and
    reads only that card on a lookup). A URL without a path means its
    well-known card (``/.well-known/agent-card.json``). ``transport`` reaches
    the agents (None: the real network); ``allowed_hosts`` limits the card
    URLs (checked here) and, given to `CallPeer` too, what their cards may
    point at (without it there, a card may point only at its own origin). A
    lookup reuses a card as long as its response's caching headers
    allow (``Cache-Control: max-age``, at most 300 s; ``no-cache`` revalidates
    with its ``ETag`` on every lookup, ``no-store`` reads it on every lookup;
    without such headers, 5 s), then asks again, conditionally: a changed card
    takes effect on that lookup. ``max_age`` (seconds) reuses every card that
    long instead (0: revalidate on every lookup); times are read on ``clock``.

    Attributes:
        cards: The card URLs, by name for a mapping (None for a list).
        allowed_hosts: The `HostAllowList` the card URLs had to pass (None: any host).
        timeout: Seconds one lookup may take outside `CallPeer` (whose deadline governs it).
        max_age: Seconds a card read may be reused (None: as its caching headers say).
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
            isinstance(max_age, bool)
            or not isinstance(max_age, (int, float))
            or not 0 <= max_age < float("inf")
        ):
            raise ValueError(
                f"directory: max_age must be a number of seconds >= 0 or None (the cards' own "
                f"caching headers), got {max_age!r}"
            )
        self.cards = dict(zip(named, checked, strict=True)) if named is not None else None
        self._urls = tuple(checked)
        self.allowed_hosts = hosts
        self.timeout = float(timeout)
        self.max_age = None if max_age is None else float(max_age)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._http = LoopBoundClient(transport, None, wrap=BoundedBodies)
        self._cards = CardCache(self._clock, self.max_age)
        _load_sdk()

    def __repr__(self) -> str:
        if self.cards is not None:
            return f"A2ADirectory({{{names_text(self.cards)}}})"
        return f"A2ADirectory([{', '.join(repr(shown_url(u)) for u in self._urls[:10])}"
        f"{', ...' if len(self._urls) > 10 else ''}])"

    async def _read(self, url: str, name: str | None) -> Peer:
        return await self._cards.read(self._http.get(), url, name)

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
