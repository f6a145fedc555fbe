"""Memory a `SessionRecorder` holds while recording a 16 MiB event stream.

One `CallPeer` call reads a 16 MiB stream of frames from an in-process
daemon (an ASGI app, no socket), then the answer. Each shape is measured
twice in the same run, each call in a fresh `tracemalloc` window:

    baseline = peak traced memory of the call, unrecorded
    recorded = peak traced memory of the same call through SessionRecorder().wrap()

and the report gives `recorded / max_bytes` (the target: under 2x the default
16 MiB bound), `(recorded - baseline) / max_bytes`, what the recorder held at
the end (`held_bytes`) and whether the recording says truncated. Shapes:

- text: frames of 64 KiB of text in one JSON string;
- small objects: frames of 64 KiB of `{},` (72 bytes each once decoded);
- 1 MiB objects: frames of 1 MiB of `{},`, each charged more than the bound;
- text then objects: 15 MiB of text frames, then 1 MiB objects frames.

    python bench/bench_recording_memory.py [--mib 16]

Every loop is bounded: the daemon writes a fixed number of frames and ends.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from coreagent_sdk import ASGITransport, CallPeer, Peer, SessionRecorder, StaticDirectory

MIB = 1024 * 1024
DEFAULT_BOUND = SessionRecorder().max_bytes
SESSION = json.dumps({"app": "core-agent", "user": "u", "sessionID": "s-1", "url": ""}).encode()
INJECTED = json.dumps({"injected": "p", "session": "s-1", "woke": True}).encode()
ANSWER = {"Author": "m", "Content": {"parts": [{"text": "fine"}]}, "TurnComplete": True}


def frame(data: Any) -> bytes:
    return b"event: status-update\ndata: " + json.dumps(data).encode() + b"\n\n"


def text_frames(total: int) -> list[bytes]:
    one = frame({"text": "x" * (64 * 1024 - 40)})
    return [one] * (total // len(one))


def object_frames(size: int) -> Callable[[int], list[bytes]]:
    def make(total: int) -> list[bytes]:
        one = frame([{}] * (size // 4 - 256))  # under MAX_EVENT_BYTES
        return [one] * (total // len(one))

    return make


def text_then_objects(total: int) -> list[bytes]:
    objects = object_frames(MIB)(MIB + 64 * 1024)
    return text_frames(total - MIB) + objects


SHAPES: dict[str, Callable[[int], list[bytes]]] = {
    "text": text_frames,
    "small objects": object_frames(64 * 1024),
    "1 MiB objects": object_frames(MIB),
    "text then objects": text_then_objects,
}


def daemon(frames: list[bytes]) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        if path.endswith("/events"):
            head = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": head})
            for chunk in frames:  # a fixed number: the loop ends by itself
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            last = b"event: agent\ndata: " + json.dumps({"seq": 9, "event": ANSWER}).encode()
            await send({"type": "http.response.body", "body": last + b"\n\n"})
            return
        body = SESSION if path == "/sessions" else INJECTED
        head = [(b"content-type", b"application/json")]
        status = 201 if path == "/sessions" else 200
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body})

    return app


async def one_call(frames: list[bytes], recorder: SessionRecorder | None) -> tuple[int, float]:
    transport: Any = ASGITransport(daemon(frames))
    if recorder is not None:
        transport = recorder.wrap(transport)
    tool = CallPeer(
        StaticDirectory([Peer("p", "http://p.bench")]), transport=transport, timeout=120
    )
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    started = time.perf_counter()
    try:
        result = await tool.acall(peer="p", prompt="go")
        assert result.response == "fine", result
    finally:
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        await tool.aclose()
    return peak, elapsed


async def main(total: int) -> None:
    bound = DEFAULT_BOUND
    print(f"stream {total / MIB:.0f} MiB per call, default max_bytes {bound / MIB:.0f} MiB")
    print(
        f"{'shape':<18} {'baseline':>9} {'recorded':>9} {'rec/bound':>9} "
        f"{'(rec-base)/bound':>16} {'held':>9} {'truncated':>9} {'time x':>7}"
    )
    for name, make in SHAPES.items():
        frames = make(total)
        base, base_s = await one_call(frames, None)
        recorder = SessionRecorder()
        peak, peak_s = await one_call(frames, recorder)
        (recording,) = recorder.recordings
        held = getattr(recorder, "held_bytes", 0)  # 0: an SDK before the memory bound
        print(
            f"{name:<18} {base / MIB:8.1f}M {peak / MIB:8.1f}M {peak / bound:9.2f} "
            f"{(peak - base) / bound:16.2f} {held / MIB:8.1f}M "
            f"{recording.truncated!s:>9} {peak_s / base_s:7.2f}"
        )
        del frames, recorder, recording


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=16, help="stream size in MiB (default 16)")
    asyncio.run(main(parser.parse_args().mib * MIB))
