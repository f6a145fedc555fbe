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

from loopback_guard import install


def main() -> None:
    install("guide block")  # beside this file: the script's own folder is on sys.path
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
