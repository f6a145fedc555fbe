"""An A2A agent's card is reused as its own caching headers allow, and asked again after.

The agent is the A2A SDK's own server (`tests.a2a_sdk_server.app`: its card route
sends an ``ETag`` always, ``Cache-Control`` when told, and answers a matching
``If-None-Match`` with 304), reached in process; every request is recorded, so
what a lookup asked for is counted exactly. Time is a `FakeClock`.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytest.importorskip("a2a")

from coreagent_sdk import A2ADirectory, ASGITransport, CallPeer, FakeClock
from coreagent_sdk.errors import InvalidEndpointError

from .a2a_sdk_server import app, card_of

URL = "http://agent.sim/"
DEFAULT_AGE = 5.0  # the documented reuse of a card whose response says nothing of caching


class Recorded(httpx.AsyncBaseTransport):
    """`inner`, with every request kept; `headers` are added to the card's answers."""

    def __init__(self, inner: httpx.AsyncBaseTransport, headers: dict[str, str] | None = None):
        self.inner = inner
        self.headers = headers or {}
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = await self.inner.handle_async_request(request)
        if request.url.path.endswith("agent-card.json") and self.headers:
            response.headers.update(self.headers)
        return response

    def cards(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path.endswith("agent-card.json")]

    def messages(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == "POST"]


def agent(cache_control: str | None = None, card_modifier: Any = None, **headers: str) -> Recorded:
    served = app(URL, cache_control=cache_control, card_modifier=card_modifier)
    return Recorded(ASGITransport(served), headers)


async def calls(transport: Recorded, clock: FakeClock, steps: list[float], **kw: Any) -> None:
    """One call per step, the clock moved by the step's seconds before it."""
    directory = A2ADirectory([URL], transport=transport, clock=clock, **kw)
    tool = CallPeer(directory, transport=transport)
    try:
        for seconds in steps:
            clock.advance(seconds)
            result = await tool.acall(peer="sdk-agent", prompt="hi")
            assert result.response == "HI"
    finally:
        await tool.aclose()
        await directory.aclose()


async def test_a_card_that_says_nothing_of_caching_is_reused_for_the_default_then_revalidated() -> (
    None
):
    transport, clock = agent(), FakeClock()

    await calls(transport, clock, [0, 1, DEFAULT_AGE - 1.01, 0.01, 1])

    cards = transport.cards()
    assert len(cards) == 2 and len(transport.messages()) == 5  # one read, one revalidation
    assert "if-none-match" not in cards[0].headers
    assert cards[1].headers["if-none-match"].startswith('W/"')  # the SDK's own ETag, sent back


async def test_a_card_is_reused_for_its_max_age_and_no_longer() -> None:
    transport, clock = agent("public, max-age=60"), FakeClock()

    await calls(transport, clock, [0, 59.9, 0.1])

    assert len(transport.cards()) == 2


async def test_a_huge_max_age_stops_at_the_ceiling_of_five_minutes() -> None:
    transport, clock = agent("max-age=999999999999"), FakeClock()

    await calls(transport, clock, [0, 299.9, 0.1])

    assert len(transport.cards()) == 2


async def test_the_age_a_cache_on_the_way_reports_shortens_the_reuse() -> None:
    transport, clock = agent("max-age=60", age="50"), FakeClock()

    await calls(transport, clock, [0, 9.9, 0.1])

    assert len(transport.cards()) == 2


@pytest.mark.parametrize("directive", ["no-cache", "max-age=0", "max-age=-5", "max-age=soon"])
async def test_a_card_to_revalidate_is_asked_on_every_call_and_a_304_reuses_it(
    directive: str,
) -> None:
    transport, clock = agent(directive), FakeClock()

    await calls(transport, clock, [0, 0, 0])

    cards = transport.cards()
    assert len(cards) == 3 and all("if-none-match" in c.headers for c in cards[1:])


async def test_a_no_store_card_is_read_whole_on_every_call() -> None:
    transport, clock = agent("no-store"), FakeClock()

    await calls(transport, clock, [0, 0, 0], max_age=60)  # not even max_age keeps it

    cards = transport.cards()
    assert len(cards) == 3 and not any("if-none-match" in c.headers for c in cards)


async def test_max_age_overrides_the_cards_own_headers_and_zero_revalidates_every_call() -> None:
    transport, clock = agent("max-age=1"), FakeClock()
    await calls(transport, clock, [0, 30, 29], max_age=60)
    assert len(transport.cards()) == 1

    transport, clock = agent("max-age=3600"), FakeClock()
    await calls(transport, clock, [0, 0], max_age=0)
    assert len(transport.cards()) == 2


async def test_a_changed_card_takes_effect_on_the_first_call_after_the_kept_one_is_stale() -> None:
    moved = {"url": URL}

    async def current(card: Any) -> Any:
        return card_of(moved["url"])

    transport, clock = agent(card_modifier=current), FakeClock()
    directory = A2ADirectory([URL], transport=transport, clock=clock)
    tool = CallPeer(directory, transport=transport, allowed_hosts=["agent.sim"])
    await tool.acall(peer="sdk-agent", prompt="hi")
    moved["url"] = "http://elsewhere.sim/"

    await tool.acall(peer="sdk-agent", prompt="hi")  # the kept card: still fresh
    clock.advance(DEFAULT_AGE)
    with pytest.raises(InvalidEndpointError, match=r"elsewhere\.sim"):
        await tool.acall(peer="sdk-agent", prompt="hi")
    with pytest.raises(InvalidEndpointError, match=r"elsewhere\.sim"):
        await tool.acall(peer="sdk-agent", prompt="hi")  # refused again: checked every dial

    assert len(transport.messages()) == 2  # nothing sent to the host the card moved to
    assert not any(r.url.host == "elsewhere.sim" for r in transport.requests)
    await tool.aclose()
    await directory.aclose()


@pytest.mark.parametrize("etag", ['"a"\r\nX-Injected: 1', '"' + "e" * 300 + '"', '"\u00e9"'])
async def test_an_entity_tag_that_is_no_short_printable_token_is_never_sent_back(
    etag: str,
) -> None:
    class Tagged(Recorded):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            response = await super().handle_async_request(request)
            if request.url.path.endswith("agent-card.json"):
                response.headers["etag"] = etag.encode("utf-8").decode("latin-1")
            return response

    transport = Tagged(ASGITransport(app(URL)))
    clock = FakeClock()

    await calls(transport, clock, [0, DEFAULT_AGE])

    cards = transport.cards()
    assert len(cards) == 2 and "if-none-match" not in cards[1].headers


async def test_a_card_read_at_one_loopback_name_may_name_another_but_not_another_port() -> None:
    # In process: the transport answers every host itself and dials none.
    moved = {"url": "http://127.0.0.1:8000/"}

    async def current(card: Any) -> Any:
        return card_of(moved["url"])

    transport = Recorded(ASGITransport(app(URL, card_modifier=current)))
    directory = A2ADirectory(["http://localhost:8000"], transport=transport, max_age=0)
    tool = CallPeer(directory, transport=transport)

    # Named localhost by its user, 127.0.0.1 by its card (the SDK's samples do): one host.
    assert (await tool.acall(peer="sdk-agent", prompt="hi")).response == "HI"
    moved["url"] = "http://127.0.0.1:8001/"
    with pytest.raises(InvalidEndpointError, match=r"another origin, 'http://127\.0\.0\.1:8001'"):
        await tool.acall(peer="sdk-agent", prompt="hi")

    assert [str(r.url) for r in transport.messages()] == ["http://127.0.0.1:8000/"]
    await tool.aclose()
    await directory.aclose()
