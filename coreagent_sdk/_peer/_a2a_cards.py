"""Agent cards read and kept as their agents' HTTP caching headers allow (A2A 1.0 §8.6).

A2A 1.0 says an agent card endpoint SHOULD send ``Cache-Control: max-age`` and
an ``ETag``, and a client SHOULD honour RFC 9111 and revalidate an expired card
with ``If-None-Match``; without caching headers a client MAY apply a default of
its own. Reading the card on every call would cost a second round trip per
delegation; keeping it for ever would leave a moved agent unreachable. So a
card is kept for as long as its own response says, bounded:

- ``no-store``: never kept, read on every lookup.
- ``no-cache`` (or ``max-age=0``, or an unreadable ``max-age``): kept, but
  revalidated on every lookup; a ``304`` reuses the parsed card.
- ``max-age=N``: fresh for N seconds less its ``Age``, at most `MAX_CARD_AGE`.
- nothing: fresh for `DEFAULT_CARD_AGE` seconds (the "implementation-specific
  default" A2A allows).

Once stale, a lookup asks again, conditionally when the card came with a
validator: ``304`` keeps the card (its headers renew it), ``200`` replaces it
(a changed card takes effect on that lookup). Everything in the response is
hostile: an entity tag that is not a short printable token is not sent back, a
huge ``max-age`` stops at the ceiling, the body is bounded while it is read.
The endpoint a kept card names is checked again by `CallPeer` before every
dial, so keeping a card never skips the endpoint policy.
"""

from __future__ import annotations

from typing import Any

import httpx

from .._clock import Clock
from .._http._endpoint import shown_url
from .._scrub import server_text
from ..errors import CallPeerError, DirectoryError
from ._a2a_bounds import limits
from ._directory import A2AInterface, Peer

__all__ = [
    "A2A_LABEL",
    "DEFAULT_CARD_AGE",
    "MAX_CARD_AGE",
    "MAX_CARD_BYTES",
    "CardCache",
    "fetch_card",
    "freshness",
]

MAX_CARD_BYTES = 256 * 1024
"""The most of an agent card this SDK reads."""
DEFAULT_CARD_AGE = 5.0
"""Seconds a card whose response says nothing of caching is reused before it is asked again."""
MAX_CARD_AGE = 300.0
"""The longest a card is reused, whatever its ``max-age`` says."""
A2A_LABEL = "protocol"
"""A registry label: a hub peer labelled ``protocol=a2a`` is an A2A agent (its card says how)."""
_V1 = (1, 0)
_MAX_VALIDATOR = 256  # characters of an ETag / Last-Modified sent back to the agent
_MAX_KEPT = 1024  # cards kept by one cache; past it the cache starts again


def freshness(headers: httpx.Headers, default: float = DEFAULT_CARD_AGE) -> float | None:
    """Seconds a card answered with `headers` stays fresh (None: it must not be stored)."""
    max_age: float | None = None
    no_cache = False
    for directive in headers.get_list("cache-control", split_commas=True):
        name, _, value = directive.strip().partition("=")
        name = name.strip().lower()
        if name == "no-store":
            return None
        if name == "no-cache":
            no_cache = True
        elif name == "max-age":
            value = value.strip().strip('"')
            # RFC 9111 5.2.1.1: delta-seconds; an unreadable one makes the response stale.
            max_age = float(value) if value.isdigit() and len(value) <= 12 else 0.0
    if no_cache:
        return 0.0
    if max_age is None:
        return default
    age = headers.get("age", "").strip()
    if age.isdigit() and len(age) <= 12:
        max_age -= float(age)
    return max(0.0, min(max_age, MAX_CARD_AGE))


def _validator(value: str | None) -> str | None:
    """A validator worth sending back: short, printable ASCII, no line breaks."""
    if value is None or not 0 < len(value) <= _MAX_VALIDATOR:
        return None
    if not value.isascii() or not value.isprintable():
        return None
    return value


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return ()


def _unreadable(card_url: str, what: str, status: int | None = None) -> DirectoryError:
    said, cut = server_text(what, 300)
    return DirectoryError(
        f"directory: could not read the agent card {shown_url(card_url)}: "
        f"{said}{'...' if cut else ''}; check the URL and that the agent is up",
        status_code=status,
    )


