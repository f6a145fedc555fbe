"""CPU per A2A answer in one process: `AgentHost(a2a=True)`'s app against the A2A SDK's own.

The same behaviour and the same A2A events as `bench/a2a_serve.py` (its servers' code),
both apps called in process through `coreagent_sdk.ASGITransport` by the A2A SDK's own
client (`SendStreamingMessage`), N answers at C in flight per round, rounds interleaved
(host first in odd rounds, the SDK's first in even ones). What it measures is the process's
CPU per answer, client and server together (the client's share is the same for both), so
the ratio is free of the scheduler's noise that a loaded machine puts into a served run's
throughput. ``--stored`` gives the host a named store file (each A2A task's saves committed
to it, as a host that survives `kill -9` does).

    python bench/a2a_serve_inproc.py [--answers 200] [--in-flight 50] [--rounds 6] [--stored]

Nothing leaves the process; every loop is bounded by its count.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from a2a_serve import CHUNKS, PROMPT, _sdk_app  # the served bench's behaviour, beside this file


async def measure(answers: int, in_flight: int, rounds: int, stored: bool) -> None:
    import httpx
    from a2a.client import ClientConfig, ClientFactory
    from a2a.helpers.proto_helpers import new_text_message
    from a2a.types import Role, SendMessageRequest

    from coreagent_sdk import ASGITransport
    from coreagent_sdk.host import AgentHost, Turn

    logging.disable(logging.WARNING)

    async def agent(turn: Turn) -> None:
        for chunk in CHUNKS:
            await turn.chunk(chunk)
        await turn.say("done: " + turn.prompt)

    folder = tempfile.TemporaryDirectory(prefix="a2a-inproc-")
    store = os.path.join(folder.name, "sessions.sqlite3") if stored else None
    host = AgentHost("bench", behavior=agent, a2a=True, session_rate_limit=None, store=store)
    base = "http://bench.test"
    clients: dict[str, Any] = {}
    https = []
    for name, app in (("host", host.app), ("sdk", _sdk_app(base + "/"))):
        http = httpx.AsyncClient(transport=ASGITransport(app), base_url=base)
        https.append(http)
        config = ClientConfig(streaming=True, httpx_client=http)
        clients[name] = await ClientFactory(config).create_from_url(base + "/")

    async def call(client: Any) -> None:
        request = SendMessageRequest(message=new_text_message(PROMPT, role=Role.ROLE_USER))
        async for _ in client.send_message(request):
            pass

    for client in clients.values():  # warm: imports, caches, the store's file
        for _ in range(20):
            await call(client)
    cpu: dict[str, list[float]] = {"host": [], "sdk": []}
    for round_ in range(rounds):
        for name in ("host", "sdk") if round_ % 2 == 0 else ("sdk", "host"):
            todo = iter(range(answers))

            async def worker(client: Any = clients[name], todo: Any = todo) -> None:
                for _ in todo:
                    await call(client)

            started = time.process_time()
            await asyncio.gather(*(worker() for _ in range(in_flight)))
            cpu[name].append(1000 * (time.process_time() - started) / answers)
    ours, theirs = statistics.median(cpu["host"]), statistics.median(cpu["sdk"])
    ratios = [round(a / b, 3) for a, b in zip(cpu["host"], cpu["sdk"], strict=True)]
    load = os.getloadavg()
    print(
        f"store {'named file' if stored else 'temporary'}: CPU ms per answer (client and "
        f"server), host {ours:.2f}, a2a-sdk {theirs:.2f}, ratio of medians {ours / theirs:.3f}; "
        f"per round {ratios}; load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    for http in https:
        await http.aclose()
    await host.aclose()
    folder.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=200)
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--stored", action="store_true")
    args = parser.parse_args()
    asyncio.run(measure(args.answers, args.in_flight, args.rounds, args.stored))


if __name__ == "__main__":
    main()
