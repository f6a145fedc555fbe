"""Subscribers that stop reading, and turns that publish faster than anyone reads.

A daemon gives each event-stream subscriber a channel of 256 frames and drops
the subscriber when a frame finds it full (core-agent `pkg/attach/broadcaster.go`
`broadcaster.send`). The host does the same, counting only frames published
while the subscriber's write is blocked: a turn that publishes a burst before
the writer has run must not cut a reader that keeps up. Every loop here is
bounded in count and time and stops by itself.
"""

from __future__ import annotations

import asyncio
import gc
import re
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from coreagent_sdk import ASGITransport, CallPeer, Peer, StaticDirectory
from coreagent_sdk.host import SUBSCRIBER_QUEUE_LIMIT, AgentHost, Turn
from tests.processes import stored_frames

JSON = {"Content-Type": "application/json"}
FRAME = re.compile(rb"event: ([a-z-]+)\ndata: ([^\n]+)\n\n")


async def echo(turn: Turn) -> None:
    await turn.say(turn.prompt)


class StalledReader:
    """An event-stream client that stops reading at once: the host's first write to it
    never completes (a full socket) and it never hangs up, until `release()`."""

    def __init__(self, host: AgentHost, path: str) -> None:
        self.host = host
        self.path = path
        self.opened = asyncio.Event()
        self._go = asyncio.Event()
        self.body = b""
        self.ended = False

    async def run(self) -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "headers": [(b"host", b"127.0.0.1")],
            "scheme": "http",
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": b"",
            "server": ("127.0.0.1", 80),
            "client": ("127.0.0.1", 123),
            "root_path": "",
            "state": {},
        }

        async def receive() -> dict[str, Any]:
            await self._go.wait()  # never hangs up while stalled
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.opened.set()
                return
            await self._go.wait()  # the write blocks until the client reads again
            self.body += message.get("body", b"")
            self.ended = not message.get("more_body", False)

        await self.host.app(scope, receive, send)

    def release(self) -> None:
        self._go.set()


async def _turn_over(host: AgentHost) -> None:
    for _ in range(1500):  # bounded: until the turn is over (30 s)
        await asyncio.sleep(0.02)
        if not host.busy():
            return
    raise AssertionError("the turn did not end")


async def test_a_subscriber_that_stops_reading_is_dropped_with_the_daemons_256_frames() -> None:
    """Pins core-agent `pkg/attach/broadcaster.go` `broadcaster.send`: a subscriber's
    channel holds `subscriberBufferSize` (256) frames; a frame that finds it full drops
    the subscriber, which still gets what was queued, then its stream ends."""
    assert SUBSCRIBER_QUEUE_LIMIT == 256

    async def chatty(turn: Turn) -> None:
        for i in range(SUBSCRIBER_QUEUE_LIMIT + 100):
            await turn.chunk(f"c{i};")
        await turn.say("done")

    host = AgentHost("chatty", behavior=chatty, session_rate_limit=None)
    async with httpx.AsyncClient(transport=ASGITransport(host.app), base_url="http://h") as http:
        created = (await http.post("/sessions", headers=JSON)).json()
        path = f"/sessions/{created['app']}/{created['sessionID']}"
        reader = StalledReader(host, f"{path}/events")
        task = asyncio.create_task(reader.run())
        await asyncio.wait_for(reader.opened.wait(), 10)
        await http.post(f"{path}/inject", headers=JSON, json={"message": "go"})
        await _turn_over(host)
        reader.release()
        await asyncio.wait_for(task, 10)
    frames = FRAME.findall(reader.body)
    opening = [kind for kind, _ in frames[:2]]
    live = frames[2:]
    assert reader.ended, "the dropped subscriber's stream ends cleanly"
    assert opening == [b"capabilities", b"status-update"], opening
    assert len(live) == SUBSCRIBER_QUEUE_LIMIT, len(live)
    chunks = [int(n) for n in re.findall(rb'"c([0-9]+);"', reader.body)]
    assert chunks == list(range(len(chunks))), "the frames queued arrive whole, in order"
    assert 0 < len(chunks) < SUBSCRIBER_QUEUE_LIMIT  # the rest of the 256: inbox, status
    assert b'"text":"done"' not in reader.body, reader.body[reader.body.find(b"done") - 150 :][:300]
    host.stop()


