"""A fork server of hosts for the crash tests: `python -m tests.crash_host STORE [shared]`.

Importing the host takes seconds on a loaded machine; a crash loop restarts it
twenty times and more. So this process imports it once, then forks a fresh
host for every `start` line it reads on stdin (this process runs no thread
and no event loop, so forking it is safe). Each child opens the store, serves
on a free loopback port and writes one JSON line `{"pid", "url"}` to stdout;
a child that cannot open its store writes `{"pid", "error"}` and exits 1. The
test kills children with SIGKILL by pid; `quit` (or the end of stdin) ends
this process, killing what is left of its children. With `shared`, each child serves two
hosts, `crashy` and `other`, sharing one `SharedStore` on STORE, and its line gives both
URLs (`{"pid", "url", "urls": {name: url}}`, `url` being crashy's).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys

from coreagent_sdk.host import AgentHost, SharedStore, Turn


async def chatty(turn: Turn) -> None:
    """A few events with pauses between them, so a kill lands inside turns."""
    for i in range(3):
        await turn.chunk(f"{turn.prompt} #{i}")
        await asyncio.sleep(0.005)
    await turn.say(f"done: {turn.prompt}")


def _line(payload: dict[str, object]) -> None:
    os.write(1, (json.dumps(payload) + "\n").encode())


def _child(store: str) -> None:
    host = AgentHost("crashy", behavior=chatty, store=store, session_rate_limit=None)

    def ready(url: str) -> None:
        _line({"pid": os.getpid(), "url": url})

    try:
        asyncio.run(host.serve("127.0.0.1", 0, on_ready=ready, grace=0))
    except ValueError as exc:  # the store refused (held, unreadable, ...)
        _line({"pid": os.getpid(), "error": str(exc)})
        os._exit(1)
    os._exit(0)


def _shared_child(path: str) -> None:
    async def serve_both() -> None:
        store = SharedStore(path)
        hosts = [
            AgentHost(name, behavior=chatty, store=store, session_rate_limit=None)
            for name in ("crashy", "other")
        ]
        urls: dict[str, str] = {}

        def ready(name: str, url: str) -> None:
            urls[name] = url
            if len(urls) == len(hosts):
                _line({"pid": os.getpid(), "url": urls["crashy"], "urls": urls})

        await asyncio.gather(
            *(
                h.serve("127.0.0.1", 0, on_ready=lambda u, n=h.name: ready(n, u), grace=0)
                for h in hosts
            )
        )

    try:
        asyncio.run(serve_both())
    except ValueError as exc:
        _line({"pid": os.getpid(), "error": str(exc)})
        os._exit(1)
    os._exit(0)


def main() -> None:
    store = sys.argv[1]
    child = _shared_child if sys.argv[2:] == ["shared"] else _child
    children: set[int] = set()
    for line in sys.stdin:
        for pid in list(children):  # reap the killed ones
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    children.discard(pid)
        if line.strip() != "start":
            break
        pid = os.fork()
        if pid == 0:
            sys.stdin.close()
            child(store)
        children.add(pid)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
