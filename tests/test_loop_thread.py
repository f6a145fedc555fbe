"""CallPeer inside an app: the sync form from many threads, connection reuse and pool limits."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from coreagent_sdk import CallPeer, HubDirectory, Peer, StaticDirectory, lookup_peer
from coreagent_sdk.errors import PeerTimeoutError
from simulator import Fleet, behaviors
from simulator.behaviors import Turn

from .processes import Stopwatch


@contextlib.contextmanager
def tiny_switch_interval() -> Iterator[None]:
    # Threads switch every microsecond: a race that needs one unlucky switch finds it.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def from_threads(count: int, work: Any) -> list[BaseException]:
    """Run `work(i)` on `count` threads at once; every exception raised, whatever its type."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a sync call never returned"
    return errors


@pytest.mark.slow  # a soak: many threads, a microsecond switch interval
def test_the_sync_form_from_many_threads_never_loses_an_answer() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    tool = fleet.call_peer(timeout=60)
    answers: list[str] = []

    def work(i: int) -> None:
        for j in range(8):
            prompt = f"thread {i} call {j}"
            assert tool(peer="echo", prompt=prompt).response == prompt
            answers.append(prompt)

    with tiny_switch_interval():
        errors = from_threads(32, work)
    tool.close()
    assert errors == []
    assert len(answers) == 32 * 8


class CountingApp:
    """An ASGI wrapper recording each HTTP request's client address: one per connection."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.clients: set[tuple[str, int]] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.clients.add(tuple(scope["client"]))
        await self.app(scope, receive, send)


@contextlib.contextmanager
def served_in_a_thread(app: Any) -> Iterator[str]:
    """`app` on a loopback port, served by uvicorn on a thread of its own; yields its URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "the loopback server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_sync_calls_reuse_their_connections_between_calls() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    counting = CountingApp(fleet.daemons["echo"].app)
    with served_in_a_thread(counting) as url:
        tool = CallPeer(StaticDirectory([Peer("echo", url)]), timeout=10)
        for i in range(10):
            assert tool(peer="echo", prompt=f"call {i}").response == f"call {i}"
        tool.close()
    # An event stream left mid-body cannot go back to the pool, so each call opens one for
    # its stream; its requests ride on kept connections. A new pair per call would be 20.
    assert 11 <= len(counting.clients) <= 12


def test_closing_the_tool_stops_its_loop_thread_and_a_later_call_starts_another() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    tool = fleet.call_peer(timeout=10)
    before = set(threading.enumerate())
    assert tool(peer="echo", prompt="one").response == "one"
    # The peer's host opens its session store (a worker thread of the fleet's) on the
    # first request, which this call makes: only the tool's own threads are counted.
    started = [
        t
        for t in threading.enumerate()
        if t not in before and not t.name.startswith("coreagent-host-store")
    ]
    assert [t.name for t in started] == ["coreagent-call_peer"]
    tool.close()
    assert not started[0].is_alive()
    assert tool(peer="echo", prompt="two").response == "two"
    tool.close()


def test_a_sync_call_carries_the_callers_context_variables() -> None:
    import contextvars

    seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")
    fleet = Fleet()

    async def reads(turn: Turn) -> str:
        return "n/a"

    fleet.add_peer("echo", behaviors.custom(reads))
    answers: list[str] = []

    def hook(event: Any) -> None:
        if event.kind == "finished":
            answers.append(seen.get())

    tool = fleet.call_peer(timeout=10, on_event=hook)
    seen.set("from the caller")
    tool(peer="echo", prompt="hi")
    tool.close()
    assert answers == ["from the caller"]


# --- pool limits ---------------------------------------------------------------------


def peak_tracker() -> tuple[Any, list[int]]:
    """A behaviour that records the peak of turns running at once on the peer."""
    state = {"now": 0}
    peak = [0]

    async def run(turn: Turn) -> str:
        state["now"] += 1
        peak[0] = max(peak[0], state["now"])
        try:
            await asyncio.sleep(0.05)
        finally:
            state["now"] -= 1
        return "done"

    return behaviors.custom(run), peak


