"""Every server the SDK runs starts and stops when told, on no timer of uvicorn's.

uvicorn's own server looks whether it should exit every 0.1 s and sleeps 0.1 s
more in its shutdown: an idle host took 0.11 to 0.19 s to stop. These tests stop
the running loop's clock while a server starts and while it stops, so any wait
on a timer (a poll, a tick, a sleep) never ends: what finishes here waited only
on events. A watchdog thread ends a test that hangs, after 10 s of real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import httpx
import pytest

from coreagent_sdk.host import AgentHost, MultiAgentHost, PromptServer, Turn
from simulator import Fleet, behaviors

T = TypeVar("T")
WATCHDOG = 10.0  # seconds of real time


async def echo(turn: Turn) -> None:
    await turn.say(turn.prompt)


async def without_timers(step: Awaitable[T], watchdog: float = WATCHDOG) -> T:
    """`step`'s result, awaited with the loop's clock stopped (failing after `watchdog` s).

    Once the watchdog fires, the clock runs again before `step` is cancelled, so what it
    does on its way out (its own timers included) ends as it would anywhere.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(step)
    now = loop.time()
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        with contextlib.suppress(AttributeError):
            del loop.time  # type: ignore[method-assign]
        task.cancel()

    timer = threading.Timer(watchdog, loop.call_soon_threadsafe, (expire,))
    loop.time = lambda: now  # type: ignore[method-assign]
    timer.start()
    try:
        with contextlib.suppress(asyncio.CancelledError):  # (raised again below if not ours)
            result = await task
    finally:
        timer.cancel()
        with contextlib.suppress(AttributeError):
            del loop.time  # type: ignore[method-assign]
    # However it ended (a step may swallow the cancel on its way out), a fired watchdog fails.
    if expired:
        pytest.fail(f"it waited on a timer: it did not end in {watchdog:g} s")
    if task.cancelled():
        raise asyncio.CancelledError
    return result


def in_background(host: AgentHost | MultiAgentHost) -> tuple[asyncio.Task[None], Any]:
    """`host` serving on a free port: (its task, a future of what on_ready was given)."""
    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(
        host.serve(on_ready=ready.set_result, handle_signals=False, grace=0)
    )
    task.add_done_callback(lambda _: ready.done() or ready.set_exception(RuntimeError("ended")))
    return task, ready


@contextlib.asynccontextmanager
async def raw_connection_to(
    host: AgentHost,
) -> AsyncIterator[tuple[asyncio.Task[None], asyncio.StreamReader, asyncio.StreamWriter]]:
    """`host` served, and a raw connection to it: (its serve task, reader, writer)."""
    task, ready = in_background(host)
    url = await asyncio.wait_for(ready, 10)
    reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
    try:
        yield task, reader, writer
    finally:
        writer.close()
        host.stop()
        await asyncio.wait_for(task, 10)


async def test_the_clock_stop_catches_a_wait_on_a_timer() -> None:
    # The harness itself: a 0.1 s sleep, uvicorn's tick, never ends with the clock stopped.
    with pytest.raises(pytest.fail.Exception, match="waited on a timer"):
        await without_timers(asyncio.sleep(0.1), watchdog=0.3)


async def test_an_agent_host_starts_and_an_idle_one_stops_with_the_loops_clock_stopped() -> None:
    host = AgentHost("alpha", behavior=echo)
    task, ready = in_background(host)
    url = await without_timers(ready)
    assert url.startswith("http://127.0.0.1:")
    host.stop()
    await without_timers(task)
    with pytest.raises(httpx.ConnectError):  # it listens no more
        async with httpx.AsyncClient() as client:
            await client.get(url + "/sessions")


async def test_a_host_that_answered_a_request_stops_with_the_loops_clock_stopped() -> None:
    # The client's connection closed before the stop: the shutdown has none to wait for.
    host = AgentHost("alpha", behavior=echo)
    task, ready = in_background(host)
    url = await asyncio.wait_for(ready, 10)
    async with httpx.AsyncClient() as client:
        assert (await client.get(url + "/sessions")).status_code == 200
    host.stop()
    await without_timers(task)


