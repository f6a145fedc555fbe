"""The MCP servers of one agent: started together, their tools offered, called, closed together.

An agent's skills may carry MCP servers; each server gets its own process
(or HTTP session) per agent, with its own skill's secrets, so two agents
never share one. They start at once when the agent's runtime is built, each
within its ``start_timeout``; one that fails is reported once, by name, with
its stderr's last lines, and the agent runs without its tools: a model that
asks for one is told why.

What comes back is hostile: names are made to fit the model's charset,
schemas that are not objects are left out, listings are bounded, results are
cut to ``max_result_bytes`` and scrubbed before they go anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from .._scrub import scrub
from ..models._protocol import ToolSpec
from ._config import McpServer
from ._namespace import sanitize_prefix, unique_names
from ._session import McpUnavailableError, ServerConnection, ToolListing

__all__ = ["McpServerStatus", "McpTool", "McpToolset"]

_log = logging.getLogger("coreagent_sdk.mcp")


@attrs.frozen
class McpTool:
    """One MCP tool as the model is offered it.

    Attributes:
        name: The namespaced name the model calls (``<server>_<tool>``).
        server: The server's name.
        tool: The tool's own name on the server.
        description: What it does, as the server says.
        parameters: Its JSON Schema (an object).
        read_only: Its ``readOnlyHint`` when the server gives one, else the server's
            ``read_only``.
    """

    name: str
    server: str
    tool: str
    description: str
    parameters: Mapping[str, Any] = attrs.field(hash=False, repr=False)
    read_only: bool = False

    @property
    def spec(self) -> ToolSpec:
        """The tool as the model is offered it."""
        return ToolSpec(self.name, self.description, self.parameters)


@attrs.frozen
class McpServerStatus:
    """How one server of an agent is: up with its tools, or failed and why.

    Attributes:
        name: The server's name.
        transport: ``stdio`` or ``http``.
        ok: Whether it started.
        tools: The namespaced names of its tools the model is offered.
        error: Why it failed to start, when it did.
        problems: Tools left out of its listing and why (names, schemas, bounds).
        restarts: Times it was started again after ending.
    """

    name: str
    transport: str
    ok: bool
    tools: tuple[str, ...] = ()
    error: str | None = None
    problems: tuple[str, ...] = ()
    restarts: int = 0


def _schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, Mapping):
        return f"is a {type(schema).__name__}"
    kind = schema.get("type", "object")
    if kind != "object":
        return f"has type {kind!r}"
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return f"has properties that are a {type(properties).__name__}"
    return None


def _cut(text: str, limit: int) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def _content_text(content: Sequence[Any]) -> str:
    parts: list[str] = []
    for item in content:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(str(getattr(item, "text", "")))
        elif kind in ("image", "audio"):
            mime = getattr(item, "mime_type", "") or "?"
            size = len(str(getattr(item, "data", "")))
            parts.append(f"[{kind} {mime}, {size} base64 characters, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(item, 'uri', '')}]")
        elif kind == "resource":
            resource = getattr(item, "resource", None)
            text = getattr(resource, "text", None)
            uri = getattr(resource, "uri", "")
            parts.append(text if isinstance(text, str) else f"[resource {uri}]")
        else:
            parts.append(f"[{kind or type(item).__name__} content, not shown]")
    return "\n".join(parts)


def tool_response(tool: McpTool, result: Any, max_bytes: int) -> dict[str, Any]:
    """A ``tools/call`` result as the model reads it: scrubbed, at most `max_bytes` of it.

    Structured content when the server gave it and it fits, else the text of its
    content; an error result is an ``{"error": ...}`` naming the tool.
    """
    text = scrub(_content_text(getattr(result, "content", ()) or ()))
    if getattr(result, "is_error", False):
        said = _cut(text, max_bytes) or "the tool reported an error and said nothing"
        return {"error": f"{tool.name}: {said}"}
    structured = getattr(result, "structured_content", None)
    if isinstance(structured, dict):
        body = scrub(json.dumps(structured, ensure_ascii=False, default=str))
        if len(body.encode()) <= max_bytes:
            loaded: dict[str, Any] = json.loads(body)
            return loaded
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= max_bytes:
        return {"result": text}
    return {
        "result": _cut(text, max_bytes),
        "truncated": True,
        "note": f"{tool.name} answered {size} bytes; the first {max_bytes} are shown "
        "(max_result_bytes)",
    }


async def _warm() -> None:
    """Import what the SDK imports at a first tool call, in a thread, while servers start.

    The SDK checks a result against its tool's output schema with jsonschema,
    imported on the first call; its import compiles a grammar (seconds on a loaded
    machine), which would otherwise land on the first call's `call_timeout`.
    """
    with contextlib.suppress(ImportError):
        await asyncio.to_thread(importlib.import_module, "jsonschema.validators")


class McpToolset:
    """The MCP servers of one agent's skills, each with that skill's secrets.

    Args:
        servers: Each server and the secrets of the skill that carries it.
    """

    def __init__(self, servers: Iterable[tuple[McpServer, Mapping[str, str]]]) -> None:
        self._connections: list[ServerConnection] = []
        seen: dict[str, str] = {}
        for spec, secrets in servers:
            prefix = sanitize_prefix(spec.name)
            if prefix in seen:
                raise ValueError(
                    f"mcp: servers {seen[prefix]!r} and {spec.name!r} of one agent would both "
                    f"prefix their tools {prefix + '_'!r}; rename one"
                )
            seen[prefix] = spec.name
            self._connections.append(ServerConnection(spec, secrets))
        self._tools: dict[str, tuple[McpTool, ServerConnection]] = {}
        self._status: dict[str, McpServerStatus] = {}
        self._failed: dict[str, str] = {}  # prefix -> why, for a model that asks anyway
        self.started = False
        self._closed = False

    def __repr__(self) -> str:
        names = ", ".join(c.spec.name for c in self._connections)
        return f"McpToolset([{names}], started={self.started}, tools={len(self._tools)})"

    @property
    def tools(self) -> tuple[McpTool, ...]:
        """The tools offered to the model, server by server."""
        return tuple(tool for tool, _ in self._tools.values())

    @property
    def status(self) -> tuple[McpServerStatus, ...]:
        """Each server's status, in the order the skills declare them."""
        out = []
        for connection in self._connections:
            status = self._status.get(connection.spec.name)
            if status is not None:
                out.append(attrs.evolve(status, restarts=connection.restarts))
        return tuple(out)

    async def start(self, taken: Iterable[str] = ()) -> None:
        """Start every server at once and list their tools; a failure is reported, not raised.

        `taken` holds the names the agent offers already (its own tools): an MCP tool
        that would take one is left out and reported.
        """
        if self.started:
            return
        self.started = True
        used = set(taken)
        _warmed = asyncio.ensure_future(_warm())
        results = await asyncio.gather(
            *(c.start() for c in self._connections), return_exceptions=True
        )
        await _warmed
        for connection, outcome in zip(self._connections, results, strict=True):
            if isinstance(outcome, BaseException):
                self._failed_to_start(connection, outcome)
            else:
                self._offer(connection, used)

    def _failed_to_start(self, connection: ServerConnection, error: BaseException) -> None:
        spec = connection.spec
        why = str(error)
        if not isinstance(error, McpUnavailableError):
            why = scrub(f"mcp: server {spec.name!r} failed to start: {error!r}")
        connection.failure = why
        self._failed[sanitize_prefix(spec.name) + "_"] = why
        self._status[spec.name] = McpServerStatus(spec.name, spec.transport, False, error=why)
        _log.warning("%s", why)  # once, by name: this is the one report

    def _offer(self, connection: ServerConnection, used: set[str]) -> None:
        """Offer a started server's tools that fit; report those left out and why."""
        spec = connection.spec
        problems: list[str] = []
        good: list[ToolListing] = []
        for listed in connection.tools:
            why = _schema_problem(listed.input_schema)
            if why is None:
                good.append(listed)
                continue
            problems.append(
                f"mcp: server {spec.name!r}: tool {listed.name!r} has an input schema that is "
                f"not a JSON object schema (it {why}); it is left out (fix the tool's "
                "inputSchema on the server)"
            )
        if connection.dropped_tools:
            listed_count = len(connection.tools) + connection.dropped_tools
            problems.append(
                f"mcp: server {spec.name!r} lists {listed_count} tools or more; the first "
                f"{spec.max_tools} are kept (max_tools)"
            )
        names, clashes = unique_names(spec.name, (t.name for t in good), used)
        problems += clashes
        by_name = {t.name: t for t in good}
        for name, original in names.items():
            listed = by_name[original]
            read_only = (
                listed.read_only_hint if listed.read_only_hint is not None else spec.read_only
            )
            tool = McpTool(
                name,
                spec.name,
                original,
                scrub(listed.description)[:4096],
                dict(listed.input_schema),
                bool(read_only),
            )
            self._tools[name] = (tool, connection)
            used.add(name)
        self._status[spec.name] = McpServerStatus(
            spec.name, spec.transport, True, tuple(names), problems=tuple(problems)
        )
        for problem in problems:
            _log.warning("%s", scrub(problem))

    def find(self, name: str) -> McpTool | None:
        """The MCP tool the model calls `name`, or None."""
        entry = self._tools.get(name)
        return entry[0] if entry is not None else None

    def unavailable(self, name: str) -> str | None:
        """Why a tool the model asked for is not there, when its server failed; else None."""
        for prefix, why in self._failed.items():
            if name.startswith(prefix):
                return f"{name}: unavailable: {why}"
        return None

    async def call(self, tool: McpTool, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Call `tool`: its response for the model, or ``{"error": ...}`` saying why not."""
        _, connection = self._tools[tool.name]
        from mcp.shared.exceptions import MCPError

        try:
            result = await connection.call(tool.tool, arguments)
        except (McpUnavailableError, TimeoutError) as exc:
            return {"error": scrub(f"{tool.name}: {exc}")}
        except MCPError as exc:
            said = exc.message
            # The SDK reports a connection that ended as CONNECTION_CLOSED (-32000, its own
            # words, no data); -32000 is also JSON-RPC's generic server error, which a
            # live server may answer with: that is the tool's error, in the server's words.
            if exc.code == -32000 and exc.message == "Connection closed" and exc.data is None:
                said = (
                    f"mcp: server {tool.server!r} ended during the call ({exc.message}); "
                    "it is started again on the next call"
                )
            return {"error": scrub(f"{tool.name}: {said}")[:2000]}
        except Exception as exc:  # a result the SDK could not read, a transport failure
            return {"error": scrub(f"{tool.name}: {type(exc).__name__}: {exc}")[:2000]}
        return tool_response(tool, result, connection.spec.max_result_bytes)

    async def aclose(self) -> None:
        """Close every server at once (the daemon's CloseAll); no process or pipe left."""
        self._closed = True
        await asyncio.gather(*(c.aclose() for c in self._connections), return_exceptions=True)
