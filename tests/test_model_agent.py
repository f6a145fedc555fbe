"""ModelAgent: the daemon's loop of model, tools, model, run on the agent host."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from coreagent_sdk import (
    AgentBuilder,
    AgentConfig,
    ASGITransport,
    AttachClient,
    BuilderConfig,
    Peer,
    RoutingTransport,
    RuntimeCache,
    StaticDirectory,
    TurnComplete,
    TurnError,
    UsageUpdate,
)
from coreagent_sdk._attach._inbox import inbox_block
from coreagent_sdk.host import (
    CALL_PEER_SPEC,
    DEFAULT_MAX_PEER_CALLS,
    DEFAULT_MAX_TOOL_ROUNDS,
    AgentHost,
    ModelAgent,
    Turn,
)
from coreagent_sdk.models import (
    Message,
    ModelError,
    ModelReply,
    ScriptedModel,
    ScriptState,
    Skill,
    ToolCall,
    ToolSpec,
    Usage,
    when,
)


@attrs.define
class Outcome:
    """What a caller saw of one turn: its agent events, and how it ended."""

    events: list[Any]
    complete: TurnComplete | None = None
    error: TurnError | None = None
    usage: UsageUpdate | None = None

    @property
    def answer(self) -> str:
        said = [e for e in self.events if e.author != "user" and e.text and not e.has_function]
        return str(said[-1].text) if said else ""

    def calls(self) -> list[Any]:
        return [p.function_call for e in self.events for p in e.content.parts if p.function_call]

    def responses(self) -> list[Any]:
        return [
            p.function_response for e in self.events for p in e.content.parts if p.function_response
        ]


async def run_turn(host: AgentHost, prompt: str, *, limit: float = 10) -> Outcome:
    """Ask `host` in-process and read its stream until the turn ends (and its usage-update)."""
    async with AttachClient("http://asker.test", transport=ASGITransport(host.app)) as client:
        session = await client.new_session()
        outcome = Outcome([])

        async def read() -> None:
            async with client.events(session) as frames:
                await client.inject(session, prompt)
                ended = False
                async for frame in frames:
                    name = type(frame).__name__
                    if name == "AgentFrame":
                        outcome.events.append(frame.event)
                    elif isinstance(frame, TurnComplete):
                        outcome.complete, ended = frame, True
                    elif isinstance(frame, TurnError):
                        outcome.error = frame
                        return
                    elif isinstance(frame, UsageUpdate) and ended:
                        outcome.usage = frame
                        return

        await asyncio.wait_for(read(), limit)
    return outcome


class Counting:
    """A peer that answers with the prompt upper-cased and counts its turns."""

    def __init__(self) -> None:
        self.turns = 0

    async def __call__(self, turn: Turn) -> None:
        self.turns += 1
        await turn.say(turn.prompt.upper())


def hosted(agent: Any, *peers: str) -> tuple[AgentHost, dict[str, Counting]]:
    """`agent` on a host whose `call_peer` reaches in-process peers named `peers`."""
    counters = {name: Counting() for name in peers}
    routes = RoutingTransport(
        {
            f"{name}.test": ASGITransport(
                AgentHost(name, behavior=counter, session_rate_limit=None).app
            )
            for name, counter in counters.items()
        }
    )
    directory = StaticDirectory([Peer(name, f"http://{name}.test") for name in peers])
    host = AgentHost("router", behavior=agent, directory=directory, peer_transport=routes)
    return host, counters


class Rounds:
    """A model asking for `rounds` rounds of `per_round` peer calls, then answering."""

    def __init__(self, rounds: int, per_round: int = 1, peer: str = "helper") -> None:
        self.rounds, self.per_round, self.peer = rounds, per_round, peer
        self.requests = 0

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        self.requests += 1
        done = sum(1 for m in messages if m.role == "assistant")
        if done >= self.rounds:
            return ModelReply(text=f"done after {done}", usage=Usage(10, 2))
        calls = [
            ToolCall(f"c{done}-{i}", "call_peer", {"peer": self.peer, "prompt": f"r{done}"})
            for i in range(self.per_round)
        ]
        return ModelReply(tool_calls=calls, usage=Usage(10, 2))


async def test_a_scripted_router_delegates_by_name_and_answers_with_the_peers_answer() -> None:
    model = ScriptedModel(when("disk").ask("storage", "disks for: {prompt}"))
    host, peers = hosted(ModelAgent(model, persona="You route."), "storage", "compute")

    outcome = await run_turn(host, "how full is the disk?")

    assert outcome.answer == "storage: DISKS FOR: HOW FULL IS THE DISK?"
    assert (peers["storage"].turns, peers["compute"].turns) == (1, 0)
    (call,) = outcome.calls()
    assert (call.name, dict(call.args)) == (
        "call_peer",
        {"peer": "storage", "prompt": "disks for: how full is the disk?"},
    )
    (response,) = outcome.responses()
    assert response.id == call.id and response.response["peer"] == "storage"
    assert call.id == "call-0-0"  # the model's own id for the call, as ADK records it
    await host.aclose()


async def test_the_model_reads_the_persona_the_inbox_bundle_and_each_tool_result_in_order() -> None:
    seen: list[tuple[Message, ...]] = []
    offered: list[tuple[str, ...]] = []

    class Watching(Rounds):
        async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Any:
            seen.append(tuple(messages))
            offered.append(tuple(t.name for t in tools))
            return await super().complete(messages, tools)

    host, _ = hosted(ModelAgent(Watching(1), persona="Be brief."), "helper")
    await run_turn(host, "hi")

    first, second = seen
    # The daemon's model reads the drained inbox as the [Inbox] bundle, guidance and all
    # (prependInboxMessages with bundleIsTheTurn: the daemon runs Run("") per inject).
    assert [(m.role, m.text) for m in first] == [
        ("system", "Be brief."),
        ("user", inbox_block(["hi"])),
    ]
    assert [m.role for m in second] == ["system", "user", "assistant", "tool"]
    assert second[3].tool_call_id == "c0-0" and not second[3].is_error
    assert json.loads(second[3].text)["response"] == "R0"
    assert offered == [("call_peer",), ("call_peer",)]
    await host.aclose()


async def test_without_a_persona_the_system_prompt_names_the_agent() -> None:
    agent = ModelAgent(ScriptedModel())
    assert agent.system_prompt("router") == "You are router."


async def test_turn_complete_and_usage_update_carry_the_tokens_the_model_reported() -> None:
    host, _ = hosted(ModelAgent(Rounds(2)), "helper")

    outcome = await run_turn(host, "a prompt long enough to estimate differently " * 10)

    assert outcome.complete is not None and outcome.usage is not None
    # Three model replies of Usage(10, 2): no estimate from the prompt's length.
    assert (outcome.complete.tokens_in, outcome.complete.tokens_out) == (30, 6)
    assert (outcome.usage.tokens_in_total, outcome.usage.tokens_out_total) == (30, 6)
    await host.aclose()


@pytest.mark.parametrize("limit", [0, 1, 3])
async def test_max_tool_rounds_allows_exactly_that_many_rounds(limit: int) -> None:
    model = Rounds(limit)
    host, peers = hosted(ModelAgent(model, max_tool_rounds=limit), "helper")

    outcome = await run_turn(host, "go")

    assert outcome.error is None and outcome.answer == f"done after {limit}"
    assert peers["helper"].turns == limit
    await host.aclose()


@pytest.mark.parametrize("limit", [0, 1, 3])
async def test_one_round_over_max_tool_rounds_is_a_watchdog_turn_error_naming_the_setting(
    limit: int,
) -> None:
    model = Rounds(limit + 1)
    host, peers = hosted(ModelAgent(model, max_tool_rounds=limit), "helper")

    outcome = await run_turn(host, "go")

    assert outcome.error is not None and outcome.complete is None
    assert (outcome.error.kind, outcome.error.code, outcome.error.retryable) == (
        "watchdog",
        "max_tool_rounds",
        False,
    )
    assert f"max_tool_rounds={limit}" in outcome.error.message
    assert "ModelAgent(max_tool_rounds=...)" in outcome.error.message
    assert peers["helper"].turns == limit  # the refused round called nobody
    assert model.requests == limit + 1
    await host.aclose()


async def test_the_default_bounds_are_the_documented_ones() -> None:
    agent = ModelAgent(Rounds(0))
    assert (agent.max_tool_rounds, agent.max_peer_calls) == (
        DEFAULT_MAX_TOOL_ROUNDS,
        DEFAULT_MAX_PEER_CALLS,
    )
    host, _ = hosted(ModelAgent(Rounds(DEFAULT_MAX_TOOL_ROUNDS + 1)), "helper")
    outcome = await run_turn(host, "go")
    assert outcome.error is not None and outcome.error.code == "max_tool_rounds"
    await host.aclose()


@pytest.mark.parametrize("limit", [1, 4])
async def test_max_peer_calls_allows_that_many_calls_in_one_reply_in_parallel(limit: int) -> None:
    host, peers = hosted(ModelAgent(Rounds(1, per_round=limit), max_peer_calls=limit), "helper")

    outcome = await run_turn(host, "go")

    assert outcome.error is None and peers["helper"].turns == limit
    events_with_calls = [e for e in outcome.events if any(p.function_call for p in e.content.parts)]
    assert len(events_with_calls) == 1  # one model event holds every call of the reply
    assert len(outcome.calls()) == limit
    await host.aclose()


@pytest.mark.parametrize("limit", [1, 4])
async def test_one_call_over_max_peer_calls_is_refused_before_any_call(limit: int) -> None:
    host, peers = hosted(ModelAgent(Rounds(1, per_round=limit + 1), max_peer_calls=limit), "helper")

    outcome = await run_turn(host, "go")

    assert outcome.error is not None
    assert (outcome.error.kind, outcome.error.code) == ("watchdog", "max_peer_calls")
    assert f"{limit + 1} call_peer calls" in outcome.error.message
    assert f"max_peer_calls={limit}" in outcome.error.message
    assert peers["helper"].turns == 0
    await host.aclose()


async def test_max_peer_calls_counts_per_reply_not_per_turn() -> None:
    host, peers = hosted(ModelAgent(Rounds(3, per_round=2), max_peer_calls=2), "helper")
    outcome = await run_turn(host, "go")
    assert outcome.error is None and peers["helper"].turns == 6
    await host.aclose()


class Stuck:
    """A model that answers only when released."""

    def __init__(self, replies_before: int = 0) -> None:
        self.release = asyncio.Event()
        self.replies_before = replies_before
        self.requests = 0

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        self.requests += 1
        if self.requests <= self.replies_before:
            return ModelReply(
                tool_calls=[
                    ToolCall(f"c{self.requests}", "call_peer", {"peer": "helper", "prompt": "x"})
                ]
            )
        await self.release.wait()
        return ModelReply(text="late")


async def test_a_turn_past_turn_timeout_is_a_retryable_turn_error_naming_the_setting() -> None:
    model = Stuck(replies_before=1)  # one round spent, then the model hangs
    host, peers = hosted(ModelAgent(model, turn_timeout=0.2), "helper")

    outcome = await run_turn(host, "go")

    assert outcome.error is not None
    assert (outcome.error.kind, outcome.error.code, outcome.error.retryable) == (
        "transient_network",
        "turn_timeout",
        True,
    )
    assert "turn_timeout=0.2s" in outcome.error.message
    assert peers["helper"].turns == 1 and model.requests == 2
    await host.aclose()


async def test_a_turn_within_turn_timeout_answers() -> None:
    host, _ = hosted(ModelAgent(Rounds(2), turn_timeout=5), "helper")
    outcome = await run_turn(host, "go")
    assert outcome.error is None and outcome.answer == "done after 2"
    await host.aclose()


class Recovering:
    """A model that guesses a peer name, reads the roster from the error, and asks again."""

    def __init__(self) -> None:
        self.roster: list[str] = []

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        results = [m for m in messages if m.role == "tool"]
        if not results:
            return ModelReply(
                tool_calls=[ToolCall("a", "call_peer", {"peer": "db", "prompt": "q"})]
            )
        last = json.loads(results[-1].text)
        if "error" in last:
            self.roster = re.findall(r'"([^"]+)"', last["error"].split("registered:")[1])
            pick = next(name for name in self.roster if "storage" in name)
            return ModelReply(
                tool_calls=[ToolCall("b", "call_peer", {"peer": pick, "prompt": "q"})]
            )
        return ModelReply(text=f"{last['peer']} says {last['response']}")


async def test_a_model_asking_an_unknown_peer_sees_the_roster_and_recovers() -> None:
    model = Recovering()
    host, peers = hosted(ModelAgent(model), "storage-1", "compute-1")

    outcome = await run_turn(host, "go")

    assert outcome.answer == "storage-1 says Q"
    assert model.roster == ["compute-1", "storage-1"]
    first, second = outcome.responses()
    assert set(first.response) == {"error"} and 'unknown peer "db"' in first.response["error"]
    assert second.response["peer"] == "storage-1"
    assert peers["storage-1"].turns == 1
    await host.aclose()


async def test_a_scripted_step_can_read_the_roster_from_an_empty_peer_name() -> None:
    def pick(state: ScriptState) -> list[ToolCall]:
        roster = json.loads(state.last[0].text)["error"]
        name = re.findall(r'"([^"]+)"', roster.split("registered:")[1])[0]
        return [ToolCall("b", "call_peer", {"peer": name, "prompt": "hello"})]

    model = ScriptedModel(when().ask("", "who is there?").step(pick))
    host, peers = hosted(ModelAgent(model), "only-one")
    outcome = await run_turn(host, "go")
    assert outcome.answer.endswith("only-one: HELLO")
    assert 'peer is required (registered: "only-one")' in outcome.answer
    assert peers["only-one"].turns == 1
    await host.aclose()


@pytest.mark.parametrize(
    ("kind", "retryable"), [("rate_limited", True), ("auth_error", False), ("config_error", False)]
)
async def test_a_model_error_is_the_turns_error_with_its_kind_and_retryable(
    kind: str, retryable: bool
) -> None:
    class Failing:
        async def complete(self, messages: Any, tools: Any) -> ModelReply:
            raise ModelError("the API said no", kind=kind, retryable=retryable, status=429)

    host, _ = hosted(ModelAgent(Failing()), "helper")
    outcome = await run_turn(host, "go")
    assert outcome.error is not None
    assert (outcome.error.kind, outcome.error.retryable, outcome.error.code) == (
        kind,
        retryable,
        "429",
    )
    assert "the API said no" in outcome.error.message
    await host.aclose()


async def test_a_scripted_model_without_a_matching_rule_ends_the_turn_saying_so() -> None:
    host, _ = hosted(ModelAgent(ScriptedModel(when("disk").answer("ok"))), "helper")
    outcome = await run_turn(host, "what about cpu?")
    assert outcome.error is not None and outcome.error.kind == "config_error"
    assert "no rule matches the prompt 'what about cpu?'" in outcome.error.message
    assert "when('disk')" in outcome.error.message
    await host.aclose()


async def test_a_model_that_raises_is_an_unknown_turn_error_not_a_hang() -> None:
    class Broken:
        async def complete(self, messages: Any, tools: Any) -> ModelReply:
            raise RuntimeError("bug in the adapter")

    class WrongType:
        async def complete(self, messages: Any, tools: Any) -> Any:
            return "just text"

    for model, words in ((Broken(), "bug in the adapter"), (WrongType(), "not a ModelReply")):
        host, _ = hosted(ModelAgent(model), "helper")
        outcome = await run_turn(host, "go")
        assert outcome.error is not None and outcome.error.kind == "unknown"
        assert words in outcome.error.message
        await host.aclose()


def forecast(city: str, days: int = 1) -> dict[str, Any]:
    """The weather forecast of a city.

    Args:
        city: The city's name.
        days: How many days ahead.
    """
    return {"city": city, "days": days, "thread": threading.get_ident()}


async def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def broken(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"cannot do {x}")


async def test_python_tools_run_sync_ones_off_the_loop_and_answer_as_function_responses() -> None:
    model = ScriptedModel(
        when().call("forecast", city="Oslo", days=2).call("shout", text="{prompt}")
    )
    host, _ = hosted(ModelAgent(model, tools=[forecast, shout]), "helper")

    outcome = await run_turn(host, "hey")

    assert outcome.answer.splitlines()[1] == "shout: HEY"
    first, second = outcome.responses()
    assert first.name == "forecast" and first.response["city"] == "Oslo"
    assert first.response["thread"] != threading.get_ident()  # ran in a worker thread
    assert second.response == {"result": "HEY"}
    assert [c.name for c in outcome.calls()] == ["forecast", "shout"]
    await host.aclose()


async def test_a_failed_tool_an_unknown_tool_and_bad_arguments_answer_with_an_error() -> None:
    model = ScriptedModel(
        when().step(
            lambda state: [
                ToolCall("1", "broken", {"x": 3}),
                ToolCall("2", "nosuch", {}),
                ToolCall("3", "forecast", {"town": "Oslo"}),
                ToolCall("4", "forecast", {"city": 5}),
            ]
        )
    )
    host, _ = hosted(ModelAgent(model, tools=[broken, forecast]), "helper")

    outcome = await run_turn(host, "go")

    errors = [r.response["error"] for r in outcome.responses()]
    assert errors[0] == "broken: raised RuntimeError: cannot do 3"
    assert errors[1] == "ModelAgent: no tool named 'nosuch' (tools: call_peer, broken, forecast)"
    assert errors[2] == "forecast: unknown argument(s) 'town'; it takes city, days"
    assert errors[3] == "forecast: argument 'city' must be string, got int 5"
    assert outcome.error is None  # the turn goes on: the model answers
    assert outcome.answer.count("failed") == 4
    await host.aclose()


async def test_a_skills_tool_gets_its_skills_secrets_and_never_shows_them() -> None:
    def whoami(secrets: dict[str, str]) -> str:
        """Which secrets this tool sees (echoes one, as a careless tool might)."""
        return f"{sorted(secrets)} {secrets.get('GH_TOKEN', '')}"

    def peek(secrets: dict[str, str]) -> str:
        """A tool of another skill."""
        return str(sorted(secrets))

    token = "ghp_" + "s3cr3t" * 6
    skills = [
        Skill("github", tools=[whoami], secrets=["GH_TOKEN"], instructions="Use whoami."),
        Skill("other", tools=[peek], secrets=["OTHER"]),
    ]
    model = ScriptedModel(when().call("whoami").call("peek"))
    agent = ModelAgent(
        model,
        skills=skills,
        secrets={"GH_TOKEN": token, "OTHER": "other-7f3a9c2e51", "UNUSED": "unused-0b8d44e6a7"},
    )
    assert agent.system_prompt("a") == "You are a.\n\nUse whoami."
    host, _ = hosted(agent, "helper")

    outcome = await run_turn(host, "go")

    first, second = outcome.responses()
    assert first.response["result"] == "['GH_TOKEN'] [redacted]"
    assert second.response["result"] == "['OTHER']"
    assert token not in repr(outcome.events) and token not in outcome.answer
    await host.aclose()


class Recording:
    """A model that plays `inner` and keeps every message it was sent."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.sent: list[Message] = []

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        self.sent.extend(messages)
        return await self.inner.complete(messages, tools)


