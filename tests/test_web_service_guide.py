"""The web-service guide's apps, run as written, against a fleet served on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
import pytest

from simulator import Fleet, SessionRateLimit, behaviors

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "web-service.md"


def guide_block(marker: str) -> str:
    """The python block that follows `<!-- marker -->` in the guide."""
    found = re.search(
        rf"<!-- {marker} -->\n```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL
    )
    assert found, f"the guide has no python block after <!-- {marker} -->"
    return found.group(1)


def load_guide_app(namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    namespace = {"__name__": "webapp"} if namespace is None else namespace
    exec(compile(guide_block("web-service-app"), str(GUIDE), "exec"), namespace)
    return namespace


@contextlib.contextmanager
def fleet_served_in_a_thread(fleet: Fleet) -> Iterator[Any]:
    """`fleet` on loopback sockets, on a loop on a thread of its own; yields the served fleet."""
    ready: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()

    async def main() -> None:
        try:
            served = await fleet.serve()
        except BaseException as exc:
            ready.put(exc)
            raise
        ready.put(served)
        for _ in range(6000):  # at most 120 s, then it stops by itself
            if stop.is_set():
                break
            await asyncio.sleep(0.02)
        await fleet.aclose()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    served = ready.get(timeout=30)
    if isinstance(served, BaseException):
        raise served
    try:
        yield served
    finally:
        stop.set()
        thread.join(timeout=30)


@contextlib.contextmanager
def app_served_in_a_thread(app: Any) -> Iterator[str]:
    """An ASGI app under uvicorn (lifespan on) on a loopback port and a thread; yields its URL."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(1000):  # at most 10 s
        if server.started:
            break
        threading.Event().wait(0.01)
    assert server.started, "the app did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def sessions_left(fleet: Fleet, peer: str | None = None) -> int:
    return sum(
        1
        for name, daemon in fleet.daemons.items()
        if name != "hub" and peer in (None, name)
        for sid in list(daemon.sessions)
        if sid != "default"
    )


@pytest.fixture
def served_fleet() -> Iterator[tuple[Fleet, Any]]:
    fleet = Fleet(session_rate_limit=SessionRateLimit(burst=3, per_minute=1))
    fleet.add_peer("echo", behaviors.echo())
    fleet.add_peer("flaky", behaviors.fail("rate_limited", "quota", retryable=True))
    fleet.add_peer("stuck", behaviors.never_finish())
    with fleet_served_in_a_thread(fleet) as served:
        yield fleet, served


def test_the_guides_app_answers_maps_errors_and_leaves_no_sessions(
    served_fleet: tuple[Fleet, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet, served = served_fleet
    monkeypatch.setenv("COREAGENT_HUB_URL", served.hub_url)
    monkeypatch.setenv("COREAGENT_TIMEOUT", "3")
    app = load_guide_app()["app"]
    with (
        app_served_in_a_thread(app) as url,
        httpx.Client(base_url=url, timeout=30, trust_env=False) as client,
    ):
        ok = client.post("/ask", json={"peer": "echo", "prompt": "hello"})
        unknown = client.post("/ask", json={"peer": "nobody", "prompt": "hi"})
        empty = client.post("/ask", json={"peer": "echo", "prompt": " "})
        turn = client.post("/ask", json={"peer": "flaky", "prompt": "work"})
        stuck = client.post("/ask", json={"peer": "stuck", "prompt": "work"})
        # Each peer limits each caller: echo's burst of 3 is spent by the third call after.
        limited = [client.post("/ask", json={"peer": "echo", "prompt": "again"}) for _ in range(3)]
    assert ok.status_code == 200 and ok.json()["response"] == "hello"
    assert unknown.status_code == 404
    assert unknown.json() == {"error": "UnknownPeerError", "retry_safe": True}
    assert "echo" not in unknown.text  # the roster stays in the logs
    assert empty.status_code == 400
    assert turn.status_code == 502 and turn.json()["retry_safe"] is False
    assert stuck.status_code == 504 and stuck.json()["retry_safe"] is False
    statuses = [r.status_code for r in limited]
    assert 429 in statuses
    refused = limited[statuses.index(429)]
    assert refused.json() == {"error": "PeerRateLimitedError", "retry_safe": True}
    assert int(refused.headers["retry-after"]) >= 1
    assert statuses == [200, 200, 429]
    # COREAGENT_DELETE_SESSIONS defaults to 1: echo's three answered sessions are gone; a
    # failed turn's session (flaky's, stuck's) is left for whoever reads what happened.
    assert sessions_left(fleet, "echo") == 0
    assert sessions_left(fleet) == 2


def test_the_guides_wsgi_app_serves_many_threads_with_the_sync_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    with fleet_served_in_a_thread(fleet) as served:
        monkeypatch.setenv("COREAGENT_HUB_URL", served.hub_url)
        namespace = load_guide_app()
        exec(compile(guide_block("web-service-wsgi"), str(GUIDE), "exec"), namespace)

        class Threaded(ThreadingMixIn, WSGIServer):
            daemon_threads = True
            request_queue_size = 64  # socketserver's 5 drops connects from 24 clients at once

        class Quiet(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = make_server(
            "127.0.0.1", 0, namespace["wsgi_app"], server_class=Threaded, handler_class=Quiet
        )
        serving = threading.Thread(target=server.serve_forever, daemon=True)
        serving.start()
        url = f"http://127.0.0.1:{server.server_port}/ask"
        answers: list[Any] = []

        def client(i: int) -> None:
            with httpx.Client(timeout=60, trust_env=False) as http:
                for j in range(3):
                    prompt = f"thread {i} call {j}"
                    try:
                        got = http.post(url, content=json.dumps({"peer": "echo", "prompt": prompt}))
                    except httpx.HTTPError as exc:  # reported by the assertion, not lost
                        answers.append((type(exc).__name__, None, prompt))
                        continue
                    answers.append((got.status_code, got.json().get("response"), prompt))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
        finally:
            server.shutdown()
            server.server_close()
            namespace["tool"].close()
    assert len(answers) == 24 * 3
    assert [a for a in answers if a[0] != 200 or a[1] != a[2]] == []
