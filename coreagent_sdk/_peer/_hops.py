"""Delegation deadlines between the agents of one process: each hop hands on half its time.

A delegation tree is turns asking turns: a `CallPeer` call opens a session on
a peer, whose turn may call further. Nothing on the wire carries the caller's
deadline (real daemons do not propagate one), so a cycle (an agent asking
itself, two asking each other) used to open turn after turn, each with a
fresh deadline, holding connections of its agent's own tool for minutes.
Within one process (the simulator's fleets, hosts served side by side, even
on loopback sockets) the deadline is passed along here:

- When a `CallPeer` call opens a session, it notes that session's deadline
  and the agents that asked so far (the path), before the prompt is injected.
- A host's turn in that session takes the note as it starts (`entering`),
  and every call its agent makes gets at most half of the time left
  (`budget`), keeping the other half to report back. A call from outside any
  turn has the whole path to itself.
- A call left with under a millisecond does not dial (`not_asked`), and a
  timeout inside a cycle says so (`in_cycle`): budgets halve at every hop, so
  a cycle stops after about log2(timeout / 1 ms) hops, within its first
  caller's deadline, and its answer names the cycle.

The notes are the process's own; a session the callee never runs a turn in
is forgotten when the call ends.

A note also names the call that made it (`call_id`), so a turn knows which call of
this process it answers (`Turn.call_id`): a simulated fleet hangs the turn's own
calls under that call in its call tree. An A2A call has no session before its
message lands (the message opens it, and the task id comes back after), so it
notes the message instead, by the id it chose (`note_message`); a host of this
process that runs the message hands the note on to the session it opens, before
the turn can start (`hand_on`).
"""

from __future__ import annotations

import contextvars
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

from .._attach._quote import quote_name
from ..errors import PeerTimeoutError

__all__ = [
    "KEEP",
    "MIN_BUDGET",
    "STARTUP_SESSION",
    "Budget",
    "budget",
    "cycle",
    "entering",
    "entering_message",
    "forget",
    "forget_message",
    "hand_on",
    "in_cycle",
    "not_asked",
    "note",
    "note_message",
]

KEEP = 0.5
"""Share of its time left a hop may hand on; the rest is for reporting back."""
MIN_BUDGET = 0.001
"""Under this many seconds a call does not dial: it could only time out."""
STARTUP_SESSION = "default"
"""The session a daemon starts with (every one has it; no call opens it)."""
_SHOWN_HOPS = 8  # agents of a long delegation path a message names
_MAX_NOTES = 10_000  # sessions noted at once; the oldest go first past it


class _Hop:
    """What a caller noted for a session it opened: its deadline, who asked, which call."""

    __slots__ = ("call_id", "deadline", "path")

    def __init__(
        self, deadline: float | None, path: tuple[str, ...], call_id: int | None = None
    ) -> None:
        self.deadline = deadline  # time.perf_counter(); None: no caller in this process
        self.path = path  # the agents that asked, first caller first
        self.call_id = call_id  # the CallPeer call that opened the session (its event's id)


_noted: OrderedDict[str, _Hop] = OrderedDict()
# A2A messages sent, by their message id, until a host of this process opens their session.
# Apart from the sessions' notes: a message id is the sender's choice, a session id the host's.
_messages: OrderedDict[str, _Hop] = OrderedDict()
_current: contextvars.ContextVar[_Hop | None] = contextvars.ContextVar(
    "coreagent_delegation", default=None
)


class Budget:
    """One call's time (`seconds`) and the delegation it belongs to (`path`, this agent last)."""

    __slots__ = ("path", "seconds", "whole")

    def __init__(self, seconds: float, path: tuple[str, ...], whole: bool) -> None:
        self.seconds = seconds
        self.path = path
        self.whole = whole  # the tool's own timeout, not cut by a caller's deadline


def budget(timeout: float) -> Budget:
    """The time a call made now may take: `timeout`, or less in a turn another call asked for."""
    hop = _current.get()
    if hop is None:
        return Budget(timeout, (), True)
    if hop.deadline is None:
        return Budget(timeout, hop.path, True)
    left = (hop.deadline - time.perf_counter()) * KEEP
    return Budget(min(timeout, left), hop.path, timeout <= left)


def entering(session_id: str, agent: str) -> AbstractContextManager[int | None]:
    """Run a turn of `agent` in `session_id`: its calls inherit what its caller noted.

    Gives the `call_id` of the call that noted the session (None: no call of this process).
    """
    return _entering(_noted, session_id, agent)


def entering_message(message_id: str, agent: str) -> AbstractContextManager[int | None]:
    """Answer A2A message `message_id` as `agent` outside a host's session: as `entering`.

    For an A2A agent of this process that is not a host (the A2A SDK's own server, as a
    simulated fleet runs one): its calls inherit what the message's sender noted.
    """
    return _entering(_messages, message_id, agent)


@contextmanager
def _entering(notes: OrderedDict[str, _Hop], key: str, agent: str) -> Iterator[int | None]:
    """A turn of `agent` that takes the note under `key` (the caller's deadline and path)."""
    inherited = notes.pop(key, None) if key else None
    if inherited is None:
        hop = _Hop(None, (agent,))
    else:
        hop = _Hop(inherited.deadline, (*inherited.path, agent))
    token = _current.set(hop)
    try:
        yield inherited.call_id if inherited is not None else None
    finally:
        _current.reset(token)