async def test_a_skills_tool_that_raises_with_its_secret_shows_the_error_without_the_secret() -> (
    None
):
    token = "dpl_" + "k3yv4l" * 5

    def deploy(secrets: dict[str, str]) -> str:
        """Deploys; fails quoting its credential, as a careless client library does."""
        raise RuntimeError(f"401 from the deploy API: token {secrets['DEPLOY_TOKEN']} refused")

    # The scripted model repeats the tool's result in its answer, so the caller reads it too.
    model = Recording(ScriptedModel(when().call("deploy").answer("{results}")))
    agent = ModelAgent(
        model,
        skills=[Skill("deploys", tools=[deploy], secrets=["DEPLOY_TOKEN"])],
        secrets={"DEPLOY_TOKEN": token},
    )
    host, _ = hosted(agent)

    outcome = await run_turn(host, "ship it")

    (response,) = outcome.responses()
    said = "deploy: raised RuntimeError: 401 from the deploy API: token [redacted] refused"
    assert response.response == {"error": said}  # the error reaches the events, scrubbed
    assert [m.text for m in model.sent if m.role == "tool"] == [json.dumps({"error": said})]
    assert outcome.answer == f"deploy failed: {said}"
    seen = repr(outcome.events) + repr(model.sent) + outcome.answer
    assert token not in seen
    await host.aclose()


