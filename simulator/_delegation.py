"""Delegation trees: a simulated peer whose turn asks other peers of its fleet.

The invariant: a delegation inside the simulator never outlives the call that
caused it, so a tree of any depth, and a cycle (A asks B asks A), ends by
itself within the first caller's deadline. How each rule holds it:

- A delegating turn asks through a `CallPeer` of its own, made for the turn
  and closed with it, with its own deadline, byte cap and gate.
- When a simulated peer asks another simulated peer, it notes the deadline it
  gave that call against the callee's session (the id `session_opened`
  reports, before the prompt is injected). A delegating turn that finds such a
  deadline gives its own sub-calls at most half of the time left, keeping the
  other half to report back. Budgets halve at every hop, so a cycle stops
  dialing after about log2(timeout / 1 ms) hops; a turn left with under a
  millisecond does not dial at all and says which peer it could not ask.
- A sub-call that fails is narrated as a failed tool call; the turn then
  fails naming that peer (`delegate`) or reports it beside the others'
  answers (`fan_out`): never a partial answer that looks complete.

Each sub-call is narrated as a daemon shows a tool call: an event with a
`call_peer` function call part, then one with its function response.
Real daemons do not propagate deadlines between each other; this is the
simulator's own bookkeeping (one process holds every simulated peer, even
when served on loopback sockets).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coreagent_sdk import DEFAULT_MAX_RESPONSE_BYTES, CallPeer, CallPeerEvent, CallPeerResult, Gate
from coreagent_sdk.errors import CallPeerError, PeerTimeoutError, PeerTurnError
from coreagent_sdk.host import Agent as Behavior
from coreagent_sdk.host import Turn

__all__ = ["DEFAULT_DELEGATION_TIMEOUT", "MAX_FAN_OUT", "delegate", "fan_out"]

DEFAULT_DELEGATION_TIMEOUT = 30.0
MAX_FAN_OUT = 16  # peers one fan-out turn asks at most: a bounded number of requests
_KEEP = 0.5  # share of the time left that a hop may hand on; the rest is for reporting back
_MIN_BUDGET = 0.001  # under this a hop does not dial: it could only time out

# session id -> the monotonic deadline a simulated caller gave that session's turn. Keyed by
# the session alone: a directory may list a peer under another name than its daemon's.
_deadlines: dict[str, float] = {}
_call_ids = itertools.count(1)

Prompt = str | Callable[[str, str], str] | None
Join = Callable[[Sequence[tuple[str, CallPeerResult | CallPeerError]]], str]


def _tool(via: Any, options: dict[str, Any]) -> CallPeer:
    """The turn's own CallPeer: a served fleet's over its sockets, else in-process."""
    served = getattr(via, "_served", None)  # a Fleet that is being served right now
    source = served if served is not None else via
    if hasattr(source, "call_peer"):
        tool = source.call_peer(**options)
    elif callable(source):
        tool = source(**options)
    else:
        raise TypeError(
            f"delegate: via must be a Fleet, a ServedFleet or a callable returning a CallPeer, "
            f"got {type(via).__name__}"
        )
    if not isinstance(tool, CallPeer):
        raise TypeError(f"delegate: via made a {type(tool).__name__}, not a CallPeer")
    return tool


def _budget(turn: Turn, timeout: float) -> float:
    """This turn's time for its sub-calls: its own timeout, or half what its caller left it."""
    inherited = _deadlines.get(turn.session_id) if turn.session_id else None
    if inherited is None:
        return timeout
    return min(timeout, (inherited - time.monotonic()) * _KEEP)


def _prompt_for(prompt: Prompt, turn: Turn, peer: str) -> str:
    if prompt is None:
        return turn.prompt
    if isinstance(prompt, str):
        return prompt
    return prompt(turn.prompt, peer)


def _labelled(labels: Mapping[str, str], have: Mapping[str, str]) -> bool:
    return all(have.get(k, "") == v for k, v in labels.items())


def join_answers(gathered: Sequence[tuple[str, CallPeerResult | CallPeerError]]) -> str:
    """The default fan-out answer: one `peer: answer` (or `peer: failed: why`) block each."""
    blocks = []
    for peer, outcome in gathered:
        if isinstance(outcome, CallPeerResult):
            cut = " [truncated]" if outcome.truncated else ""
            blocks.append(f"{peer}: {outcome.response}{cut}")
        else:
            blocks.append(f"{peer}: failed: {outcome}")
    return "\n\n".join(blocks)


async def _ask_all(
    turn: Turn,
    tool: CallPeer,
    names: Sequence[str],
    prompt: Prompt,
    budget: float,
) -> list[tuple[str, CallPeerResult | CallPeerError]]:
    ids = {name: f"call-peer-{next(_call_ids)}" for name in names}
    prompts = {name: _prompt_for(prompt, turn, name) for name in names}
    for name in names:
        await turn.tool_call(tool.name, {"peer": name, "prompt": prompts[name]}, id=ids[name])

    async def ask(name: str) -> CallPeerResult | CallPeerError:
        if budget < _MIN_BUDGET:
            return PeerTimeoutError(
                f"{tool.name}: peer {json.dumps(name)} was not asked: the caller's deadline left "
                f"{max(budget, 0) * 1000:.1f} ms for this hop; give the first caller a longer "
                "timeout, or break the delegation cycle"
            )
        try:
            return await tool.acall(peer=name, prompt=prompts[name])
        except CallPeerError as exc:
            return exc

    outcomes = await asyncio.gather(*(ask(name) for name in names))
    gathered = list(zip(names, outcomes, strict=True))
    for name, outcome in gathered:
        if isinstance(outcome, CallPeerResult):
            response = outcome.to_dict()
        else:
            response = {"error": str(outcome), "error_type": type(outcome).__name__}
        await turn.tool_result(tool.name, response, id=ids[name])
    return gathered


