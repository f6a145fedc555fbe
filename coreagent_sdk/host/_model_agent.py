"""`ModelAgent`: a model in the daemon's turn loop, with `call_peer` among its tools.

A core-agent daemon's turn is a loop: the model reads the system prompt (the
persona), the user's message and every tool result so far, and either
answers or asks for tools; the tools run and their results go back to the
model. `ModelAgent` runs that loop on a `Turn`, so the same agent runs on
the host in production, in the simulator's fleets and in tests with a
`ScriptedModel`.

The model reads what a daemon's model reads: the system prompt, then the
drained inbox as the daemon's `[Inbox]` bundle (`Turn.model_prompt`). One
model reply's tool calls (peers and Python tools together) are one event
with every call and, once all have answered, one event with every response,
as ADK writes them. A call the model gave no id gets one (``adk-<uuid>``,
as ADK mints it) for the events, and the model is shown its call as it
wrote it.

MCP servers a skill carries (`coreagent_sdk.mcp`) start with the agent
(`astart`, which an `AgentBuilder` awaits as it builds the runtime, and a
first turn otherwise), all at once, each with its skill's secrets. Their
tools are offered as ``<server>_<tool>``; each call asks the `gate` first
(``gate("mcp", "<server>_<tool>")``, the daemon's ``mcp:`` namespace, so
``AllowList(["mcp:files_*"])`` reads as its patterns), and is recorded as a
tool step naming its server. `aclose` stops them.

The bounds are ours to make explicit where a daemon relies on its watchdog:
at most `max_tool_rounds` rounds of tools, at most `max_peer_calls`
`call_peer` calls and `max_tool_calls` Python tool calls in one reply, and
`turn_timeout` for the whole turn. A
bound hit ends the turn with a `turn-error` naming the bound and the
setting to change (kind ``watchdog``, as the daemon's runaway guard ends a
turn; the deadline is ``transient_network`` and retryable, as a daemon
reports a turn that ran out of time).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .._attach._wire import AgentEvent, Content, FunctionCall, FunctionResponse, Part
from .._runtime._builder import RuntimeSpec
from .._scrub import register, scrub, server_text
from ..models._protocol import Message, Model, ModelError, ModelReply, ToolCall, ToolSpec
from ..models._tools import Skill, Tool
from ._agents import CALL_PEER_TOOL, Turn
from ._turn_steps import model_name, recorded_complete, recorded_tool

if TYPE_CHECKING:
    from ..mcp._toolset import McpServerStatus, McpTool, McpToolset

__all__ = [
    "CALL_PEER_SPEC",
    "DEFAULT_MAX_PEER_CALLS",
    "DEFAULT_MAX_TOOL_CALLS",
    "DEFAULT_MAX_TOOL_ROUNDS",
    "ModelAgent",
]

DEFAULT_MAX_TOOL_ROUNDS = 16
"""Rounds of tool calls a `ModelAgent` turn may make unless `max_tool_rounds=` says otherwise."""
DEFAULT_MAX_PEER_CALLS = 8
"""`call_peer` calls one model reply may ask for unless `max_peer_calls=` says otherwise."""
DEFAULT_MAX_TOOL_CALLS = 32
"""Python tool calls one model reply may ask for unless `max_tool_calls=` says otherwise."""
_MESSAGE_LIMIT = 500  # characters of a raising model's repr a turn-error quotes

CALL_PEER_SPEC = ToolSpec(
    CALL_PEER_TOOL,
    "Hand a request to another agent of the fleet, by its registered name, and get its "
    "answer back.\n\nUse it when the work belongs to an agent that can see what this one "
    "cannot. The peer answers in a new session of its own and knows nothing of this "
    "conversation, so the prompt must stand on its own.\n\nPeers register and expire, so "
    "they are not listed here: call with an empty peer name and the error lists the peers "
    "registered now. The result holds the peer's answer and the id of the session it ran in.",
    {
        "type": "object",
        "properties": {
            "peer": {
                "type": "string",
                "description": "The name of a registered peer agent (empty: the error lists "
                "the registered peers).",
            },
            "prompt": {
                "type": "string",
                "description": "The request for the peer, complete in itself: the peer sees "
                "none of this conversation.",
            },
        },
        "required": ["peer", "prompt"],
    },
)
"""The `call_peer` tool as a `ModelAgent`'s model is offered it (the daemon's: peer, prompt)."""

_event_ids = itertools.count(1)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"ModelAgent: {name} must be an int >= 0, got {value!r}")
    return value


def _response(value: Any) -> dict[str, Any]:
    """A tool's return value as a function response: a dict as is, anything else as `result`."""
    if not (isinstance(value, dict) and all(isinstance(k, str) for k in value)):
        value = {"result": value}
    # Scrubbed at the one chokepoint: a tool that echoes its secret does not leak it to
    # the model, the events or a recording.
    text = scrub(json.dumps(value, default=str))
    loaded: dict[str, Any] = json.loads(text)
    return loaded


