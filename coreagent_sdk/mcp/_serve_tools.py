"""The MCP face of a peer: its tool's name, schemas, description and results.

Mode A of core-agent's `docs/bidirectional-mcp-design.md` (agent-as-tool): one
tool per agent, one `request` string in, the agent's final answer out. The
answer comes through `CallPeer`, so the result also carries what a delegation
knows (the peer's session, the byte cap and whether it cut the answer) as the
tool's structured content, described by an output schema.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs
import mcp_types as types

from .._attach._agentcard import AgentCard
from .._peer._results import CallPeerResult
from .._scrub import scrub, server_text

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "REQUEST_SCHEMA",
    "RESULT_SCHEMA",
    "ServedTool",
    "card_description",
    "error_result",
    "plain_description",
    "tool_name",
    "tool_result",
]

MAX_DESCRIPTION_CHARS = 2000
"""The most characters of a peer's own words a tool's description carries."""

# What function-calling APIs accept (OpenAI and Anthropic both): an MCP host hands these
# names to its model, and MCP's own 128-character limit is wider than the model's.
_NAME_CUT = 64
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")

_TAKES = (
    " Takes one `request` string (the task, in natural language) and returns the agent's "
    "final answer; the agent works in a fresh session of its own, so say everything it needs."
)

REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "request": {
            "type": "string",
            "description": "The question or task for the agent, in natural language.",
        }
    },
    "required": ["request"],
    "additionalProperties": False,
}
"""A served agent's input: one `request` string (the daemon's mode A)."""

RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "peer": {"type": "string", "description": "The agent that answered."},
        "session_id": {
            "type": "string",
            "description": "The agent's session the call ran in (the rest of a cut answer).",
        },
        "response": {"type": "string", "description": "The agent's final answer."},
        "duration_ms": {"type": "integer", "description": "How long the call took."},
        "truncated": {
            "type": "boolean",
            "description": "True when the answer was longer than the byte cap and was cut.",
        },
        "max_response_bytes": {
            "type": ["integer", "null"],
            "description": "The byte cap (UTF-8) the call ran with.",
        },
    },
    "required": ["peer", "session_id", "response", "duration_ms", "truncated"],
}
"""A served agent's structured result: what `CallPeer` returns, `truncated` always present."""


def tool_name(peer: str) -> str:
    """The tool name of a peer: characters a model cannot take become `_`, cut to 64; "" when
    nothing is left (a name of only such characters cannot be told from others)."""
    name = _NOT_NAME.sub("_", peer)[:_NAME_CUT]
    return "" if not name.strip("_") else name


@attrs.frozen
class ServedTool:
    """One served tool: its name, the peer it asks, and what the MCP host reads about it.

    Attributes:
        name: The tool's name (the peer's, made fit for a model).
        peer: The peer's name, as `CallPeer` asks it.
        description: The tool's description (from the peer's agent card when it has one).
    """

    name: str
    peer: str
    description: str

    def tool(self) -> types.Tool:
        """The `tools/list` entry."""
        return types.Tool(
            name=self.name,
            description=self.description,
            input_schema=REQUEST_SCHEMA,
            output_schema=RESULT_SCHEMA,
        )


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return f" Labels: {server_text(shown, 200)[0]}."


def plain_description(peer: str, labels: Mapping[str, str] | None = None) -> str:
    """What a tool says of a peer without an agent card."""
    said, _ = server_text(peer, 200)
    return f"Ask the agent {said!r} to do a task.{_labels(labels or {})}{_TAKES}"


def card_description(card: AgentCard, peer: str, labels: Mapping[str, str] | None = None) -> str:
    """What a tool says of a peer from its agent card: its description and skills, cut and
    scrubbed (a card is the peer's own text), then how to call it."""
    said = card.description.strip() or f"The agent {peer!r}."
    skills = "; ".join(
        f"{s.name or s.id}: {s.description}" if s.description else (s.name or s.id)
        for s in card.skills
    )
    text = said + (f" Skills: {skills}." if skills else "")
    text, cut = server_text(text, MAX_DESCRIPTION_CHARS)
    return text + ("..." if cut else "") + _labels(labels or {}) + _TAKES


def tool_result(result: CallPeerResult) -> types.CallToolResult:
    """An answered call: the answer as text, and the call's facts as structured content."""
    content: list[types.ContentBlock] = [types.TextContent(text=result.response)]
    if result.truncated:
        # A host's model reads the text, not the structured content: say the answer is cut.
        content.append(
            types.TextContent(
                text=f"[cut at {result.max_response_bytes} bytes; the whole answer is in session "
                f"{result.session_id} of {result.peer}]"
            )
        )
    structured = {**result.to_dict(), "truncated": result.truncated}
    structured["max_response_bytes"] = result.max_response_bytes
    return types.CallToolResult(content=content, structured_content=structured)


def error_result(message: str) -> types.CallToolResult:
    """A call the agent could not answer (its turn failed, it timed out, it left): a tool
    error, as the daemon's design says, so the host's model reads why and may go on."""
    return types.CallToolResult(content=[types.TextContent(text=scrub(message))], is_error=True)