def test_call_peer_is_offered_with_the_daemons_argument_names() -> None:
    assert CALL_PEER_SPEC.name == "call_peer"
    assert CALL_PEER_SPEC.parameters["required"] == ["peer", "prompt"]
    assert "empty peer name" in CALL_PEER_SPEC.description
    assert [t.name for t in ModelAgent(ScriptedModel(), call_peer=False).tools] == []


def test_bad_settings_are_refused_naming_the_value() -> None:
    with pytest.raises(ValueError, match="max_tool_rounds must be an int >= 0, got -1"):
        ModelAgent(ScriptedModel(), max_tool_rounds=-1)
    with pytest.raises(ValueError, match="turn_timeout must be seconds > 0"):
        ModelAgent(ScriptedModel(), turn_timeout=0)
    with pytest.raises(TypeError, match="is not a model"):
        ModelAgent("gpt-4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two tools are named 'forecast'"):
        ModelAgent(ScriptedModel(), tools=[forecast, forecast])


class Vault:
    """A SecretSource: each agent's secrets, for the skills it asks with."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    async def resolve_secrets(self, agent_id: str, skill_names: tuple[str, ...]) -> dict[str, str]:
        self.asked.append((agent_id, skill_names))
        values = {
            "github": {"GH_TOKEN": f"ghp-{agent_id}-" + "5e1f9a0c3b7d"},
            "pager": {"PD": "pd-91c0ad55e3f2"},
        }
        return {k: v for s in skill_names for k, v in values.get(s, {}).items()}


def token_seen(secrets: dict[str, str]) -> str:
    """The names of the secrets this tool was given."""
    return ",".join(sorted(secrets)) or "none"


def paged(secrets: dict[str, str]) -> str:
    """The pager skill's tool."""
    return ",".join(sorted(secrets)) or "none"


