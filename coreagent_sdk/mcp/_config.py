"""MCP servers as a skill declares them: in code, or read from the daemon's ``mcp.json``.

The schema is the daemon's (`pkg/mcp/config.go`): ``{"version": 1, "servers":
{name: spec}}``, each spec one transport, ``stdio`` (command, args, env) or
``http`` (url, headers), with ``read_only``. The daemon reads
``<project>/.agents/mcp.json`` first and ``~/.agents/mcp.json`` second; a
server name the project declares wins. Its messages are kept word for word
so that one file fails the same way in both; where we are stricter (an
unknown field, a version other than 1: the Go decoder ignores both, and a
typo then silently drops a setting), the message names the field and the
fields there are.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Union

import attrs

from .._http._endpoint import endpoint_problem, shown_url

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_MAX_RESTARTS",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_MAX_TOOLS",
    "DEFAULT_START_TIMEOUT",
    "MCP_FILE_NAME",
    "HttpServer",
    "McpServer",
    "StdioServer",
    "parse_mcp_json",
    "read_mcp_json",
]

MCP_FILE_NAME = "mcp.json"
"""The file the daemon reads inside an agents directory (``.agents/mcp.json``)."""
DEFAULT_START_TIMEOUT = 30.0
"""Seconds a server may take to start and list its tools unless `start_timeout=` says otherwise."""
DEFAULT_CALL_TIMEOUT = 60.0
"""Seconds one tool call may take unless `call_timeout=` says otherwise."""
DEFAULT_MAX_RESULT_BYTES = 1 << 20
"""Bytes of one tool result the model is shown (and a stdio line may hold) unless
`max_result_bytes=` says otherwise."""
DEFAULT_MAX_TOOLS = 256
"""Tools kept of one server's listing unless `max_tools=` says otherwise."""
DEFAULT_MAX_RESTARTS = 3
"""Times a server that died is started again (on the next call) unless `max_restarts=` says so."""

# The daemon's digest-wrap knobs (agentic_*) are accepted so one file serves both; unused here.
_TOP_FIELDS = frozenset(
    {
        "version",
        "servers",
        "agentic_wrap",
        "agentic_wrap_threshold",
        "agentic_wrap_llm",
        "agentic_wrap_model",
    }
)
_SPEC_FIELDS = frozenset(
    {"transport", "command", "args", "env", "url", "headers", "auth", "read_only", "agentic_never"}
)


def _q(value: object) -> str:
    """`value` quoted as the daemon's Go ``%q`` quotes a string (the messages match)."""
    return json.dumps(value if isinstance(value, str) else str(value), ensure_ascii=False)


def _name(_instance: object, _attribute: object, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"mcp: a server needs a name (its tools' prefix), got {value!r}")


def _seconds(_instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (value > 0 and math.isfinite(value))
    ):
        raise ValueError(f"mcp: {attribute.name} must be seconds > 0, got {value!r}")


def _count(_instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"mcp: {attribute.name} must be an int >= 0, got {value!r}")


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(f"mcp: args must be a list of strings, got the string {value!r}")
    out = tuple(value)
    for item in out:
        if not isinstance(item, str):
            raise TypeError(f"mcp: args must be strings, got {item!r}")
    return out


def _text_map(value: Mapping[str, str] | None) -> Mapping[str, str]:
    out = dict(value or {})
    for key, item in out.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"mcp: env and headers map strings to strings, got {key!r}: {item!r}")
    return MappingProxyType(out)


def _map_repr(value: Mapping[str, str]) -> str:
    # Values may hold a secret (`Bearer ${env:TOKEN}` expands later, a literal may not):
    # a repr shows the names only.
    return "{" + ", ".join(f"{k!r}: ..." for k in value) + "}"