async def test_max_connections_admits_half_as_many_calls_at_once_and_all_finish() -> None:
    fleet = Fleet()
    behaviour, peak = peak_tracker()
    fleet.add_peer("worker", behaviour)
    tool = fleet.call_peer(timeout=30, max_connections=4)
    results = await asyncio.gather(*(tool.acall(peer="worker", prompt="go") for _ in range(10)))
    await fleet.aclose()
    assert [r.response for r in results] == ["done"] * 10
    assert peak[0] == 2  # at the limit: two calls of two connections each, never three


async def test_the_default_pool_runs_many_calls_at_once() -> None:
    fleet = Fleet()
    behaviour, peak = peak_tracker()
    fleet.add_peer("worker", behaviour)
    tool = fleet.call_peer(timeout=30)
    await asyncio.gather(*(tool.acall(peer="worker", prompt="go") for _ in range(60)))
    await fleet.aclose()
    assert peak[0] == 50  # DEFAULT_MAX_CONNECTIONS (100) // 2


async def test_waiting_for_a_connection_counts_against_the_calls_deadline() -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(turn: Turn) -> str:
        started.set()
        if turn.prompt == "one":
            await release.wait()  # holds the tool's two connections until the test says
            return "one"
        await asyncio.Event().wait()  # the second call's turn never ends: it meets its deadline
        return "never"

    fleet = Fleet()
    fleet.add_peer("slow", behaviors.custom(hold))
    tool = fleet.call_peer(timeout=0.8, max_connections=2)
    first = asyncio.ensure_future(tool.acall(peer="slow", prompt="one"))
    await started.wait()  # the first call holds both connections
    started.clear()
    begun = time.perf_counter()
    watch = Stopwatch()  # less this thread's waits for a CPU: the fleet runs on this loop
    second = asyncio.ensure_future(tool.acall(peer="slow", prompt="two"))
    await asyncio.sleep(0.3)  # the second call waits 0.3 s of its 0.8 s for a connection
    release.set()
    assert (await first).response == "one"  # ended 0.3 s (and its setup) into its 0.8 s
    with pytest.raises(PeerTimeoutError, match=r"did not finish within 0\.8 s") as info:
        await second
    took, own = time.perf_counter() - begun, watch.seconds()
    await fleet.aclose()
    assert started.is_set()  # the second call's prompt reached the peer after the wait
    # Not before its deadline; and at it, not 0.3 s later (the wait counted), load aside.
    assert took >= 0.79 and own < 1.0
    assert info.value.retry_safe is False  # its prompt went out after the wait


class FirstLookupSlow:
    """A directory whose first lookup takes `delay`: that call's deadline starts first."""

    def __init__(self, inner: Any, delay: float) -> None:
        self.inner = inner
        self.delay = delay
        self.lookups = 0

    async def peers(self) -> Any:
        return await self.inner.peers()

    async def lookup(self, name: str) -> Any:
        self.lookups += 1
        if self.lookups == 1:
            await asyncio.sleep(self.delay)
        return await lookup_peer(self.inner, name)


async def test_a_call_that_never_gets_a_connection_says_so_and_that_nothing_was_sent() -> None:
    release = asyncio.Event()

    async def hold(turn: Turn) -> str:
        await release.wait()
        return "released"

    fleet = Fleet()
    fleet.add_peer("holder", behaviors.custom(hold))
    directory = FirstLookupSlow(fleet.directory(), delay=0.2)
    tool = fleet.call_peer(timeout=0.5, max_connections=3, directory=directory)
    # The first call looks up for 0.2 s; the second, started after it, takes the only
    # slot meanwhile and keeps it past the first call's deadline.
    first = asyncio.ensure_future(tool.acall(peer="holder", prompt="wait for it"))
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(tool.acall(peer="holder", prompt="hold the pool"))
    with pytest.raises(PeerTimeoutError, match=r"max_connections=3: 1 calls at once") as info:
        await first
    assert info.value.retry_safe is True
    release.set()
    assert (await second).response == "released"
    await fleet.aclose()