async def test_a_thousand_stalled_subscribers_hold_bounded_memory_and_others_are_answered() -> None:
    """Issue 18.8: a thousand subscribers that stop reading. Each is dropped at the
    daemon's buffer, so what they hold is counted by SUBSCRIBER_QUEUE_LIMIT, not by what
    the session goes on publishing."""
    subscribers = 1_000
    published = 3 * SUBSCRIBER_QUEUE_LIMIT  # a subscriber kept past the limit holds 3x

    async def chatty(turn: Turn) -> None:
        for i in range(published):
            await turn.chunk(f"{i};")
        await turn.say("done")

    host = AgentHost("chatty", behavior=chatty, session_rate_limit=None)
    transport = ASGITransport(host.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://h") as http:
        created = (await http.post("/sessions", headers=JSON)).json()
        path = f"/sessions/{created['app']}/{created['sessionID']}"
        readers = [StalledReader(host, f"{path}/events") for _ in range(subscribers)]
        tasks = [asyncio.create_task(r.run()) for r in readers]
        await asyncio.wait_for(asyncio.gather(*(r.opened.wait() for r in readers)), 60)
        session = host.sessions[created["sessionID"]]
        assert len(session.subscribers) == subscribers

        tracemalloc.start()  # from here: what publishing to stalled subscribers costs
        try:
            # One subscriber's share of the bound: a queue holding the limit's frames
            # (measured, so the bound follows the limit and this Python's sizes).
            # Over 64 queues: a deque reuses up to 16 freed blocks unseen by tracemalloc
            # (CPython's free list), which would make one probe look nearly free.
            probes: list[asyncio.Queue[bytes]] = [asyncio.Queue() for _ in range(64)]
            base = tracemalloc.get_traced_memory()[0]  # the queues exist, as subscribers' do
            for probe in probes:
                for _ in range(SUBSCRIBER_QUEUE_LIMIT + 1):
                    probe.put_nowait(b"")
            per_queue = (tracemalloc.get_traced_memory()[0] - base) / len(probes)
            del probes, probe
            gc.collect()
            attached = tracemalloc.get_traced_memory()[0]
            await http.post(f"{path}/inject", headers=JSON, json={"message": "go"})
            await _turn_over(host)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - attached
        finally:
            tracemalloc.stop()
        logged = sum(await stored_frames(host, session.session_id))
        # Each holds at most the limit's frames; the frames themselves are made once and
        # shared (at most all the turn's frames, in the store); a quarter more of each, and
        # 256 KiB for the turn's own bookkeeping. Kept past the limit, each would hold 3x.
        bound = subscribers * per_queue * 1.25 + logged * 1.25 + 2**18
        assert grown <= bound, f"{grown:,} B grown, bound {bound:,.0f} B, frames {logged:,} B"
        assert not session.subscribers, "every stalled subscriber was dropped"

        # Meanwhile the host answers another caller, start to end.
        host.behavior = echo
        async with CallPeer(
            StaticDirectory([Peer("chatty", "http://h")]), transport=transport, timeout=10
        ) as tool:
            reply = await tool.acall(peer="chatty", prompt="still there?")
        assert reply.response == "still there?"
        for reader in readers:
            reader.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    host.stop()


BURST = 3 * SUBSCRIBER_QUEUE_LIMIT  # frames one turn publishes before any writer runs


async def fan_out(turn: Turn) -> None:
    # gather starts every chunk in one loop turn: all are published before the
    # subscriber's writer gets to run once, as parallel tool results can be.
    await asyncio.gather(*(turn.chunk(f"c{i};" + "x" * 200) for i in range(BURST)))
    await turn.say("done")


@pytest.fixture
async def served_fan_out() -> AsyncIterator[str]:
    host = AgentHost("fan", behavior=fan_out, session_rate_limit=None)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(host.serve(on_ready=ready.set_result, handle_signals=False))
    yield await asyncio.wait_for(ready, 10)
    host.stop()
    await asyncio.wait_for(task, 10)


async def test_a_burst_published_before_the_writer_runs_reaches_an_in_process_caller_whole() -> (
    None
):
    host = AgentHost("fan", behavior=fan_out, session_rate_limit=None)
    transport = ASGITransport(host.app)
    async with CallPeer(
        StaticDirectory([Peer("fan", "http://fan.test")]), transport=transport, timeout=20
    ) as tool:
        reply = await tool.acall(peer="fan", prompt="go")
    assert reply.response == "done", reply
    host.stop()


PIECE = 8 * 1024  # notebook 02's long answer: narration in pieces of 8 KiB, each its own event
LONG = 10 * 1024 * 1024


async def long_answer(turn: Turn) -> None:
    for _ in range(LONG // PIECE):
        await turn.narrate("x" * PIECE, tool="write")
    await turn.say("done.")


async def test_a_long_answer_in_many_events_reaches_an_in_process_caller_that_keeps_reading() -> (
    None
):
    # A turn writes its events a burst at a time, committed and sent together; while the
    # caller's writer waits on the transport (256 KiB unread), a burst counted whole against
    # the 256-frame limit and cut a caller that was reading all along (notebook 02's 10 MB
    # answer: StreamEndedError).
    host = AgentHost("writer", behavior=long_answer, session_rate_limit=None)
    async with CallPeer(
        StaticDirectory([Peer("writer", "http://writer.test")]),
        transport=ASGITransport(host.app),
        timeout=60,
        max_response_bytes=2 * LONG,
    ) as tool:
        reply = await tool.acall(peer="writer", prompt="go")
    assert len(reply.response) > LONG and reply.response.endswith("done."), len(reply.response)
    assert not reply.truncated
    host.stop()


async def test_a_burst_published_before_the_writer_runs_reaches_a_loopback_caller_whole(
    served_fan_out: str,
) -> None:
    async with CallPeer(StaticDirectory([Peer("fan", served_fan_out)]), timeout=20) as tool:
        reply = await tool.acall(peer="fan", prompt="go")
    assert reply.response == "done", reply


async def test_an_in_process_reader_that_stops_reading_is_dropped_and_its_stream_ends() -> None:
    """Over the SDK's own transport, which pushes back as a socket does: the host's
    write blocks once the reader has left 256 KiB unread, 256 more frames queue, and
    the next one drops the reader (`broadcaster.send`). It then reads what was
    queued, in order, and a clean end; never the turn's answer."""
    frame_text = 2_000  # bytes of text per chunk: the transport fills after ~128 frames
    published = 3 * SUBSCRIBER_QUEUE_LIMIT

    async def chatty(turn: Turn) -> None:
        for i in range(published):
            await turn.chunk(f"c{i};" + "x" * frame_text)
        await turn.say("done")

    host = AgentHost("chatty", behavior=chatty, session_rate_limit=None)
    async with httpx.AsyncClient(transport=ASGITransport(host.app), base_url="http://h") as http:
        created = (await http.post("/sessions", headers=JSON)).json()
        path = f"/sessions/{created['app']}/{created['sessionID']}"
        session = host.sessions[created["sessionID"]]
        async with http.stream("GET", f"{path}/events") as stream:
            chunks = stream.aiter_raw()
            opening = await asyncio.wait_for(chunks.__anext__(), 10)  # then it stops reading
            await http.post(f"{path}/inject", headers=JSON, json={"message": "go"})
            for _ in range(1500):  # bounded: until the turn is over (30 s)
                await asyncio.sleep(0.02)
                if not host.busy():
                    break
            assert not host.busy(), "the turn went on while a reader stalled"
            assert not session.subscribers, "the stalled reader was dropped"
            rest = b"".join([chunk async for chunk in chunks])  # ends: no hang
    body = opening + rest
    numbers = [int(n) for n in re.findall(rb'"c([0-9]+);', body)]
    assert numbers == list(range(len(numbers))), "what was queued arrives whole, in order"
    unread_frames = 256 * 1024 // frame_text + 2  # what the transport holds, and one taken
    assert SUBSCRIBER_QUEUE_LIMIT - 8 <= len(numbers) <= SUBSCRIBER_QUEUE_LIMIT + unread_frames
    assert b'"text":"done"' not in body
    host.stop()
