"""Python functions as a model's tools: a JSON Schema from the signature, the docstring's words.

A model is offered a tool as a `ToolSpec` (name, description, JSON Schema);
the loop runs it with the arguments the model chose. `Tool.from_function`
reads both from an ordinary function so that writing a tool is writing a
function: its annotations become the schema, its docstring's first part the
description and its ``Args:`` lines the parameters' descriptions.

A parameter named ``secrets`` is not offered to the model: it receives the
secrets of the skill that owns the tool (see `Skill`), and only those.

A skill may also carry MCP servers (`coreagent_sdk.mcp.StdioServer`,
`coreagent_sdk.mcp.HttpServer`): their tools join the skill's when the agent
starts them, and they too get that skill's secrets and no others.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Union

import attrs

from ._protocol import ToolSpec

__all__ = ["SECRETS_PARAMETER", "Skill", "Tool"]

SECRETS_PARAMETER = "secrets"
"""The parameter a tool function names to receive its skill's secrets (never in its schema)."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


def _schema(annotation: Any) -> dict[str, Any]:
    """The JSON Schema of one annotation; `{}` (anything) for what JSON cannot say."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if annotation in _SIMPLE:
        return dict(_SIMPLE[annotation])
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [member.value for member in annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return {"enum": list(args)}
    if origin is Union or origin is types.UnionType:
        options = [_schema(a) for a in args if a is not type(None)]
        nullable = len(options) < len(args)
        if len(options) == 1 and not nullable:
            return options[0]
        if nullable:
            options.append({"type": "null"})
        return {"anyOf": options}
    if annotation in (list, tuple, set, frozenset) or origin in (
        list,
        tuple,
        set,
        frozenset,
        Sequence,
        Iterable,
    ):
        schema: dict[str, Any] = {"type": "array"}
        if args:  # tuple[int, ...] and list[int] alike: items of the first type
            schema["items"] = _schema(args[0])
        return schema
    if annotation in (dict,) or origin in (dict, Mapping):
        return {"type": "object"}
    return {}


def _docstring(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The description (the docstring before its sections) and each `Args:` line's words."""
    doc = inspect.getdoc(fn) or ""
    described: dict[str, str] = {}
    summary: list[str] = []
    section = ""
    current = ""
    for line in doc.splitlines():
        header = line.strip().rstrip(":").lower()
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            section = header
            continue
        if not section:
            summary.append(line)
        elif section in ("args", "arguments", "parameters", "params"):
            match = re.match(r"^\s+(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if match and (len(line) - len(line.lstrip())) <= 4:
                current = match.group(1).lstrip("*")
                described[current] = match.group(2).strip()
            elif current and line.strip():
                described[current] = f"{described[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), described


def _call_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", type(fn).__name__))


@attrs.frozen
class Tool:
    """A Python function a model may call: its `ToolSpec` and the function itself.

    Build one with `Tool.from_function(fn)` (a `ModelAgent` does it for the
    plain functions you give it). Sync functions run in a worker thread, off
    the event loop; async ones are awaited.

    Attributes:
        name: The name the model calls it by.
        description: What it does, in the model's words.
        parameters: The JSON Schema of its arguments.
        fn: The function (sync or async).
        wants_secrets: Whether `fn` takes a ``secrets`` parameter.
    """

    name: str
    description: str
    parameters: Mapping[str, Any] = attrs.field(hash=False)
    fn: Callable[..., Any] = attrs.field(hash=False, repr=False)
    wants_secrets: bool = False

    @classmethod
    def from_function(
        cls, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
    ) -> Tool:
        """A tool from `fn`'s signature (the schema) and docstring (the words).

        Raises:
            TypeError: `fn` is not callable, or takes `*args`/`**kwargs`.
            ValueError: The name is not a valid tool name.
        """
        if not callable(fn):
            raise TypeError(f"Tool: {fn!r} is not a function; give a def or async def")
        tool_name = name or _call_name(fn)
        if not _NAME.match(tool_name):
            raise ValueError(
                f"Tool: name {tool_name!r} is not a tool name (letters, digits, _ and -, "
                "at most 64, not starting with a digit); pass Tool.from_function(fn, name=...)"
            )
        signature = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # an annotation that does not resolve: describe it as "anything"
            hints = {}
        summary, described = _docstring(fn)
        properties: dict[str, Any] = {}
        required: list[str] = []
        wants_secrets = False
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(
                    f"Tool: {tool_name}: *{param.name} cannot be described to a model; "
                    "name each argument"
                )
            if param.name == SECRETS_PARAMETER:
                wants_secrets = True
                continue
            schema = _schema(hints.get(param.name, param.annotation))
            if param.name in described:
                schema["description"] = described[param.name]
            if param.default is param.empty:
                required.append(param.name)
            elif param.default is None or isinstance(param.default, (str, int, float, bool)):
                schema["default"] = param.default
            properties[param.name] = schema
        parameters: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            parameters["required"] = required
        return cls(
            tool_name,
            description if description is not None else summary,
            parameters,
            fn,
            wants_secrets,
        )

    @property
    def spec(self) -> ToolSpec:
        """The tool as the model is offered it."""
        return ToolSpec(self.name, self.description, self.parameters)

    def check(self, arguments: Mapping[str, Any]) -> None:
        """Refuse arguments the schema does not allow: unknown, missing, or of the wrong JSON type.

        Raises:
            ValueError: Naming the argument, what was expected and what came.
        """
        properties: Mapping[str, Any] = self.parameters.get("properties", {})
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            raise ValueError(
                f"{self.name}: unknown argument(s) {', '.join(map(repr, unknown))}; "
                f"it takes {', '.join(properties) or 'none'}"
            )
        missing = [p for p in self.parameters.get("required", ()) if p not in arguments]
        if missing:
            raise ValueError(f"{self.name}: missing argument(s) {', '.join(map(repr, missing))}")
        for key, value in arguments.items():
            wanted = properties[key].get("type")
            allowed = _JSON_TYPES.get(wanted) if isinstance(wanted, str) else None
            if allowed is None:
                continue
            if isinstance(value, bool) and wanted in ("integer", "number"):
                allowed = ()
            if not isinstance(value, allowed):
                raise ValueError(
                    f"{self.name}: argument {key!r} must be {wanted}, got {type(value).__name__} "
                    f"{value!r:.80}"
                )

    async def run(
        self, arguments: Mapping[str, Any], *, secrets: Mapping[str, str] | None = None
    ) -> Any:
        """Check `arguments`, then call the function (a sync one in a worker thread)."""
        self.check(arguments)
        kwargs = dict(arguments)
        if self.wants_secrets:
            kwargs[SECRETS_PARAMETER] = dict(secrets or {})
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**kwargs)
        result = await asyncio.to_thread(self.fn, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


def _tools(value: Iterable[Callable[..., Any] | Tool]) -> tuple[Tool, ...]:
    return tuple(fn if isinstance(fn, Tool) else Tool.from_function(fn) for fn in value)


def _mcp_servers(value: Iterable[Any]) -> tuple[Any, ...]:
    # Checked by what they are, not imported: a plain `import coreagent_sdk` stays free of
    # the MCP modules (and the MCP SDK, which only starting a server imports).
    servers = tuple(value)
    for server in servers:
        if getattr(server, "transport", None) not in ("stdio", "http") or not hasattr(
            server, "max_result_bytes"
        ):
            raise TypeError(
                f"Skill: mcp_servers holds {server!r}, not an MCP server; give "
                "coreagent_sdk.mcp.StdioServer(...) or HttpServer(...), or read_mcp_json()"
            )
    return servers


def _secret_names(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


@attrs.frozen
class Skill:
    """A named set of tools, the secrets they need, and instructions for the model.

    An agent's skills (its `AgentConfig.skills`, chosen from an
    `AgentBuilder`'s `skill_catalog` of `Skill` values) decide which tools
    its model sees. A tool that takes a ``secrets`` parameter receives the
    secrets named here, from those the builder's `SecretSource` returned for
    that agent, and no others.

    Attributes:
        name: The skill's name (what `AgentConfig.skills` lists).
        tools: Its tools (functions are made `Tool`s).
        secrets: The names of the secrets its tools receive.
        instructions: Text added to the agent's system prompt when it has this skill.
        mcp_servers: MCP servers whose tools are the skill's too (`coreagent_sdk.mcp`),
            each given this skill's secrets.
    """

    name: str
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tools)
    secrets: tuple[str, ...] = attrs.field(default=(), converter=_secret_names)
    instructions: str = ""
    mcp_servers: tuple[Any, ...] = attrs.field(default=(), converter=_mcp_servers)