@attrs.frozen
class StdioServer:
    """An MCP server run as a child process, spoken to over its stdin and stdout.

    Its environment is this process's (less the fleet's own credential
    variables), plus `env` with ``${env:NAME}`` expanded, plus the secrets of
    the skill that carries it. Its tools reach the model as ``<name>_<tool>``.

    Attributes:
        name: The server's name, its tools' prefix.
        command: The executable.
        args: Its arguments.
        env: Variables added to its environment (values may hold ``${env:NAME}``).
        cwd: Its working directory (None: this process's).
        read_only: An operator's word that nothing it exposes changes anything.
        start_timeout: Seconds it may take to start and list its tools.
        call_timeout: Seconds one call may take.
        max_result_bytes: Bytes of one result the model is shown; also a line's bound.
        max_tools: Tools kept of its listing.
        max_restarts: Times it is started again after dying.
    """

    name: str = attrs.field(validator=_name)
    command: str
    args: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_text_map, repr=_map_repr)
    cwd: str | None = None
    read_only: bool = False
    start_timeout: float = attrs.field(default=DEFAULT_START_TIMEOUT, validator=_seconds)
    call_timeout: float = attrs.field(default=DEFAULT_CALL_TIMEOUT, validator=_seconds)
    max_result_bytes: int = attrs.field(default=DEFAULT_MAX_RESULT_BYTES, validator=_count)
    max_tools: int = attrs.field(default=DEFAULT_MAX_TOOLS, validator=_count)
    max_restarts: int = attrs.field(default=DEFAULT_MAX_RESTARTS, validator=_count)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command:
            raise ValueError(f"mcp: server {_q(self.name)}: stdio transport requires command")

    @property
    def transport(self) -> str:
        """``stdio``."""
        return "stdio"


@attrs.frozen
class HttpServer:
    """An MCP server reached over Streamable HTTP.

    Header values may hold ``${env:NAME}``, expanded from the secrets of the
    skill that carries it, then this process's environment.

    Attributes:
        name: The server's name, its tools' prefix.
        url: Its Streamable HTTP endpoint.
        headers: Headers sent with every request (values may hold ``${env:NAME}``).
        read_only: An operator's word that nothing it exposes changes anything.
        start_timeout: Seconds it may take to connect and list its tools.
        call_timeout: Seconds one call may take.
        max_result_bytes: Bytes of one result the model is shown.
        max_tools: Tools kept of its listing.
        max_restarts: Times it is connected again after its session failed.
    """

    name: str = attrs.field(validator=_name)
    url: str = attrs.field(repr=lambda url: repr(shown_url(url)))  # no password in a repr
    headers: Mapping[str, str] = attrs.field(factory=dict, converter=_text_map, repr=_map_repr)
    read_only: bool = False
    start_timeout: float = attrs.field(default=DEFAULT_START_TIMEOUT, validator=_seconds)
    call_timeout: float = attrs.field(default=DEFAULT_CALL_TIMEOUT, validator=_seconds)
    max_result_bytes: int = attrs.field(default=DEFAULT_MAX_RESULT_BYTES, validator=_count)
    max_tools: int = attrs.field(default=DEFAULT_MAX_TOOLS, validator=_count)
    max_restarts: int = attrs.field(default=DEFAULT_MAX_RESTARTS, validator=_count)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise ValueError(f"mcp: server {_q(self.name)}: http transport requires url")
        problem = endpoint_problem(self.url)
        if problem is not None:
            raise ValueError(
                f"mcp: server {_q(self.name)}: url {shown_url(self.url)!r} is not an endpoint "
                f"({problem}); give the server's Streamable HTTP endpoint, http(s)://host/path"
            )

    @property
    def transport(self) -> str:
        """``http``."""
        return "http"


McpServer = Union[StdioServer, HttpServer]  # noqa: UP007 (a runtime alias on Python 3.10)
"""One MCP server a `Skill` carries."""