async def test_an_agents_skills_choose_its_tools_and_their_secrets_reach_only_it() -> None:
    catalog = {
        "github": Skill("github", tools=[token_seen], secrets=["GH_TOKEN"]),
        "pager": Skill("pager", tools=[paged], secrets=["PD"]),
    }
    vault = Vault()
    offered: dict[str, list[str]] = {}

    class Offered:
        def __init__(self, agent: str) -> None:
            self.agent = agent

        async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Any:
            offered[self.agent] = [t.name for t in tools]
            return ModelReply(text="ok")

    builder = AgentBuilder(
        BuilderConfig(
            factory=lambda spec: ModelAgent.from_spec(spec, lambda s: Offered(s.agent_id)),
            secrets=vault,
            skill_catalog=catalog,
        )
    )
    dev = await builder.build(AgentConfig("dev", "dev", persona="You code.", skills=("github",)))
    ops = await builder.build(AgentConfig("ops", "ops", skills=("pager",)))

    for agent in (dev, ops):
        host, _ = hosted(agent, "helper")
        await run_turn(host, "go")
        await host.aclose()
    assert offered == {"dev": ["call_peer", "token_seen"], "ops": ["call_peer", "paged"]}
    assert dev.system_prompt("dev") == "You code." and ops.system_prompt("ops") == "You are ops."
    assert vault.asked == [("dev", ("github",)), ("ops", ("pager",))]

    # Each skill's tool sees its own secrets only, on its own agent only.
    both = await builder.build(AgentConfig("both", "both", skills=("github", "pager")))
    scripted = ScriptedModel(when().call("token_seen").call("paged"))
    host, _ = hosted(
        ModelAgent.from_spec(
            await builder.spec(AgentConfig("both", "both", skills=("github", "pager"))), scripted
        ),
        "helper",
    )
    outcome = await run_turn(host, "go")
    await host.aclose()
    assert [r.response["result"] for r in outcome.responses()] == ["GH_TOKEN", "PD"]
    assert [t.name for t in both.tools] == ["call_peer", "token_seen", "paged"]