@pytest.mark.parametrize("bad", [1, 0, -3, True, 2.5, "4"])
def test_max_connections_under_two_or_not_an_int_is_refused_naming_the_default(bad) -> None:
    with pytest.raises(ValueError, match=r"max_connections must be an int >= 2 .* default is 100"):
        CallPeer(StaticDirectory([]), max_connections=bad)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_a_hub_directory_refuses_a_pool_limit_that_is_not_a_positive_int(bad) -> None:
    with pytest.raises(
        ValueError, match=r"max_connections must be a positive int, got .*default is 10"
    ):
        HubDirectory("http://127.0.0.1:9", max_connections=bad)


class RotatingEnviron(dict):  # type: ignore[type-arg]
    """An environ whose token changes on every read: no two lookups can share a request."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, key: Any, default: Any = None) -> Any:
        self.reads += 1
        return f"token-{self.reads}"


def test_a_hub_directory_holds_at_most_its_pool_limit_of_connections_to_the_hub() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    counting = CountingApp(fleet.daemons["hub"].app)
    with served_in_a_thread(counting) as url:

        async def lookups(limit: int) -> None:
            directory = HubDirectory(
                url, max_connections=limit, token_env="HUB_TOKEN", environ=RotatingEnviron()
            )
            rosters = await asyncio.gather(*(directory.peers() for _ in range(6)))
            await directory.aclose()
            assert [[p.name for p in r] for r in rosters] == [["echo"]] * 6

        asyncio.run(lookups(1))
        one = set(counting.clients)
        counting.clients.clear()
        asyncio.run(lookups(3))
    assert len(one) == 1  # six lookups at once, one after the other on one connection
    assert len(counting.clients) == 3


async def test_a_turn_a_sync_call_left_running_ends_when_the_tool_closes() -> None:
    ended: list[str] = []

    async def hang(turn: Turn) -> str:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.1)  # a turn that takes a moment to wind down
            ended.append("ended")
        return "never"

    fleet = Fleet()
    fleet.add_peer("stuck", behaviors.custom(hang))
    tool = fleet.call_peer(timeout=0.2)
    with pytest.raises(PeerTimeoutError):
        await asyncio.to_thread(tool, "stuck", "work")
    # The peer's turn runs on, on the tool's loop thread, as a real peer's would...
    assert ended == []
    await tool.aclose()
    # ...until the tool closes: by then it has ended there, and the fleet closes cleanly here.
    assert ended == ["ended"]
    await fleet.aclose()


async def test_the_callers_loop_is_marked_waiting_before_the_sync_call_can_begin(
    monkeypatch,
) -> None:
    # A server on the caller's loop refuses a sync call at once only if the loop is marked
    # waiting by the time the call runs. Here the caller is as slow as it can be: marking
    # waits until the call has had its chance to begin.
    from coreagent_sdk import jupyter
    from coreagent_sdk._peer import _loop_thread
    from coreagent_sdk._peer._loop_thread import LoopThread

    began = threading.Event()

    class SlowToMark:
        def add(self, loop: asyncio.AbstractEventLoop) -> None:
            began.wait(timeout=0.5)  # the call begins within this unless it must wait for us
            jupyter._waiting.add(loop)

        def discard(self, loop: asyncio.AbstractEventLoop) -> None:
            jupyter._waiting.discard(loop)

    monkeypatch.setattr(_loop_thread, "_waiting", SlowToMark())
    caller = asyncio.get_running_loop()

    async def call() -> bool:
        seen = jupyter.is_waiting(caller)
        began.set()
        return seen

    thread = LoopThread("marking-order")
    try:
        assert thread.run(call()) is True
        assert not jupyter.is_waiting(caller)  # and unmarked once it returned
    finally:
        thread.close()