class ModelAgent:
    """An agent whose turns a model drives: the daemon's loop of model, tools, model.

        agent = ModelAgent(model, persona="You route questions to the right specialist.")
        host = AgentHost("router", behavior=agent, directory=...)

    Each turn: the system prompt (the persona, then each skill's
    instructions), the user's message, then model -> tool calls -> tool
    results -> model until the model answers; its answer is the turn's.

    Tools: `call_peer` (the host's, through `Turn.call_peers`, so a model
    delegates by name, several peers at once in one reply, and an unknown
    name answers with the registered peers) and Python functions, given
    loose (`tools=`) or owned by `skills=`. A failed tool goes back to the
    model as ``{"error": ...}``. The events are the ADK shapes a daemon
    emits, and `turn-complete` carries the tokens the model reported.

    Args:
        model: Any `Model` (a `ScriptedModel`, an adapter, a recording).
        persona: The system prompt (empty: ``"You are {name}."``, the agent's name).
        tools: Python functions (or `Tool`s) every turn may call.
        skills: `Skill`s: their tools, and their secrets for those tools only.
        secrets: The secrets the skills draw from, by name (never shown).
        call_peer: Offer the `call_peer` tool (off: a model with local tools only).
        max_tool_rounds: Rounds of tool calls allowed in one turn.
        max_peer_calls: `call_peer` calls allowed in one model reply.
        max_tool_calls: Python tool calls allowed in one model reply (they run at once).
        turn_timeout: Seconds a whole turn may take (None: no bound of its own).
        gate: Asked before each MCP tool call as ``gate("mcp", name)`` (sync or async; it
            raises `PermissionDeniedError` to refuse, as `CallPeer`'s gate does). None:
            every MCP tool of its skills may be called.

    Attributes:
        model: The model it asks.
        persona: Its persona (the system prompt's first part).
        skills: Its skills.
        call_peer: Whether `call_peer` is offered.
        max_tool_rounds: Rounds of tool calls allowed in one turn.
        max_peer_calls: `call_peer` calls allowed in one model reply.
        max_tool_calls: Python tool calls allowed in one model reply.
        turn_timeout: Seconds a whole turn may take, or None.
        gate: What each MCP tool call asks first (``gate("mcp", name)``), or None.
    """

    def __init__(
        self,
        model: Model,
        *,
        persona: str = "",
        tools: Iterable[Callable[..., Any] | Tool] = (),
        skills: Iterable[Skill] = (),
        secrets: Mapping[str, str] | None = None,
        call_peer: bool = True,
        max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
        max_peer_calls: int = DEFAULT_MAX_PEER_CALLS,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        turn_timeout: float | None = None,
        gate: Callable[[str, str], Any] | None = None,
    ) -> None:
        if not callable(getattr(model, "complete", None)):
            raise TypeError(
                f"ModelAgent: {model!r} is not a model (it has no async complete(messages, "
                "tools)); give a ScriptedModel, an adapter, or your own Model"
            )
        if turn_timeout is not None and not turn_timeout > 0:
            raise ValueError(
                f"ModelAgent: turn_timeout must be seconds > 0 or None, got {turn_timeout!r}"
            )
        self.model = model
        self.persona = persona.strip()
        self.call_peer = call_peer
        self.max_tool_rounds = _positive("max_tool_rounds", max_tool_rounds)
        self.max_peer_calls = _positive("max_peer_calls", max_peer_calls)
        self.max_tool_calls = _positive("max_tool_calls", max_tool_calls)
        self.turn_timeout = turn_timeout
        self.gate = gate
        self.skills = tuple(skills)
        given = dict(secrets or {})
        self._mcp_servers: list[tuple[Any, Mapping[str, str]]] = []
        self._mcp: McpToolset | None = None
        self._mcp_starting: asyncio.Lock | None = None
        # Each tool and the secrets it may see: a skill's tools only their skill's.
        self._tools: dict[str, tuple[Tool, Mapping[str, str]]] = {}
        for fn in tools:
            self._add(fn if isinstance(fn, Tool) else Tool.from_function(fn), {})
        for skill in self.skills:
            if not isinstance(skill, Skill):
                raise TypeError(
                    f"ModelAgent: skills must be Skill values, got {skill!r}; "
                    "build them with Skill(name, tools=[...], secrets=[...])"
                )
            scoped = {name: given[name] for name in skill.secrets if name in given}
            for value in scoped.values():
                register(value)
            for tool in skill.tools:
                self._add(tool, scoped)
            # Each server gets its own skill's secrets, and only those.
            self._mcp_servers.extend((server, scoped) for server in skill.mcp_servers)
        self._own_specs = ((CALL_PEER_SPEC,) if call_peer else ()) + tuple(
            tool.spec for tool, _ in self._tools.values()
        )
        self._specs = self._own_specs

    def _add(self, tool: Tool, secrets: Mapping[str, str]) -> None:
        if (tool.name == CALL_PEER_TOOL and self.call_peer) or tool.name in self._tools:
            raise ValueError(
                f"ModelAgent: two tools are named {tool.name!r}; "
                "rename one with Tool.from_function(fn, name=...)"
            )
        self._tools[tool.name] = (tool, secrets)

    @classmethod
    def from_spec(
        cls, spec: RuntimeSpec, model: Model | Callable[[RuntimeSpec], Model], **options: Any
    ) -> ModelAgent:
        """The agent an `AgentBuilder` spec describes: its persona, its skills' tools and secrets.

        Use it as a `BuilderConfig` factory, with a `skill_catalog` of `Skill`s:
        ``factory=lambda spec: ModelAgent.from_spec(spec, model)``. `model` may
        be a function of the spec (a model per `spec.model`).

        Raises:
            TypeError: A skill of the spec is not a `Skill`.
        """
        skills = []
        for name in spec.skills:
            skill = spec.skill_defs.get(name)
            if not isinstance(skill, Skill):
                raise TypeError(
                    f"ModelAgent: skill {name!r} of agent {spec.agent_id!r} is "
                    f"{type(skill).__name__}, not a Skill; make the builder's skill_catalog "
                    "map names to Skill(name, tools=[...], secrets=[...])"
                )
            skills.append(skill)
        chosen = model if isinstance(model, Model) else model(spec)
        return cls(
            chosen,
            persona=spec.system_prompt,
            skills=skills,
            secrets=spec.secrets,
            **options,
        )

    @staticmethod
    async def runtime_agent(turn: Turn) -> None:
        """An agent that runs the turn's runtime, when that runtime is a `ModelAgent`.

        For hosts whose `RuntimeCache` builds each agent's runtime (its persona,
        skills and secrets) with ``ModelAgent.from_spec``: pass
        ``behavior=ModelAgent.runtime_agent`` and each turn runs its own agent's
        `ModelAgent`, leased for the turn as `turn.runtime`.
        """
        runtime = getattr(turn, "runtime", None)
        if not isinstance(runtime, ModelAgent):
            await turn.error(
                "config_error",
                f"ModelAgent.runtime_agent: agent {turn.agent!r} has runtime "
                f"{type(runtime).__name__}, not a ModelAgent; build runtimes with "
                "BuilderConfig(factory=lambda spec: ModelAgent.from_spec(spec, model))",
            )
            return
        await runtime(turn)

    def __repr__(self) -> str:
        return (
            f"ModelAgent({self.model!r}, tools=[{', '.join(s.name for s in self._specs)}], "
            f"max_tool_rounds={self.max_tool_rounds}, max_peer_calls={self.max_peer_calls}, "
            f"max_tool_calls={self.max_tool_calls})"
        )

    async def astart(self) -> None:
        """Start its skills' MCP servers, all at once, and offer their tools (once).

        A server that fails is reported once (a warning on ``coreagent_sdk.mcp``
        naming it, with its stderr's last lines, and in `mcp_status`); the agent
        runs without its tools. An `AgentBuilder` awaits this as it builds the
        runtime; otherwise the first turn does.
        """
        if not self._mcp_servers or self._mcp is not None:
            return
        if self._mcp_starting is None:
            self._mcp_starting = asyncio.Lock()
        async with self._mcp_starting:
            if self._mcp is not None:
                return
            from ..mcp._toolset import McpToolset

            toolset = McpToolset(self._mcp_servers)
            try:
                await toolset.start(taken=(s.name for s in self._own_specs))
            except BaseException:
                await toolset.aclose()
                raise
            self._mcp = toolset
            self._specs = self._own_specs + tuple(t.spec for t in toolset.tools)

    @property
    def mcp_tools(self) -> tuple[McpTool, ...]:
        """The MCP tools offered to the model (server, own name, schema, read_only)."""
        return self._mcp.tools if self._mcp is not None else ()

    @property
    def mcp_status(self) -> tuple[McpServerStatus, ...]:
        """Each MCP server of its skills: up with its tools, or why not (empty before `astart`)."""
        return self._mcp.status if self._mcp is not None else ()

    async def aclose_mcp(self) -> None:
        """Stop its MCP servers (SIGTERM, grace, SIGKILL to each one's process group).

        The next turn starts them again. A host's `aclose` calls this.
        """
        toolset, self._mcp = self._mcp, None
        self._specs = self._own_specs
        if toolset is not None:
            await toolset.aclose()

    async def aclose(self) -> None:
        """Stop its MCP servers and close the model, when it can be closed (an adapter's HTTP
        client); a `Fleet` and a `RuntimeCache` do this as they stop or evict it. An adapter
        closed so opens a fresh client on its next request, and servers start again."""
        await self.aclose_mcp()
        close = getattr(self.model, "aclose", None)
        if close is not None:
            await close()

    @property
    def model_name(self) -> str:
        """The model's name for a person: its configured id (``gpt-4o-mini``), else its class."""
        return model_name(self.model)

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        """The tools the model is offered, `call_peer` first."""
        return self._specs

    def system_prompt(self, agent: str) -> str:
        """The system prompt of agent `agent`: its persona, then its skills' instructions."""
        parts = [self.persona or f"You are {agent}."]
        parts += [s.instructions.strip() for s in self.skills if s.instructions.strip()]
        return "\n\n".join(parts)

    async def __call__(self, turn: Turn) -> None:
        """Run one turn of the loop on `turn`."""
        if self._mcp_servers and self._mcp is None:
            await self.astart()
        if self.turn_timeout is None:
            await self._loop(turn)
            return
        try:
            await asyncio.wait_for(self._loop(turn), self.turn_timeout)
        except asyncio.TimeoutError:
            await turn.error(
                "transient_network",
                f"ModelAgent: the turn did not finish within turn_timeout={self.turn_timeout:g}s; "
                "raise ModelAgent(turn_timeout=...) or ask for less in one turn",
                retryable=True,
                code="turn_timeout",
            )

    async def _loop(self, turn: Turn) -> None:
        # The drained inbox as a daemon's model reads it: the [Inbox] bundle, guidance and all.
        messages = [
            Message.system(self.system_prompt(turn.agent)),
            Message.user(turn.model_prompt),
        ]
        rounds = 0
        while True:
            reply = await self._ask(turn, messages)
            if reply.usage.total_tokens:  # none reported: the host's estimate stands
                turn.add_usage(reply.usage.input_tokens, reply.usage.output_tokens)
            if not reply.tool_calls:
                # A cut answer is still the answer; its event says it was cut, as ADK's does.
                await turn.say(reply.text, finish_reason="MAX_TOKENS" if reply.cut else "")
                return
            if rounds >= self.max_tool_rounds:
                await turn.error(
                    "watchdog",
                    f"ModelAgent: the model asked for tool round {rounds + 1}, over "
                    f"max_tool_rounds={self.max_tool_rounds}; raise "
                    "ModelAgent(max_tool_rounds=...) if the task needs more rounds",
                    code="max_tool_rounds",
                )
            rounds += 1
            await self._check_calls(turn, reply)
            # The model is shown its calls as it wrote them: an id minted for the events
            # (adk-<uuid>) is not its own, so it never sees one.
            messages.append(Message.assistant(reply.text, reply.tool_calls))
            messages.extend(await self._round(turn, reply))

    async def _check_calls(self, turn: Turn, reply: ModelReply) -> None:
        """End the turn if one reply asks for more calls at once than the bounds allow."""
        peers = sum(1 for c in reply.tool_calls if self._is_peer_call(c))
        if self.call_peer and peers > self.max_peer_calls:
            await turn.error(
                "watchdog",
                f"ModelAgent: the model asked for {peers} call_peer calls in one reply, over "
                f"max_peer_calls={self.max_peer_calls}; raise ModelAgent(max_peer_calls=...) "
                "to allow more at once",
                code="max_peer_calls",
            )
        local = len(reply.tool_calls) - peers
        if local > self.max_tool_calls:
            await turn.error(
                "watchdog",
                f"ModelAgent: the model asked for {local} tool calls in one reply, over "
                f"max_tool_calls={self.max_tool_calls}; raise ModelAgent(max_tool_calls=...) "
                "to allow more at once",
                code="max_tool_calls",
            )

    async def _ask(self, turn: Turn, messages: Sequence[Message]) -> ModelReply:
        try:
            reply = await recorded_complete(turn, self.model, messages, self._specs)
        except ModelError as exc:
            await turn.error(
                exc.kind,
                scrub(f"ModelAgent: the model failed: {exc}"),
                retryable=exc.retryable,
                code=str(exc.status) if exc.status is not None else None,
            )
            raise  # unreachable: turn.error raises
        except Exception as exc:
            said, cut = server_text(f"ModelAgent: the model raised {exc!r}", _MESSAGE_LIMIT)
            await turn.error("unknown", said + ("..." if cut else ""), retryable=False)
            raise  # unreachable
        if not isinstance(reply, ModelReply):
            await turn.error(
                "unknown",
                f"ModelAgent: the model returned {type(reply).__name__}, not a ModelReply; "
                "complete() must return coreagent_sdk.models.ModelReply",
            )
        return reply

    def _is_peer_call(self, call: ToolCall) -> bool:
        """Whether `call` goes to a peer: `call_peer` with string peer and prompt, nothing else."""
        args = call.arguments
        return (
            self.call_peer
            and call.name == CALL_PEER_TOOL
            and not call.error
            and isinstance(args.get("peer"), str)
            and isinstance(args.get("prompt"), str)
            and set(args) <= {"peer", "prompt"}
        )

    async def _round(self, turn: Turn, reply: ModelReply) -> list[Message]:
        """Run one reply's tool calls (peers and local tools at once); their results, in order.

        One model event holds the reply's words and every call, one user event every
        response once all are in, as ADK writes a reply's parallel calls.
        """
        calls = reply.tool_calls
        # ADK's populateClientFunctionCallID: a call without an id gets adk-<uuid>.
        ids = [c.id or f"adk-{uuid.uuid4()}" for c in calls]
        await self._emit(
            turn,
            ([Part(text=reply.text)] if reply.text else [])
            + [
                Part(function_call=FunctionCall(name=c.name, args=dict(c.arguments), id=i))
                for c, i in zip(calls, ids, strict=True)
            ],
        )
        peers = [c for c in calls if self._is_peer_call(c)]
        local = [c for c in calls if not self._is_peer_call(c)]

        async def run_peers() -> list[dict[str, Any]]:
            if not peers:
                return []
            pairs = [(str(c.arguments["peer"]), str(c.arguments["prompt"])) for c in peers]
            return await turn.ask_peers(pairs)

        async def run_local() -> list[dict[str, Any]]:
            return list(
                await asyncio.gather(
                    *(
                        recorded_tool(turn, c, self._run_tool(c), server=self._server_of(c))
                        for c in local
                    )
                )
            )

        if peers and local:
            peer_results, local_results = await asyncio.gather(run_peers(), run_local())
        else:  # one kind of call: no tasks to spawn for the other (the common case)
            peer_results, local_results = await run_peers(), await run_local()
        by_call = {
            id(c): r
            for c, r in itertools.chain(
                zip(peers, peer_results, strict=True), zip(local, local_results, strict=True)
            )
        }
        results = [by_call[id(c)] for c in calls]
        await self._emit(
            turn,
            [
                Part(function_response=FunctionResponse(name=c.name, response=r, id=i))
                for c, r, i in zip(calls, results, ids, strict=True)
            ],
            role="user",
        )
        return [
            Message.tool_result(c, json.dumps(r, default=str), is_error="error" in r)
            for c, r in zip(calls, results, strict=True)
        ]

    def _server_of(self, call: ToolCall) -> str:
        mcp = self._mcp.find(call.name) if self._mcp is not None else None
        return mcp.server if mcp is not None else ""

    async def _run_mcp(self, call: ToolCall) -> dict[str, Any] | None:
        """The MCP tool's answer, or None when `call` names no MCP tool."""
        toolset = self._mcp
        if toolset is None:
            return None
        tool = toolset.find(call.name)
        if tool is None:
            why = toolset.unavailable(call.name)
            return {"error": why} if why is not None else None
        if self.gate is not None:
            try:
                allowed = self.gate("mcp", tool.name)
                if inspect.isawaitable(allowed):
                    await allowed
            except Exception as exc:  # PermissionDeniedError, or a gate that failed
                return {"error": scrub(str(exc) or type(exc).__name__)}
        return _response(await toolset.call(tool, call.arguments))

    async def _run_tool(self, call: ToolCall) -> dict[str, Any]:
        if call.error:  # arguments the model wrote wrong: it reads why, the tool never runs
            return {"error": scrub(call.error)}
        entry = self._tools.get(call.name)
        if entry is None:
            answered = await self._run_mcp(call)
            if answered is not None:
                return answered
            if call.name == CALL_PEER_TOOL and self.call_peer:
                return {
                    "error": f"call_peer: give peer and prompt as strings, got "
                    f"{json.dumps(dict(call.arguments), default=str)[:200]}"
                }
            offered = ", ".join(s.name for s in self._specs) or "none"
            return {"error": f"ModelAgent: no tool named {call.name!r} (tools: {offered})"}
        tool, secrets = entry
        try:
            tool.check(call.arguments)
        except ValueError as exc:  # the model's arguments do not fit the schema
            return {"error": scrub(str(exc))}
        try:
            value = await tool.run(call.arguments, secrets=secrets)
        except Exception as exc:
            return {"error": scrub(f"{tool.name}: raised {type(exc).__name__}: {exc}")}
        return _response(value)

    @staticmethod
    async def _emit(turn: Turn, parts: Sequence[Part], role: str = "model") -> None:
        await turn.emit(
            AgentEvent(
                content=Content(role=role, parts=tuple(parts)),
                id=f"m-{next(_event_ids)}",
                timestamp=_now(),
                invocation_id=turn.invocation_id,
                author=turn.agent,
            )
        )