async def test_a_skill_that_is_not_a_skill_value_is_refused_naming_the_fix() -> None:
    builder = AgentBuilder(
        BuilderConfig(
            factory=lambda spec: ModelAgent.from_spec(spec, ScriptedModel()),
            skill_catalog={"github": {"tools": []}},
        )
    )
    with pytest.raises(TypeError, match="skill 'github' of agent 'dev' is dict, not a Skill"):
        await builder.build(AgentConfig("dev", "dev", skills=("github",)))


async def test_runtime_agent_runs_the_turns_model_agent_or_says_what_it_got() -> None:
    agent = ModelAgent(ScriptedModel(when().answer("from the runtime")))

    async def with_runtime(turn: Turn) -> None:
        turn.runtime = agent  # type: ignore[attr-defined]  # as a host with runtimes sets it
        await ModelAgent.runtime_agent(turn)

    host, _ = hosted(with_runtime, "helper")
    assert (await run_turn(host, "go")).answer == "from the runtime"
    await host.aclose()
    host, _ = hosted(ModelAgent.runtime_agent, "helper")
    outcome = await run_turn(host, "go")
    assert outcome.error is not None and outcome.error.kind == "config_error"
    assert "has runtime NoneType, not a ModelAgent" in outcome.error.message
    await host.aclose()