def _behaviour(
    via: Any,
    choose: Callable[[Turn, CallPeer], Any],
    *,
    prompt: Prompt,
    join: Join,
    fail_fast: bool,
    timeout: float,
    max_response_bytes: int,
    gate: Gate | None,
    token_env: str | None,
    environ: Mapping[str, str] | None,
) -> Behavior:
    if not (0 < timeout <= 900):
        raise ValueError(
            f"delegate: timeout must be in (0, 900] seconds, got {timeout!r}; "
            f"the default is {DEFAULT_DELEGATION_TIMEOUT:g}"
        )

    async def run(turn: Turn) -> None:
        budget = _budget(turn, timeout)
        noted: list[str] = []
        started = time.monotonic()

        def note(event: CallPeerEvent) -> None:
            # Before the prompt lands: the callee's turn finds its deadline here.
            if event.kind == "session_opened":
                key = event.session_id
                _deadlines[key] = started + budget
                noted.append(key)

        options: dict[str, Any] = {
            "timeout": min(max(budget, _MIN_BUDGET), 900.0),
            "max_response_bytes": max_response_bytes,
            "gate": gate,
            "on_event": note,
        }
        if token_env is not None:
            options["token_env"] = token_env
        if environ is not None:
            options["environ"] = environ
        tool = _tool(via, options)
        try:
            names = await choose(turn, tool)
            gathered = await _ask_all(turn, tool, names, prompt, budget)
        finally:
            for key in noted:
                _deadlines.pop(key, None)
            await tool.aclose()
        failed = [(n, o) for n, o in gathered if isinstance(o, CallPeerError)]
        if fail_fast and failed:
            _, first = failed[0]
            kind, retryable = "unknown", False
            if isinstance(first, PeerTurnError):
                kind, retryable = first.kind, first.retryable
            await turn.error(kind, str(first), retryable)
        await turn.say(join(gathered))

    return run


def delegate(
    peer: str,
    *,
    via: Any,
    prompt: Prompt = None,
    timeout: float = DEFAULT_DELEGATION_TIMEOUT,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    gate: Gate | None = None,
    token_env: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Behavior:
    """Ask `peer` (through `via`: a `Fleet`, usually the peer's own) and answer with its answer.

    ``prompt`` is what to ask: None forwards the turn's prompt, a str is sent
    as is, a callable gets ``(turn_prompt, peer)``. ``timeout``,
    ``max_response_bytes`` and ``gate`` bound the sub-call as `CallPeer`'s
    do. A failed sub-call fails the turn with the sub-call's error, which
    names the peer (its kind when it was the peer's own turn error).
    """
    if not isinstance(peer, str) or not peer.strip():
        raise ValueError(f"delegate: peer must be a peer name, got {peer!r}")

    async def choose(turn: Turn, tool: CallPeer) -> list[str]:
        return [peer]

    def only(gathered: Sequence[tuple[str, CallPeerResult | CallPeerError]]) -> str:
        outcome = gathered[0][1]
        assert isinstance(outcome, CallPeerResult)  # a failure failed the turn first
        return outcome.response

    return _behaviour(
        via,
        choose,
        prompt=prompt,
        join=only,
        fail_fast=True,
        timeout=timeout,
        max_response_bytes=max_response_bytes,
        gate=gate,
        token_env=token_env,
        environ=environ,
    )


def fan_out(
    *,
    via: Any,
    labels: Mapping[str, str] | None = None,
    peers: Sequence[str] | None = None,
    prompt: Prompt = None,
    join: Join | None = None,
    fail_fast: bool = False,
    max_peers: int = MAX_FAN_OUT,
    timeout: float = DEFAULT_DELEGATION_TIMEOUT,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    gate: Gate | None = None,
    token_env: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Behavior:
    """Ask several peers at once and answer with what they said, joined.

    The peers are ``peers`` (names), or every peer of the directory whose
    labels match ``labels`` (all pairs), never the asking peer itself; at
    most ``max_peers`` of them (more fails the turn rather than ask a few).
    ``join`` turns ``[(peer, result or error), ...]`` into the answer
    (default: `join_answers`, a ``peer: answer`` block each, failures
    included). With ``fail_fast`` the first failure fails the turn instead.
    """
    if peers is not None and labels is not None:
        raise ValueError("fan_out: pass peers= (names) or labels= (a filter), not both")
    if isinstance(max_peers, bool) or not isinstance(max_peers, int) or max_peers < 1:
        raise ValueError(f"fan_out: max_peers must be a positive int, got {max_peers!r}")
    wanted = dict(labels or {})

    async def choose(turn: Turn, tool: CallPeer) -> list[str]:
        if peers is not None:
            names = sorted(set(peers))
        else:
            roster = await asyncio.wait_for(tool.directory.peers(), tool.timeout)
            names = sorted(
                {p.name for p in roster if p.name != turn.agent and _labelled(wanted, p.labels)}
            )
        if not names:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(wanted.items())) or "any"
            await turn.error(
                "config_error",
                f"fan_out: no peer to ask (labels: {shown}); register peers with those "
                "labels, or pass peers=[...]",
            )
        if len(names) > max_peers:
            await turn.error(
                "config_error",
                f"fan_out: {len(names)} peers match, more than max_peers={max_peers}; "
                "narrow the labels or raise max_peers",
            )
        return names

    return _behaviour(
        via,
        choose,
        prompt=prompt,
        join=join if join is not None else join_answers,
        fail_fast=fail_fast,
        timeout=timeout,
        max_response_bytes=max_response_bytes,
        gate=gate,
        token_env=token_env,
        environ=environ,
    )
