"""Stdio processes no MCP SDK would write: they answer by hand, or never, or badly.

    python raw.py silent | schema | exit

``silent`` reads its stdin and never answers (an initialize that never
comes back); ``schema`` answers initialize, then lists a tool whose input
schema is not an object; ``exit`` writes to stderr and exits at once.
"""

from __future__ import annotations

import json
import sys

mode = sys.argv[1]
if mode == "exit":
    print("toolbox: cannot open the database: no such file", file=sys.stderr)
    sys.exit(2)
if mode == "silent":
    print("listening (but never answering)", file=sys.stderr, flush=True)
    sys.stdin.read()
    sys.exit(0)

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    if message["method"] == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "0"},
        }
    elif message["method"] == "tools/list":
        result = {
            "tools": [
                {"name": "good", "inputSchema": {"type": "object", "properties": {}}},
                {"name": "stringly", "inputSchema": {"type": "string"}},
            ]
        }
    else:
        result = {"content": [{"type": "text", "text": "called"}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