async def test_on_a_host_with_runtimes_each_turn_runs_its_agents_own_skills_and_secrets() -> None:
    class Configs:
        async def agent_slug(self, agent_id: str) -> str:
            return agent_id

        async def load_config(self, agent_id: str) -> AgentConfig:
            skills = {"dev": ("github",), "ops": ("pager",)}[agent_id]
            return AgentConfig(agent_id, agent_id, persona=f"You are {agent_id}.", skills=skills)

    catalog = {
        "github": Skill("github", tools=[token_seen], secrets=["GH_TOKEN"]),
        "pager": Skill("pager", tools=[paged], secrets=["PD"]),
    }

    def script(spec: Any) -> ScriptedModel:
        return ScriptedModel(when().call((spec.skills[0] == "github" and "token_seen") or "paged"))

    cache = RuntimeCache(
        Configs(),
        AgentBuilder(
            BuilderConfig(
                factory=lambda spec: ModelAgent.from_spec(spec, script),
                secrets=Vault(),
                skill_catalog=catalog,
            )
        ),
    )
    seen = {}
    for agent_id in ("dev", "ops"):
        host = AgentHost(agent_id, behavior=ModelAgent.runtime_agent, runtimes=cache)
        outcome = await run_turn(host, "go")
        seen[agent_id] = [(r.name, r.response["result"]) for r in outcome.responses()]
        await host.aclose()
    await cache.aclose()
    assert seen == {"dev": [("token_seen", "GH_TOKEN")], "ops": [("paged", "PD")]}