def _bounded(notes: OrderedDict[str, _Hop]) -> None:
    while len(notes) > _MAX_NOTES:
        notes.popitem(last=False)


def note(
    session_id: str, deadline: float, path: tuple[str, ...], call_id: int | None = None
) -> None:
    """A call opened `session_id` with this deadline (perf_counter) for the agents of `path`.

    Not the startup session: every daemon has its own `default`, and no call opens one (a
    server answering a new session with that id is not a host of this process). Its note
    would reach every host's `default` turn; an expired one refused their delegations.
    """
    if not session_id or session_id == STARTUP_SESSION:
        return
    _noted[session_id] = _Hop(deadline, path, call_id)
    _bounded(_noted)


def note_message(
    message_id: str, deadline: float, path: tuple[str, ...], call_id: int | None = None
) -> None:
    """An A2A call is about to send message `message_id`: what `note` notes for a session."""
    if message_id:
        _messages[message_id] = _Hop(deadline, path, call_id)
        _bounded(_messages)


def hand_on(message_id: str, session_id: str) -> None:
    """A host runs A2A message `message_id` in `session_id`: its turn takes the message's note.

    Called before the message is queued, so before the turn can start. The same note stays
    under the message too, so `forget_message` still reaches a turn that has not started.
    """
    hop = _messages.get(message_id) if message_id else None
    if hop is not None and session_id and session_id != STARTUP_SESSION:
        _noted[session_id] = hop
        _bounded(_noted)


def forget_message(message_id: str) -> None:
    """The A2A call that sent `message_id` is over: as `forget`, for a message's note."""
    # In place: a session the note was handed on to holds this very note.
    _expire(_messages.get(message_id) if message_id else None)


def forget(session_id: str) -> None:
    """The call that opened `session_id` is over: a turn that has not started yet has no time.

    The note stays, its deadline now: on a loaded machine a turn can start after its caller
    gave up, and one that inherited nothing would delegate afresh with a whole deadline of
    its own (a cycle then ran a second chain of hops). Notes stay bounded by `_MAX_NOTES`.
    """
    _expire(_noted.get(session_id) if session_id else None)


def _expire(hop: _Hop | None) -> None:
    """End a note's deadline now (a later turn of it gets none), keeping who asked."""
    if hop is not None and hop.deadline is not None:
        hop.deadline = min(hop.deadline, time.perf_counter())


def _chain(path: Sequence[str]) -> str:
    names = [quote_name(n, 80) for n in path]
    if len(names) > _SHOWN_HOPS:
        half = _SHOWN_HOPS // 2
        names = [*names[:half], f"... {len(names) - 2 * half} more ...", *names[-half:]]
    return " -> ".join(names)


def cycle(path: Sequence[str], asked: str) -> str | None:
    """The first cycle in the delegation `path` (then `asked`), as `"a" -> "b" -> "a"`."""
    seen: dict[str, int] = {}
    for index, agent in enumerate((*path, asked)):
        if agent in seen:
            return _chain((*path, asked)[seen[agent] : index + 1])
        seen[agent] = index
    return None


def not_asked(tool: str, name: str, path: Sequence[str], seconds: float) -> PeerTimeoutError:
    """The error of a call with too little time left to dial."""
    left = f"{max(seconds, 0) * 1000:.1f} ms"
    deep = f"{len(path)} hop{'' if len(path) == 1 else 's'} deep"
    looped = cycle(path, name)
    if looped is not None:
        return PeerTimeoutError(
            f"{tool}: peer {quote_name(name)} was not asked: the delegation is a cycle, "
            f"{looped}, and {deep} with each hop handing on half its time left "
            f"{left} for this one; break the cycle (have one of its peers answer itself)"
        )
    return PeerTimeoutError(
        f"{tool}: peer {quote_name(name)} was not asked: the delegation {_chain(path)} is "
        f"{deep} and left {left} for this hop; give the first caller a "
        "longer timeout, or make the tree shallower"
    )


def in_cycle(tool: str, name: str, path: Sequence[str], seconds: float) -> PeerTimeoutError | None:
    """The error of a call in a cycle that ran out of its hop's time (None: not a cycle)."""
    looped = cycle(path, name)
    if looped is None:
        return None
    return PeerTimeoutError(
        f"{tool}: peer {quote_name(name)} did not answer within this hop's "
        f"{seconds * 1000:.1f} ms: the delegation is a cycle, {looped}, and each hop of it "
        "hands on half its time until one cannot ask; break the cycle (have one of its "
        "peers answer itself)"
    )


def cut_short(tool: str, name: str, path: Sequence[str], seconds: float) -> PeerTimeoutError:
    """The error of a call that ran out of the time its caller's deadline left this hop."""
    return PeerTimeoutError(
        f"{tool}: peer {quote_name(name)} did not answer within this hop's {seconds:.3g} s, "
        f"half the time its caller left it (the delegation {_chain(path)}); give the first "
        "caller a longer timeout, or make the tree shallower"
    )
