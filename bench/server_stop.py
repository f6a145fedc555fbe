"""How long a served host takes to start and to stop, against uvicorn's own server.

Three servers, each started and stopped ``--rounds`` times in turn on 127.0.0.1 in
this process, a kept-alive connection answered once before each stop (so the stop
has a connection to close, as a real one does):

- **uvicorn**: the baseline, `uvicorn.Server` serving the host's app as it comes,
  which paces itself with sleeps (a 0.1 s main-loop tick, a 0.1 s sleep in its
  shutdown, connections looked at every 0.1 s);
- **PromptServer**: the server every server of the SDK runs
  (`coreagent_sdk.host.PromptServer`), on the same app;
- **AgentHost.serve()**: the whole of a host's serve: its store opened, the socket,
  the server, `stop()` to `serve()` returning.

It prints the median and the worst start (the task made to the socket answering:
the server's own event, not a poll) and stop (`should_exit` or `stop()` to the task
done), and each one's ratio to uvicorn's in the same run.

    python bench/server_stop.py [--rounds 20]

Every loop is bounded by a count and a time; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import time
from collections.abc import Awaitable, Callable

import uvicorn

from coreagent_sdk.host import AgentHost, PromptServer, Turn

Measure = Callable[[], Awaitable[tuple[float, float]]]


async def echo(turn: Turn) -> None:
    await turn.say(turn.prompt)


async def one_request(port: int) -> asyncio.StreamWriter:
    """One answered GET on a connection left open (kept alive) for the stop to close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200"), head[:40]
    return writer


def bare(server_class: type[uvicorn.Server]) -> Measure:
    async def measure() -> tuple[float, float]:
        host = AgentHost("alpha", behavior=echo)
        await host.open()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(host.app, lifespan="off", log_level="warning")
        server = server_class(config)
        began = time.perf_counter()
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        for _ in range(10_000):  # at most 10 s: a short poll, so the start is not its tick
            if server.started or task.done():
                break
            await asyncio.sleep(0.001)
        started = time.perf_counter() - began
        kept = await one_request(sock.getsockname()[1])
        began = time.perf_counter()
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        stopped = time.perf_counter() - began
        kept.close()
        sock.close()
        await host.aclose()
        return started, stopped

    return measure


async def served() -> tuple[float, float]:
    host = AgentHost("alpha", behavior=echo)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    began = time.perf_counter()
    task = asyncio.ensure_future(
        host.serve(on_ready=ready.set_result, handle_signals=False, grace=0, tune_gc=False)
    )
    url = await asyncio.wait_for(ready, 10)
    started = time.perf_counter() - began
    kept = await one_request(int(url.rsplit(":", 1)[1]))
    began = time.perf_counter()
    host.stop()
    await asyncio.wait_for(task, 10)
    stopped = time.perf_counter() - began
    kept.close()
    return started, stopped


async def main(rounds: int) -> None:
    contenders: dict[str, Measure] = {
        "uvicorn": bare(uvicorn.Server),
        "PromptServer": bare(PromptServer),
        "AgentHost.serve()": served,
    }
    starts: dict[str, list[float]] = {name: [] for name in contenders}
    stops: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):  # in turn, so each meets the machine as the others do
        for name, measure in contenders.items():
            started, stopped = await measure()
            starts[name].append(started)
            stops[name].append(stopped)
    base_start = statistics.median(starts["uvicorn"])
    base_stop = statistics.median(stops["uvicorn"])
    print(f"{rounds} rounds; medians (worst), ms; ratio of the median to uvicorn's")
    print(f"{'server':<20} {'start':>16} {'ratio':>6} {'stop':>16} {'ratio':>6}")
    for name in contenders:
        start, stop = statistics.median(starts[name]), statistics.median(stops[name])
        print(
            f"{name:<20} {start * 1e3:>7.1f} ({max(starts[name]) * 1e3:>6.1f}) "
            f"{start / base_start:>6.2f} {stop * 1e3:>7.1f} ({max(stops[name]) * 1e3:>6.1f}) "
            f"{stop / base_stop:>6.3f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    asyncio.run(main(parser.parse_args().rounds))