def _spec(name: str, raw: Any, source: str) -> McpServer:
    where = f"mcp: server {_q(name)}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} in {source}: must be an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _SPEC_FIELDS)
    if unknown:
        raise ValueError(
            f"{where} in {source}: unknown field(s) {', '.join(map(repr, unknown))} "
            f"(a server takes {', '.join(sorted(_SPEC_FIELDS))}); remove or rename them"
        )
    transport = raw.get("transport", "")
    command, url = raw.get("command", ""), raw.get("url", "")
    if transport == "stdio":
        if not command:
            raise ValueError(f"{where}: stdio transport requires command")
        if url:
            raise ValueError(f"{where}: stdio transport must not set url")
        if raw.get("auth") is not None:
            raise ValueError(f"{where}: auth is only valid for http transport")
        if raw.get("headers"):
            raise ValueError(f"{where}: headers are only valid for http transport")
    elif transport == "http":
        if not url:
            raise ValueError(f"{where}: http transport requires url")
        if command:
            raise ValueError(f"{where}: http transport must not set command")
        if raw.get("args") or raw.get("env"):
            raise ValueError(f"{where}: args and env are only valid for stdio transport")
        if raw.get("auth") is not None:
            raise ValueError(
                f"{where}: auth (google_oauth) is not supported by coreagent-sdk; "
                'put the token in headers: {"Authorization": "Bearer ${env:TOKEN}"}'
            )
    elif transport == "":
        raise ValueError(f'{where}: transport is required ("stdio" or "http")')
    else:
        raise ValueError(f"{where}: unknown transport {_q(transport)}")
    read_only = raw.get("read_only", False)
    if not isinstance(read_only, bool):
        raise ValueError(f"{where} in {source}: read_only must be true or false, got {read_only!r}")
    try:
        if transport == "stdio":
            if not isinstance(command, str):
                raise TypeError(f"command must be a string, got {command!r}")
            return StdioServer(
                name, command, args=raw.get("args") or (), env=raw.get("env"), read_only=read_only
            )
        if not isinstance(url, str):
            raise TypeError(f"url must be a string, got {url!r}")
        return HttpServer(name, url, headers=raw.get("headers"), read_only=read_only)
    except (TypeError, ValueError) as exc:
        text = str(exc).removeprefix("mcp: ")
        raise ValueError(f"{where} in {source}: {text}") from None


def parse_mcp_json(text: str | bytes, source: str = "mcp.json") -> tuple[McpServer, ...]:
    """The servers of one ``mcp.json`` text, in name order; `source` names it in errors.

    Raises:
        ValueError: Not JSON, not the daemon's schema, or a server that is not one
            whole transport; the message names the file, the server and the fix.
    """
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"mcp: parse {source}: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(
            f"mcp: parse {source}: the file must hold an object "
            '{"version": 1, "servers": {...}}, got ' + type(raw).__name__
        )
    unknown = sorted(set(raw) - _TOP_FIELDS)
    if unknown:
        raise ValueError(
            f"mcp: {source}: unknown field(s) {', '.join(map(repr, unknown))} (the file takes "
            f"{', '.join(sorted(_TOP_FIELDS))}); remove or rename them"
        )
    version = raw.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise ValueError(
            f"mcp: {source}: version {version!r} is not supported; this schema is version 1"
        )
    servers = raw.get("servers") or {}
    if not isinstance(servers, dict):
        raise ValueError(
            f"mcp: {source}: servers must be an object of name -> server, "
            f"got {type(servers).__name__}"
        )
    return tuple(_spec(name, servers[name], source) for name in sorted(servers))


def _load(folder: str | Path | None) -> tuple[McpServer, ...]:
    if folder is None:
        return ()
    path = Path(folder).expanduser() / MCP_FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:  # most projects declare no servers: not an error
        return ()
    except OSError as exc:
        raise ValueError(f"mcp: read {path}: {exc.strerror or exc}") from None
    return parse_mcp_json(data, str(path))


def read_mcp_json(
    project: str | Path | None = ".agents", home: str | Path | None = "~/.agents"
) -> tuple[McpServer, ...]:
    """The servers of ``<project>/mcp.json`` and ``<home>/mcp.json``, as the daemon merges them.

    A missing file declares no servers. A name both declare is the project's
    (the first path wins, as the daemon's ``LoadAll``). Pass None to skip one.

    Raises:
        ValueError: A file that cannot be read or is not the daemon's schema.
    """
    merged: dict[str, McpServer] = {}
    for folder in (project, home):
        for server in _load(folder):
            merged.setdefault(server.name, server)
    return tuple(merged[name] for name in sorted(merged))
