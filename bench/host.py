"""What the agent host costs over a bare ASGI app that answers the same frames.

Both sides are served by uvicorn on 127.0.0.1 in this process and called by
the same `CallPeer` (a StaticDirectory, so no hub lookup on either side):
`POST /sessions`, open the event stream, inject, read until the turn ends.
The bare app is the least a server can do and still be correct for that
call: one dict of sessions, frames pre-encoded for the prompt, no auth, no
limits, no ACL, no event log, no Go-fidelity decoding. The host runs an echo
agent with its session rate limit off (one caller opens every session).

Rounds alternate (bare, host, bare, host, ...) so drift on a shared machine
hits both alike; the fastest round of each side is compared. Printed: the
time per call at 1 and at 200 calls in flight, and the ratio host / bare.

    python bench/host.py [--calls 200] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from coreagent_sdk import CallPeer, Peer, StaticDirectory
from coreagent_sdk.host import AgentHost, Turn

PROMPT = "How is the cluster doing?"
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _frame(event: str, payload: Any) -> bytes:
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event}\ndata: {data}\n\n".encode()


def _agent(seq: int, author: str, role: str, text: str) -> bytes:
    event = {
        "Content": {"role": role, "parts": [{"text": text}]},
        "Partial": False,
        "TurnComplete": False,
        "Interrupted": False,
        "ErrorCode": "",
        "ErrorMessage": "",
        "FinishReason": "",
        "ID": f"e-{seq}",
        "Timestamp": "2026-01-01T00:00:00Z",
        "InvocationID": "inv-1",
        "Branch": "",
        "Author": author,
        "Actions": {"StateDelta": None},
        "LongRunningToolIDs": None,
    }
    return _frame("agent", {"seq": seq, "event": event})


class BareApp:
    """The least ASGI app that answers a delegation with the host's frames."""

    def __init__(self) -> None:
        self.sessions: dict[str, asyncio.Queue[bytes | None]] = {}
        self.opening = _frame(
            "capabilities", {"protocol_version": "1.10.0", "event_types": ["agent"]}
        ) + _frame("status-update", {"model": "m", "turn_state": "idle"})

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if method == "POST" and path == "/sessions":
            sid = uuid.uuid4().hex[:10]
            self.sessions[sid] = asyncio.Queue()
            body = {"app": "core-agent", "user": "anonymous", "sessionID": sid, "url": ""}
            await self._json(send, 201, body)
        elif method == "GET" and path.endswith("/events"):
            await self._events(path.split("/")[3], send)
        elif method == "POST" and path.endswith("/inject"):
            sid = path.split("/")[3]
            chunks = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            text = json.loads(b"".join(chunks))["message"]
            queue = self.sessions[sid]
            for frame in (
                _frame("inbox", {"state": "queued", "prompt_id": "p"}),
                _frame("inbox", {"state": "dequeued", "prompt_id": "p"}),
                _frame("status-update", {"model": "m", "turn_state": "streaming"}),
                _agent(1, "user", "user", text),
                _agent(2, "agent", "model", text),
                _frame("turn-complete", {"prompt_id": "t", "model": "m", "tokens_in": 1}),
                _frame("status-update", {"turn_state": "idle"}),
                None,
            ):
                queue.put_nowait(frame)
            await self._json(send, 200, {"injected": text, "session": sid, "woke": True})
        else:
            await self._json(send, 404, {})

    async def _events(self, sid: str, send: Send) -> None:
        queue = self.sessions[sid]
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": self.opening, "more_body": True})
        while (frame := await queue.get()) is not None:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        del self.sessions[sid]

    @staticmethod
    async def _json(send: Send, status: int, body: Any) -> None:
        data = json.dumps(body).encode() + b"\n"
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


async def serve_bare(app: BareApp) -> tuple[str, Any]:
    import socket

    import uvicorn

    # A TCP listener, as the host's: asyncio sets TCP_NODELAY on what it accepts only then.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    for _ in range(500):  # bounded wait for startup
        if server.started:
            break
        await asyncio.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", (server, task)


async def echo(turn: Turn) -> None:
    await turn.say(turn.prompt)


async def per_call(tool: CallPeer, peer: str, calls: int, in_flight: int) -> tuple[float, float]:
    """Seconds per call, wall and this process's CPU, `calls` calls, at most `in_flight` at once.

    Client and server share the process, so CPU per call is both sides' work; the client's is
    the same against either server, and CPU time is less at the mercy of a shared machine's
    other load than wall time is.
    """
    gate = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with gate:
            result = await tool.acall(peer=peer, prompt=PROMPT)
            assert result.response == PROMPT, result.response

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(calls)))
    return (time.perf_counter() - started) / calls, (time.process_time() - cpu) / calls


async def main(calls: int, rounds: int) -> None:
    host = AgentHost("host", behavior=echo, session_rate_limit=None)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.get_running_loop().create_task(
        host.serve(on_ready=ready.set_result, handle_signals=False)
    )
    host_url = await ready
    bare_url, (bare_server, bare_task) = await serve_bare(BareApp())
    directory = StaticDirectory([Peer("host", host_url), Peer("bare", bare_url)])
    print(f"{calls} calls a round, {rounds} rounds, fastest round of each side")
    print(
        f"{'in flight':>9}  {'bare ms/call':>12}  {'host ms/call':>12}  {'host/bare':>9}"
        f"  {'bare CPU ms':>11}  {'host CPU ms':>11}  {'CPU ratio':>9}"
    )
    async with CallPeer(directory, timeout=120) as tool:
        for in_flight in (1, 200):
            n = calls if in_flight > 1 else max(20, calls // 5)
            bare, hosted = [], []
            for _ in range(rounds):
                bare.append(await per_call(tool, "bare", n, in_flight))
                hosted.append(await per_call(tool, "host", n, in_flight))
            b, h = min(w for w, _ in bare) * 1000, min(w for w, _ in hosted) * 1000
            bc, hc = min(c for _, c in bare) * 1000, min(c for _, c in hosted) * 1000
            print(
                f"{in_flight:>9}  {b:>12.2f}  {h:>12.2f}  {h / b:>8.2f}x"
                f"  {bc:>11.2f}  {hc:>11.2f}  {hc / bc:>8.2f}x"
            )
    host.stop()
    await serving
    bare_server.should_exit = True
    await bare_task


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