async def test_a_reply_asking_a_peer_and_a_python_tool_is_one_event_of_calls_one_of_answers() -> (
    None
):
    def clock() -> str:
        """The time."""
        return "noon"

    model = ScriptedModel(
        when("time").step(
            lambda state: [
                ToolCall("p1", "call_peer", {"peer": "helper", "prompt": "what day?"}),
                ToolCall("t1", "clock", {}),
            ]
        )
    )
    host, peers = hosted(ModelAgent(model, tools=[clock]), "helper")
    outcome = await run_turn(host, "what time is it?")
    await host.aclose()

    assert outcome.error is None and peers["helper"].turns == 1
    with_parts = [e for e in outcome.events if e.author != "user" and e.has_function]
    # As ADK writes one reply's parallel calls (and the model-agents guide shows them):
    # one model event with every call in the model's order, one event with every response.
    calls, answers = with_parts
    assert [(p.function_call.name, p.function_call.id) for p in calls.content.parts] == [
        ("call_peer", "p1"),
        ("clock", "t1"),
    ]
    assert answers.content.role == "user"
    assert [(p.function_response.name, p.function_response.id) for p in answers.content.parts] == [
        ("call_peer", "p1"),
        ("clock", "t1"),
    ]
    assert answers.content.parts[1].function_response.response == {"result": "noon"}
    assert answers.content.parts[0].function_response.response["response"] == "WHAT DAY?"