async def test_a_host_stops_at_once_and_closes_a_connection_a_client_keeps_alive() -> None:
    host = AgentHost("alpha", behavior=echo)
    async with raw_connection_to(host) as (task, reader, writer):
        writer.write(b"GET /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" not in head.lower()
        host.stop()
        await asyncio.wait_for(task, 10)
        # Closed by the host as it stopped: an idle connection is not waited for (nor left open).
        rest = await asyncio.wait_for(reader.read(), 10)
        assert b"HTTP/1.1" not in rest


async def test_a_multi_agent_host_starts_and_stops_with_the_loops_clock_stopped() -> None:
    host = MultiAgentHost()
    host.add("alpha", behavior=echo)
    host.add("beta", behavior=echo)
    task, ready = in_background(host)
    urls = await without_timers(ready)
    assert sorted(urls) == ["alpha", "beta"]
    host.stop()
    await without_timers(task)


async def test_a_served_fleet_starts_and_stops_its_servers_with_the_loops_clock_stopped() -> None:
    fleet = Fleet()
    try:
        for name in ("alpha", "beta", "gamma"):
            fleet.add_peer(name, behavior=behaviors.echo())
        served = await without_timers(fleet.serve())
        assert sorted(served.urls) == ["alpha", "beta", "gamma", "hub"]
        await without_timers(served.aclose())
        assert served.urls == {}
    finally:
        await fleet.aclose()


async def test_an_mcp_server_over_http_starts_and_stops_with_the_loops_clock_stopped() -> None:
    pytest.importorskip("mcp")
    from coreagent_sdk.mcp import AgentMCPServer

    serving = AgentMCPServer(behaviors.echo(), name="echo").serve_http(port=0)
    url = await without_timers(serving.__aenter__())
    assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
    # (No connection made: one just closed may still be closing at the stop, and the stop
    # rightly watches it close on a timer; tests/test_mcp_serve_http.py calls it.)
    await without_timers(serving.__aexit__(None, None, None))


async def test_a_caller_still_sending_its_body_when_the_host_stops_is_cut_with_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = AgentHost("alpha", behavior=echo)
    async with raw_connection_to(host) as (task, reader, writer):
        head = b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n"
        writer.write(head + b'{"agent": ')  # and nothing more: its request stays running
        await writer.drain()
        await asyncio.sleep(0.05)  # the request has reached the host and waits for its body
        with caplog.at_level(logging.DEBUG):
            host.stop()
            await asyncio.wait_for(task, 10)
            rest = await asyncio.wait_for(reader.read(), 10)  # cut: end of stream
    assert b"HTTP/1.1 201" not in rest  # no session was made of half a body
    assert not any(r.exc_info for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert host.sessions.keys() <= {"default"}


async def ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def test_a_connection_made_as_a_server_stops_is_closed_with_it_not_left_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The connect and the stop land in one pass of the loop, and the accept finishes a pass
    # later. On Python 3.12 and newer (their servers track each connection) a stop that closed
    # the listener first failed that accept and left its transport to the collector: a
    # ResourceWarning, and on 3.13.0 a TypeError from its __del__. 3.10 and 3.11 accept it
    # either way, so there this test guards the close rather than the race.
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = PromptServer(uvicorn.Config(ok, lifespan="off", log_level="warning"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        assert await server.started_within(task, 10)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            with caplog.at_level(logging.DEBUG, logger="asyncio"):
                with socket.create_connection(sock.getsockname(), timeout=10):
                    pass  # connected (the kernel's handshake) and closed, not accepted yet
                server.should_exit = True
                await asyncio.wait_for(task, 10)
                for _ in range(5):
                    await asyncio.sleep(0)
                left = set(server.server_state.connections)  # made after the stop: leaked
                gc.collect()
    finally:
        sock.close()
    assert left == set()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def agent_host(store: Any) -> AgentHost:
    return AgentHost("alpha", behavior=echo, store=store)


def multi_agent_host(store: Any) -> MultiAgentHost:
    host = MultiAgentHost(store=store)
    host.add("alpha", behavior=echo)
    return host


HOSTS = pytest.mark.parametrize("make", [agent_host, multi_agent_host], ids=["agent", "multi"])


@HOSTS
async def test_a_host_told_to_stop_before_its_serve_ran_stops_once_it_has_started(
    make: Any,
) -> None:
    # `task = create_task(host.serve()); host.stop()`: the stop came before serve() ran a line.
    host = make(None)
    task, ready = in_background(host)
    host.stop()
    await without_timers(task)
    assert ready.done()  # it did start: the stop was not an error
    assert ready.exception() is None


@HOSTS
async def test_a_host_told_to_stop_while_its_store_opens_stops_once_it_has_started(
    make: Any, tmp_path: Any
) -> None:
    host = make(tmp_path / "sessions.sqlite3")
    task, ready = in_background(host)
    await asyncio.sleep(0)  # serve() runs up to its first wait: the store opening
    assert not ready.done()
    host.stop()
    await without_timers(task)
    assert ready.done() and ready.exception() is None


@HOSTS
async def test_a_host_stopped_from_another_thread_stops_at_once(make: Any) -> None:
    # asyncio's debug mode refuses a loop's call made from another thread (a stop that only
    # set an asyncio.Event from there raised, and the host served on); off it, such a call
    # waited for the loop's next timer to wake it, up to the server's 1 s tick.
    loop = asyncio.get_running_loop()
    debug = loop.get_debug()
    loop.set_debug(True)
    host = make(None)
    task, ready = in_background(host)
    try:
        await asyncio.wait_for(ready, 10)
        raised: list[BaseException] = []

        def stop() -> None:
            try:
                host.stop()
            except BaseException as exc:  # reported below, not lost in the thread
                raised.append(exc)

        stopper = threading.Thread(target=stop)
        stopper.start()
        stopper.join(10)
        assert raised == []
        await without_timers(task)
    finally:
        loop.set_debug(debug)
        if not task.done():  # the stop was lost: nothing is left serving after the test
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_an_mcp_server_over_http_stops_in_its_bound_while_a_caller_still_sends_its_body() -> (
    None
):
    # The bridge's server had no graceful bound (uvicorn's default: none), so a caller that
    # never finished its body held the stop for ever.
    pytest.importorskip("mcp")
    from coreagent_sdk.mcp import AgentMCPServer

    serving = AgentMCPServer(behaviors.echo(), name="echo").serve_http(port=0)
    url = await asyncio.wait_for(serving.__aenter__(), 10)
    try:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{".encode()
        )
        await writer.drain()
        await asyncio.sleep(0.05)  # the request has reached the server and waits for its body
    finally:
        await asyncio.wait_for(serving.__aexit__(None, None, None), 10)
    rest = await asyncio.wait_for(reader.read(), 10)  # cut: end of stream
    writer.close()
    assert b"HTTP/1.1 2" not in rest
