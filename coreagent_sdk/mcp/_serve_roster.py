"""The tools a served fleet offers: its directory's peers now, each described by its card.

Read again when asked (a `tools/list` after `poll_interval`, or the watcher's
poll): a peer whose lease lapsed is gone from the list, a new one appears, and
the caller learns a change happened (`changed`). Every read is bounded: the
roster read and each card read have a deadline, at most `max_tools` peers are
served, cards are read a few at a time and kept per (name, endpoint), so a
roster read again costs one directory lookup and no card reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import httpx

from .._attach._client import AttachClient
from .._attach._quote import go_quote
from .._clock import Clock
from .._http._endpoint import endpoint_problem
from .._peer._call_peer import CallPeer
from .._peer._directory import Peer
from .._scrub import scrub
from ..errors import CoreAgentError
from ._serve_tools import ServedTool, card_description, plain_description, tool_name

__all__ = ["DEFAULT_CARD_TIMEOUT", "DEFAULT_MAX_SERVED_TOOLS", "ToolRoster"]

DEFAULT_MAX_SERVED_TOOLS = 1000
"""The most peers a served fleet lists as tools, unless `max_tools=` says otherwise."""
DEFAULT_CARD_TIMEOUT = 5.0
"""Seconds one peer's agent card may take to read before it is described without it."""
_CARDS_AT_ONCE = 8  # card reads in flight at once: a 1,000-peer roster is not 1,000 sockets

_log = logging.getLogger("coreagent_sdk.mcp")


class ToolRoster:
    """The served tools: read from a `CallPeer`'s directory, or fixed (one served agent)."""

    def __init__(
        self,
        call_peer: CallPeer,
        *,
        clock: Clock,
        card_transport: httpx.AsyncBaseTransport | None,
        card_timeout: float,
        max_tools: int,
        roster_timeout: float,
        fixed: Sequence[ServedTool] | None = None,
    ) -> None:
        self.call_peer = call_peer
        self.clock = clock
        self.card_transport = card_transport
        self.card_timeout = card_timeout
        self.max_tools = max_tools
        self.roster_timeout = roster_timeout
        self.tools: tuple[ServedTool, ...] = tuple(fixed or ())
        self.by_name = {t.name: t for t in self.tools}
        self.fixed = fixed is not None
        self.read_at: float | None = self.clock.now() if self.fixed else None
        self._cards: dict[tuple[str, str], str] = {}
        self._lock = asyncio.Lock()
        self._warned: set[str] = set()
        self._failing = False  # the last roster read failed (logged once until one succeeds)

    async def refresh(self) -> bool:
        """Read the roster now; True when the tools (names or descriptions) changed.

        A directory that fails or stalls keeps the tools last read (logged once until
        a read succeeds again): a hub that blinks must not empty an MCP host's tool list.
        """
        if self.fixed:
            return False
        async with self._lock:  # concurrent asks share one read
            try:
                peers = await asyncio.wait_for(
                    self.call_peer.directory.peers(), self.roster_timeout
                )
            except (asyncio.TimeoutError, CoreAgentError, OSError) as exc:
                if not self._failing:  # once per outage, not once per poll
                    why = "timed out" if isinstance(exc, asyncio.TimeoutError) else str(exc)
                    _log.warning(
                        "mcp: reading the fleet's roster failed (%s); serving the tools last "
                        "read until it can be read again",
                        scrub(why),
                    )
                self._failing = True
                return False
            finally:
                self.read_at = self.clock.now()
            if self._failing:
                self._failing = False
                _log.warning("mcp: the fleet's roster can be read again")
            tools = await self._described(self._chosen(peers))
            changed = [(t.name, t.description) for t in tools] != [
                (t.name, t.description) for t in self.tools
            ]
            self.tools, self.by_name = tools, {t.name: t for t in tools}
            # Cards of peers gone from the roster are forgotten: the cache stays its size.
            live = {t.peer for t in tools}
            self._cards = {k: v for k, v in self._cards.items() if k[0] in live}
            return changed

    def _chosen(self, peers: Sequence[Peer]) -> list[tuple[str, Peer]]:
        """(tool name, peer) for each servable peer, by peer name: the first of a name that
        collides after sanitising wins, and past `max_tools` the rest wait."""
        chosen: dict[str, Peer] = {}
        for peer in sorted(peers, key=lambda p: p.name):
            name = tool_name(peer.name)
            if not name:
                self._warn(
                    f"no-name:{peer.name}",
                    f"mcp: peer {go_quote(peer.name)} has no "
                    "character a tool name may hold; it is not served",
                )
                continue
            if name in chosen:
                if chosen[name].name != peer.name:
                    self._warn(
                        f"collide:{peer.name}",
                        f"mcp: peers {go_quote(chosen[name].name)} and {go_quote(peer.name)} "
                        f"are both tool {name!r}; only the first is served (rename one)",
                    )
                continue
            if len(chosen) >= self.max_tools:
                self._warn(
                    "max",
                    f"mcp: the roster has more than {self.max_tools} peers; "
                    "the first by name are served (raise max_tools=)",
                )
                break
            chosen[name] = peer
        return list(chosen.items())

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned and len(self._warned) < 10_000:
            self._warned.add(key)
            _log.warning("%s", message)

    async def _described(self, chosen: list[tuple[str, Peer]]) -> tuple[ServedTool, ...]:
        slots = asyncio.Semaphore(_CARDS_AT_ONCE)

        async def one(name: str, peer: Peer) -> ServedTool:
            key = (peer.name, peer.endpoint)
            if key not in self._cards:
                async with slots:
                    self._cards[key] = await self._card_text(peer)
            return ServedTool(name=name, peer=peer.name, description=self._cards[key])

        return tuple(await asyncio.gather(*(one(n, p) for n, p in chosen)))

    async def _card_text(self, peer: Peer) -> str:
        """The peer's card as a description; the plain one when it has none or it cannot be
        read (refused endpoint, a host outside `allowed_hosts`, an error, a stall)."""
        plain = plain_description(peer.name, peer.labels)
        hosts = self.call_peer.allowed_hosts
        if endpoint_problem(peer.endpoint) is not None or (
            hosts is not None and not hosts.allows(peer.endpoint)
        ):
            return plain  # never dialed: the same checks a call makes before it dials
        try:
            async with AttachClient(
                peer.endpoint, transport=self.card_transport, timeout=self.card_timeout
            ) as client:
                card = await asyncio.wait_for(client.agent_card(), self.card_timeout)
        except (asyncio.TimeoutError, CoreAgentError, OSError, httpx.HTTPError):
            return plain
        return card_description(card, peer.name, peer.labels)