async def test_a_model_raising_a_huge_error_ends_the_turn_with_a_bounded_scrubbed_message() -> None:
    secret = "sk-model-agent-" + "q" * 24

    class Raising:
        async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Any:
            raise RuntimeError("frame " + "x" * 20_000 + f" key={secret}")

    agent = ModelAgent(
        Raising(),
        skills=[Skill("vault", secrets=["key"])],
        secrets={"key": secret},
    )
    host, _ = hosted(agent)
    outcome = await run_turn(host, "go")
    await host.aclose()
    assert outcome.error is not None and outcome.error.kind == "unknown"
    assert outcome.error.message.startswith("ModelAgent: the model raised RuntimeError('frame xxx")
    assert len(outcome.error.message) <= 503 and outcome.error.message.endswith("...")
    assert secret not in outcome.error.message


async def test_a_behaviour_raising_with_a_huge_repr_gets_a_bounded_turn_error() -> None:
    async def raising(turn: Turn) -> None:
        raise ValueError("a whole frame: " + "y" * 50_000)

    host = AgentHost("raiser", behavior=raising, session_rate_limit=None)
    outcome = await run_turn(host, "go")
    await host.aclose()
    assert outcome.error is not None
    assert outcome.error.message.startswith("behaviour raised ValueError('a whole frame: yyy")
    assert len(outcome.error.message) <= 503


async def test_a_behaviour_saying_a_lone_surrogate_completes_its_turn_with_u_fffd() -> None:
    async def split(turn: Turn) -> None:
        await turn.say("half a pair: \ud83d, and on")

    host = AgentHost("splitter", behavior=split, session_rate_limit=None)
    outcome = await run_turn(host, "go")
    await host.aclose()
    assert outcome.error is None and outcome.complete is not None
    assert outcome.answer == "half a pair: \ufffd, and on"
