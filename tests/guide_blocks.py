"""Runs a guide's Python blocks in order, as cells of one notebook: `python guide_blocks.py`.

The blocks arrive on stdin as JSON, ``[[number, source], ...]``. Each runs in one shared
namespace; a block with a top-level ``await`` runs on one event loop kept for the whole
guide, as a notebook's cells do. Only loopback may be dialed: an audit hook refuses any
other address before the socket is touched. Prints ``BLOCK n OK`` after each block; the
first failure prints its traceback and exits 1.
"""

from __future__ import annotations

import ast
import asyncio
import json
import sys
import traceback
from typing import Any

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _loopback_only(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect":
        address = args[1]
        host = address[0] if isinstance(address, tuple) else None
    elif event == "socket.getaddrinfo":
        host = args[0]
    else:
        return
    if host is None:
        return
    host = host.decode() if isinstance(host, bytes) else str(host)
    if host not in LOOPBACK:
        raise OSError(f"guide block: refused to reach {host!r}: loopback only")


def main() -> None:
    sys.addaudithook(_loopback_only)
    blocks = json.load(sys.stdin)
    namespace: dict[str, Any] = {"__name__": "__guide__"}
    loop = asyncio.new_event_loop()
    for number, source in blocks:
        try:
            code = compile(
                source, f"<block {number}>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
            result = eval(code, namespace)  # the guide's own code, as a reader would run it
            if asyncio.iscoroutine(result):
                loop.run_until_complete(result)
        except BaseException:
            print(f"BLOCK {number} FAILED", file=sys.stderr)
            traceback.print_exc()
            sys.exit(1)
        print(f"BLOCK {number} OK", flush=True)


if __name__ == "__main__":
    main()
