"""The names an MCP server's tools reach the model under: ``<server>_<tool>``, as the daemon's.

The daemon (`pkg/mcp/namespace.go`) prefixes each tool with its server's name,
every character outside ``[A-Za-z0-9_]`` made ``_`` (``my-server`` ->
``my_server``), so that a server's ``read_file`` never collides with the
agent's own, and names stay within what models accept. It leaves the tool's
own part as the server wrote it and relies on the model's API to refuse what
does not fit; a hostile or careless server then breaks the whole request.
Here every name is made to fit before the model sees it:

- the tool's part keeps ``[A-Za-z0-9_-]`` (the daemon's name, where the
  daemon's is valid) and every other character becomes ``_``;
- a name over 64 characters is cut and ends in ``_`` and 8 hex digits of a
  hash of the whole, so two long names stay two names;
- two tools that end up with one name: the first in the listing keeps it,
  the other is left out and reported, naming both and the fix.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

__all__ = ["MAX_TOOL_NAME", "namespaced", "sanitize_prefix", "unique_names"]

MAX_TOOL_NAME = 64
"""The longest tool name models accept (Gemini's and OpenAI's ``{1,64}``)."""

_NOT_PREFIX = re.compile(r"[^A-Za-z0-9_]")
_NOT_TOOL = re.compile(r"[^A-Za-z0-9_-]")
_HASH = 8


def sanitize_prefix(server: str) -> str:
    """A server's name as its tools' prefix: every character outside ``[A-Za-z0-9_]`` is ``_``."""
    return _NOT_PREFIX.sub("_", server)


def namespaced(server: str, tool: str) -> str:
    """The name the model calls `server`'s tool `tool` by (at most `MAX_TOOL_NAME` characters)."""
    name = f"{sanitize_prefix(server)}_{_NOT_TOOL.sub('_', tool)}"
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"{name[: MAX_TOOL_NAME - _HASH - 1]}_{digest[:_HASH]}"


def unique_names(
    server: str, tools: Iterable[str], taken: Iterable[str] = ()
) -> tuple[dict[str, str], list[str]]:
    """Each of `server`'s tools by its namespaced name, and what was left out and why.

    `taken` holds the names already offered to the model (the agent's own
    tools, other servers'): a tool that would take one is left out too.
    """
    used = set(taken)
    kept: dict[str, str] = {}
    problems: list[str] = []
    for tool in tools:
        name = namespaced(server, tool)
        if name in kept:
            problems.append(
                f"mcp: server {server!r}: tools {kept[name]!r} and {tool!r} are both named "
                f"{name!r} once namespaced; {tool!r} is left out (rename one on the server)"
            )
        elif name in used:
            problems.append(
                f"mcp: server {server!r}: tool {tool!r} would be named {name!r}, which another "
                "tool of this agent has; it is left out (rename the server in its skill, "
                "or the other tool)"
            )
        else:
            kept[name] = tool
    return kept, problems
