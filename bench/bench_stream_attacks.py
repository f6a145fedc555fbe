"""Memory and deadline under stream attacks: what one hostile peer costs a CallPeer call.

Each attack is a raw socket server on 127.0.0.1 (port 0) in this process; each
call runs in a fresh child process, so its peak RSS growth is its own:

    growth = peak RSS (ru_maxrss) after the call - peak RSS just before it

The child first makes one normal delegation (imports, pools, caches warm),
then the measured call. The baselines are measured in the same run: a normal
delegation's own growth, and a peer that never answers (a pure wait to the
deadline). Every call has the same deadline; "past" is how far after it the
call ended (negative: it ended earlier, e.g. refused at once).

Targets: growth at most 8 MiB per call; every call ends within 10% (+0.5 s)
of its deadline.

    python bench/bench_stream_attacks.py [--deadline 2.0] [--only NAME]

Every server loop is bounded: at most `MAX_BYTES` written or `deadline + 10 s`
elapsed per connection, whichever comes first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

MIB = 1024 * 1024
MAX_BYTES = 4 * 1024 * MIB  # per connection: no server loop writes more
SESSION = json.dumps({"app": "core-agent", "user": "u", "sessionID": "s-1", "url": ""}).encode()
INJECTED = json.dumps({"injected": "p", "session": "s-1", "woke": True}).encode()
TURN = (
    b"event: agent\ndata: "
    + json.dumps(
        {
            "seq": 1,
            "event": {
                "Author": "m",
                "Content": {"parts": [{"text": "fine"}]},
                "TurnComplete": True,
            },
        }
    ).encode()
    + b"\n\n"
)
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"

Writer = asyncio.StreamWriter


def answer(status: str, body: bytes, extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nContent-Type: application/json\r\n"
    return (head + extra + "\r\n").encode() + body


def gzip_of(pattern: bytes, mebibytes: int) -> bytes:
    block = pattern * (MIB // len(pattern))
    out = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join(out.compress(block) for _ in range(mebibytes)) + out.flush()


class Attack:
    """One hostile peer: how it answers /events (and, for some, /sessions)."""

    def __init__(
        self,
        name: str,
        what: str,
        events: Callable[[Writer, float], Awaitable[None]] | None = None,
        sessions: Callable[[Writer, float], Awaitable[None]] | None = None,
    ) -> None:
        self.name, self.what, self.events, self.sessions = name, what, events, sessions


async def _pump(writer: Writer, chunks: Any, stop_at: float) -> None:
    """Write chunks until the client goes, MAX_BYTES, or `stop_at` (loop time)."""
    loop = asyncio.get_running_loop()
    sent = 0
    for chunk in chunks:
        if sent >= MAX_BYTES or loop.time() >= stop_at:
            return
        writer.write(chunk)
        sent += len(chunk)
        await writer.drain()


def _forever(chunk: bytes) -> Any:
    while True:
        yield chunk


async def endless_data(writer: Writer, stop_at: float) -> None:
    writer.write(SSE_HEAD + b"\r\nevent: agent\n")
    await _pump(writer, _forever(b"data: " + b"x" * 1017 + b"\n"), stop_at)


async def huge_event(writer: Writer, stop_at: float) -> None:
    writer.write(SSE_HEAD + b'\r\nevent: agent\ndata: {"seq":1,"event":{"Content":{"parts":[\n')
    line = b'data: {"text":"' + b"y" * 1000 + b'"},\n'
    await _pump(writer, (line * 64 for _ in range(100 * MIB // (64 * len(line)))), stop_at)
    writer.write(b'data: {"text":"end"}]},"TurnComplete":true}}\n\n')


def _gzip_stream(pattern: bytes, mebibytes: int) -> Callable[[Writer, float], Awaitable[None]]:
    bomb = gzip_of(pattern, mebibytes)

    async def send(writer: Writer, stop_at: float) -> None:
        writer.write(SSE_HEAD + b"Content-Encoding: gzip\r\n\r\n")
        await _pump(writer, (bomb[i : i + 65536] for i in range(0, len(bomb), 65536)), stop_at)
        await asyncio.sleep(max(0.0, stop_at - asyncio.get_running_loop().time()))

    return send


def _gzip_json(mebibytes: int) -> Callable[[Writer, float], Awaitable[None]]:
    out = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [out.compress(b'{"app":"')] + [out.compress(b"a" * MIB) for _ in range(mebibytes)]
    bomb = b"".join(parts) + out.compress(b'"}') + out.flush()

    async def send(writer: Writer, stop_at: float) -> None:
        head = (
            "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
            f"Content-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n"
        )
        writer.write(head.encode())
        await _pump(writer, (bomb[i : i + 65536] for i in range(0, len(bomb), 65536)), stop_at)

    return send


async def slow_headers(writer: Writer, stop_at: float) -> None:
    await _drip(writer, b"HTTP/1.1 201 Created\r\nX-Slow: " + b"a" * 10_000, stop_at)


async def slow_stream(writer: Writer, stop_at: float) -> None:
    writer.write(SSE_HEAD + b"\r\n")
    await _drip(writer, b":" * 10_000, stop_at)


async def _drip(writer: Writer, data: bytes, stop_at: float) -> None:
    """One byte every 0.2 s (a slowloris), until `stop_at`."""
    loop = asyncio.get_running_loop()
    for byte in data:
        if loop.time() >= stop_at:
            return
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.2)


async def never(writer: Writer, stop_at: float) -> None:
    await asyncio.sleep(max(0.0, stop_at - asyncio.get_running_loop().time()))


async def normal(writer: Writer, stop_at: float) -> None:
    writer.write(SSE_HEAD + b"\r\n" + TURN)
    await writer.drain()
    await asyncio.sleep(max(0.0, stop_at - asyncio.get_running_loop().time()))


def attacks() -> list[Attack]:
    data_line = b"data: x\n"
    frame = b'event: status-update\ndata: {"turn_state":"streaming"}\n\n'
    return [
        Attack("baseline: normal call", "a well-behaved peer answers 'fine'", normal),
        Attack("baseline: never answers", "a peer that accepts and never answers", never),
        Attack("endless data: lines", "one event of endless 1 KiB data: lines", endless_data),
        Attack("one huge event", "one 100 MB agent event in 1 KiB data: lines", huge_event),
        Attack(
            "gzip bomb, stream (lines)",
            "event stream gzipped anyway: 256 MiB of 'data: x' lines",
            _gzip_stream(data_line, 256),
        ),
        Attack(
            "gzip bomb, stream (frames)",
            "event stream gzipped anyway: 256 MiB of valid small frames",
            _gzip_stream(frame, 256),
        ),
        Attack(
            "gzip bomb, stream (zeros)",
            "event stream gzipped anyway: 256 MiB of NUL bytes",
            _gzip_stream(b"\x00", 256),
        ),
        Attack(
            "gzip bomb, JSON",
            "POST /sessions answered with 512 MiB of gzipped JSON",
            sessions=_gzip_json(512),
        ),
        Attack(
            "slowloris, headers",
            "POST /sessions headers, one byte every 0.2 s",
            sessions=slow_headers,
        ),
        Attack("slowloris, stream", "an event stream of one comment byte every 0.2 s", slow_stream),
    ]


async def serve(attack: Attack, deadline: float) -> tuple[asyncio.base_events.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: Writer) -> None:
        stop_at = asyncio.get_running_loop().time() + deadline + 10
        # Cancelled at shutdown: end quietly (asyncio logs a cancelled handler on 3.11).
        with contextlib.suppress(Exception, asyncio.CancelledError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line = head.split(b"\r\n", 1)[0].decode()
                length = 0
                for h in head.split(b"\r\n")[1:]:
                    if h.lower().startswith(b"content-length:"):
                        length = int(h.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                path = line.split(" ")[1]
                if path == "/sessions":
                    if attack.sessions is not None:
                        await attack.sessions(writer, stop_at)
                        return
                    writer.write(answer("201 Created", SESSION))
                elif path.endswith("/inject"):
                    writer.write(answer("200 OK", INJECTED))
                elif path.endswith("/events"):
                    await (attack.events or normal)(writer, stop_at)
                    return
                else:
                    writer.write(answer("404 Not Found", b"{}"))
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def child(url: str, warm_url: str, deadline: float) -> None:
    """Runs in a fresh process: warm up on a normal peer, then one measured call."""
    from coreagent_sdk import CallPeer, Peer, StaticDirectory
    from coreagent_sdk.errors import CoreAgentError

    async def run() -> dict[str, Any]:
        tool = CallPeer(
            StaticDirectory([Peer("warm", warm_url), Peer("attack", url)]), timeout=deadline
        )
        await tool.acall(peer="warm", prompt="go")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        try:
            await tool.acall(peer="attack", prompt="go")
            outcome = "answered"
        except CoreAgentError as exc:
            cause = exc.__cause__
            outcome = type(exc).__name__ + (f" ({type(cause).__name__})" if cause else "")
        except Exception as exc:  # an untyped escape is itself a finding
            outcome = f"UNTYPED {type(exc).__name__}"
        took = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        await tool.aclose()
        return {"took": took, "growth_kib": after - before, "outcome": outcome}

    print(json.dumps(asyncio.run(run())))


async def main(deadline: float, only: str | None) -> None:
    rows = []
    warm_server, warm_port = await serve(attacks()[0], deadline)
    for attack in attacks():
        if only and only not in attack.name:
            continue
        server, port = await serve(attack, deadline)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--child",
            f"http://127.0.0.1:{port}",
            f"http://127.0.0.1:{warm_port}",
            str(deadline),
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), deadline + 60)
        except asyncio.TimeoutError:
            proc.kill()
            out = b'{"took": -1, "growth_kib": -1, "outcome": "child killed after 60 s"}'
        server.close()
        result = json.loads(out.decode().strip().splitlines()[-1])
        rows.append((attack, result))
        print(f"  measured {attack.name}", file=sys.stderr)
    warm_server.close()

    base = next((r for a, r in rows if a.name == "baseline: normal call"), None)
    wait = next((r for a, r in rows if a.name == "baseline: never answers"), None)
    print(
        f"deadline {deadline:g} s per call; target: growth <= 8 MiB, end <= "
        f"{deadline * 1.1 + 0.5:.2f} s (deadline +10% +0.5 s)"
    )
    print(
        f"| {'attack':26} | {'ended s':>7} | {'past deadline s':>15} | {'/ wait':>6} | "
        f"{'growth MiB':>10} | {'- normal MiB':>12} | ok  | outcome |"
    )
    print(f"|{'-' * 28}|{'-' * 9}|{'-' * 17}|{'-' * 8}|{'-' * 12}|{'-' * 14}|-----|---------|")
    for attack, r in rows:
        took, growth = r["took"], r["growth_kib"] / 1024
        ok = took <= deadline * 1.1 + 0.5 and growth <= 8
        vs_wait = f"{took / wait['took']:.2f}x" if wait else "-"
        over = f"{growth - base['growth_kib'] / 1024:+.2f}" if base else "-"
        print(
            f"| {attack.name:26} | {took:7.2f} | {took - deadline:+15.2f} | {vs_wait:>6} | "
            f"{growth:10.2f} | {over:>12} | {'yes' if ok else 'NO ':3} | {r['outcome']} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], float(sys.argv[4]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deadline", type=float, default=2.0)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    asyncio.run(main(args.deadline, args.only))