def _peer_of(card: Any, card_url: str, name: str | None) -> Peer:
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


async def fetch_card(
    http: httpx.AsyncClient, card_url: str, name: str | None, validators: dict[str, str]
) -> tuple[Peer | None, httpx.Headers]:
    """The peer the card at `card_url` describes and the response's headers.

    `validators` are the conditional headers to send; the peer is None when the
    agent answered ``304 Not Modified`` to them. The body is bounded and parsed
    by the A2A SDK's own card parser. Raises `DirectoryError` naming the card.
    """
    try:
        from a2a.client.card_resolver import parse_agent_card
    except ImportError:
        raise DirectoryError(
            f"directory: the agent card {shown_url(card_url)} is an A2A agent's, and the A2A "
            "SDK is not installed; pip install 'coreagent-sdk[a2a]'"
        ) from None
    headers = {"Accept": "application/json", "Accept-Encoding": "identity", **validators}
    try:
        with limits(MAX_CARD_BYTES, MAX_CARD_BYTES, "agent card"):
            response = await http.get(card_url, headers=headers)
        if response.status_code == 304 and validators:
            return None, response.headers
        if response.status_code != 200:
            raise _unreadable(
                card_url,
                f"HTTP {response.status_code} {response.reason_phrase}",
                response.status_code,
            )
        card = parse_agent_card(response.json())
    except CallPeerError:
        raise
    except httpx.RequestError as exc:
        raise _unreadable(card_url, f"{type(exc).__name__}: {exc}") from None
    except Exception as exc:  # our bounds (ProtocolError), JSON, the SDK's parser, protobuf's
        said, cut = server_text(str(exc), 300)
        raise DirectoryError(
            f"directory: could not read the agent card {shown_url(card_url)} "
            f"({type(exc).__name__}: {said}{'...' if cut else ''}); is it an A2A agent?"
        ) from None
    return _peer_of(card, card_url, name), response.headers


class _Kept:
    __slots__ = ("fresh_until", "peer", "read_at", "validators")

    def __init__(
        self, peer: Peer, validators: dict[str, str], read_at: float, fresh_until: float
    ) -> None:
        self.peer = peer
        self.validators = validators
        self.read_at = read_at
        self.fresh_until = fresh_until


class CardCache:
    """Cards by (URL, name), kept as their responses allow (or for ``max_age`` seconds).

    ``max_age`` None follows each response's caching headers (module doc);
    a number reuses every card that long whatever its headers say, except
    ``no-store`` (0: revalidate on every lookup). Times are read on ``clock``.
    """

    def __init__(self, clock: Clock, max_age: float | None = None) -> None:
        self._clock = clock
        self.max_age = max_age
        self._kept: dict[tuple[str, str | None], _Kept] = {}

    async def read(self, http: httpx.AsyncClient, card_url: str, name: str | None) -> Peer:
        """The peer of the card at `card_url`, asked again only once the kept card is stale."""
        key = (card_url, name)
        now = self._clock.now()
        kept = self._kept.get(key)
        if kept is not None and kept.read_at <= now < kept.fresh_until:
            return kept.peer
        peer, headers = await fetch_card(
            http, card_url, name, kept.validators if kept is not None else {}
        )
        seconds = freshness(headers)
        if seconds is None:
            self._kept.pop(key, None)
            if peer is None:  # a 304 that says not to store what it validated: read it whole
                peer, _ = await fetch_card(http, card_url, name, {})
            assert peer is not None  # no validators sent: no 304 to get
            return peer
        if self.max_age is not None:
            seconds = self.max_age
        if peer is None:  # 304: the kept card stands, renewed by the answer's headers
            assert kept is not None
            peer = kept.peer
            validators = kept.validators
        else:
            validators = {}
            etag = _validator(headers.get("etag"))
            modified = _validator(headers.get("last-modified"))
            if etag is not None:
                validators["If-None-Match"] = etag
            elif modified is not None:
                validators["If-Modified-Since"] = modified
        if len(self._kept) >= _MAX_KEPT and key not in self._kept:
            self._kept.clear()
        # Fresh from when it was asked for (RFC 9111's conservative start), not when it came.
        self._kept[key] = _Kept(peer, validators, now, now + seconds)
        return peer
