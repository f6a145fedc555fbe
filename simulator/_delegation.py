"""Delegation trees: a simulated peer whose turn asks other peers of its fleet.

A sub-call is a tool call, as on a daemon: whatever becomes of it (an
unknown peer, a refusal by the gate, a timeout or a spent budget, the
callee's own turn-error, a cycle) goes back to the delegating turn as the
tool's result, and that turn goes on and answers. On a daemon `call_peer`'s
error is the function response ``{"error": ...}`` the model reads
(`callpeer.go: run`, ADK's `callTool`); a turn-error describes only the
daemon's own run. So here only a behaviour's own configuration (no peer
matches, more than `max_peers`) ends its turn with a turn-error.

Every tree ends by itself, but not with its caller: as on daemons, a caller
that gives up (its `CallPeer` deadline passed) does not stop the callee's
turn, so a tree may keep running after the call that caused it has failed.
What bounds it:

- A delegating turn asks through a `CallPeer` of its own, made for the turn
  and closed with it, with its own deadline, byte cap and gate.
- Inside a turn that another call of this process asked for, a `CallPeer`
  gives its calls at most half of the time its caller left (the SDK's own
  rule, which model-driven agents follow too): budgets halve at every hop,
  so a cycle stops dialing after about log2(timeout / 1 ms) hops; a call left
  with under a millisecond does not dial at all, and its answer names the
  cycle.

Each sub-call is narrated as a daemon shows a tool call: an event with a
`call_peer` function call part, then one with its function response.
Real daemons do not propagate deadlines between each other; the SDK does so
only between the agents of one process (every simulated peer, even when
served on loopback sockets).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coreagent_sdk import (
    DEFAULT_MAX_RESPONSE_BYTES,
    CallPeer,
    CallPeerResult,
    Gate,
    quote_name,
)
from coreagent_sdk.errors import CallPeerError
from coreagent_sdk.host import Agent as Behavior
from coreagent_sdk.host import Turn

__all__ = ["DEFAULT_DELEGATION_TIMEOUT", "MAX_FAN_OUT", "delegate", "fan_out"]

DEFAULT_DELEGATION_TIMEOUT = 30.0
MAX_FAN_OUT = 16  # peers one fan-out turn asks at most: a bounded number of requests
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


def _prompt_for(prompt: Prompt, turn: Turn, peer: str) -> str:
    if prompt is None:
        return turn.prompt
    if isinstance(prompt, str):
        return prompt
    return prompt(turn.prompt, peer)


def _labelled(labels: Mapping[str, str], have: Mapping[str, str]) -> bool:
    return all(have.get(k, "") == v for k, v in labels.items())


def _said(result: CallPeerResult) -> str:
    # The guide's promise: an answer the byte cap cut never reads as complete.
    return result.response + (" [truncated]" if result.truncated else "")


def _label(peer: str) -> str:
    # A name a hub listed is hostile: one with a line break could forge another block.
    # Plain names stay bare; any other is quoted (and cut) as the daemon's %q would.
    quoted = quote_name(peer)
    return peer if quoted == f'"{peer}"' and ": " not in peer else quoted


def _block(peer: str, outcome: CallPeerResult | CallPeerError) -> str:
    if isinstance(outcome, CallPeerResult):
        return f"{_label(peer)}: {_said(outcome)}"
    return f"{_label(peer)}: failed: {outcome}"


def join_answers(gathered: Sequence[tuple[str, CallPeerResult | CallPeerError]]) -> str:
    """The default fan-out answer: one `peer: answer` (or `peer: failed: why`) block each.

    A name that is not plain text (a line break, a control, ``": "``, over 200
    characters) is quoted as the daemon's ``%q`` quotes it, so no name can
    forge a block of its own.
    """
    return "\n\n".join(_block(peer, outcome) for peer, outcome in gathered)


async def _ask_all(
    turn: Turn,
    tool: CallPeer,
    names: Sequence[str],
    prompt: Prompt,
    fail_fast: bool,
) -> list[tuple[str, CallPeerResult | CallPeerError]]:
    ids = {name: f"call-peer-{next(_call_ids)}" for name in names}
    prompts = {name: _prompt_for(prompt, turn, name) for name in names}
    for name in names:
        await turn.tool_call(tool.name, {"peer": name, "prompt": prompts[name]}, id=ids[name])

    async def ask(name: str) -> CallPeerResult | CallPeerError:
        try:  # the tool itself halves the time inside a delegation and names a cycle
            return await tool.acall(peer=name, prompt=prompts[name])
        except CallPeerError as exc:
            return exc

    tasks = {name: asyncio.ensure_future(ask(name)) for name in names}
    try:
        pending = set(tasks.values())
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if fail_fast and any(isinstance(t.result(), CallPeerError) for t in done):
                break
    finally:
        # fail_fast stops asking the rest; a turn that is itself cancelled stops them all.
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
    first = next(
        (
            n
            for n, t in tasks.items()
            if not t.cancelled() and isinstance(t.result(), CallPeerError)
        ),
        None,
    )
    gathered: list[tuple[str, CallPeerResult | CallPeerError]] = []
    for name, task in tasks.items():
        if task.cancelled():
            outcome: CallPeerResult | CallPeerError = CallPeerError(
                f"{tool.name}: peer {quote_name(name)} was not waited for: peer "
                f"{quote_name(first or '?')} failed first, and fail_fast=True stops asking "
                "the rest"
            )
        else:
            outcome = task.result()
        gathered.append((name, outcome))
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
        options: dict[str, Any] = {
            "timeout": timeout,
            "max_response_bytes": max_response_bytes,
            "gate": gate,
        }
        if token_env is not None:
            options["token_env"] = token_env
        if environ is not None:
            options["environ"] = environ
        tool = _tool(via, options)
        try:
            names = await choose(turn, tool)
            if isinstance(names, str):  # choose could not list the peers: that is the answer
                await turn.say(names)
                return
            gathered = await _ask_all(turn, tool, names, prompt, fail_fast)
        finally:
            await tool.aclose()
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
    do. A failed sub-call is the tool's result, as on a daemon: the turn
    answers ``peer: failed: <the sub-call's error>`` (the error names the
    peer, and the peer's turn-error kind when its own turn failed). An
    answer the byte cap cut ends in `` [truncated]``.
    """
    if not isinstance(peer, str) or not peer.strip():
        raise ValueError(f"delegate: peer must be a peer name, got {peer!r}")

    async def choose(turn: Turn, tool: CallPeer) -> list[str]:
        return [peer]

    def only(gathered: Sequence[tuple[str, CallPeerResult | CallPeerError]]) -> str:
        ((name, outcome),) = gathered
        return _said(outcome) if isinstance(outcome, CallPeerResult) else _block(name, outcome)

    return _behaviour(
        via,
        choose,
        prompt=prompt,
        join=only,
        fail_fast=False,
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
    most ``max_peers`` of them (more fails the turn rather than ask a few:
    that, and no peer to ask, are the only turn-errors). A failed sub-call is
    a tool result, listed beside the others. ``join`` turns
    ``[(peer, result or error), ...]`` into the answer (default:
    `join_answers`, a ``peer: answer`` block each, failures included, a cut
    answer marked `` [truncated]``). With ``fail_fast`` the first failure
    stops asking the rest: their calls are cancelled and the turn answers
    with what it has, the rest listed as not waited for.
    """
    if peers is not None and labels is not None:
        raise ValueError("fan_out: pass peers= (names) or labels= (a filter), not both")
    if isinstance(max_peers, bool) or not isinstance(max_peers, int) or max_peers < 1:
        raise ValueError(f"fan_out: max_peers must be a positive int, got {max_peers!r}")
    wanted = dict(labels or {})

    async def choose(turn: Turn, tool: CallPeer) -> list[str] | str:
        if peers is not None:
            names = sorted(set(peers))
        else:
            try:
                roster = await asyncio.wait_for(tool.directory.peers(), tool.timeout)
            except (CallPeerError, TimeoutError) as exc:
                # The tool's own failure, not the turn's: answered, as a sub-call's is.
                why = str(exc) or f"no roster within {tool.timeout:.3g} s"
                return f"fan_out: could not list the peers to ask: {why}"
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
