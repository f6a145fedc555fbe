"""`CallRecorder`: every call a fleet carries, with the call whose turn made it.

The invariant: each call that reaches a turn on one of the fleet's peers, and
each call a tool the fleet handed out makes (even one refused before any
session opened), is one record of the fleet's `CallLog`, whose ``parent`` is
the record of the turn that made the call, or None for a call from outside
the fleet. No OpenTelemetry is needed, and one tree stays one tree however
many traces its spans are spread over.

How each side holds it:

- The caller's side: every `CallPeer` the fleet hands out (`fleet.call_peer`,
  `served.call_peer`, hence the tools `delegate` and `fan_out` make for their
  turns) reports its events here. The parent is read from a context variable
  that the fleet's peers set while their turn runs, in the caller's own task,
  so it holds in-process and over loopback sockets alike. The session the
  call opens is noted against the record (before the prompt is injected, so
  before the callee's turn can start).
- The callee's side: every peer's behaviour runs inside a wrapper that finds
  the record by (peer, session) or, for a caller the fleet did not equip (a
  `CallPeer` of the user's own), starts one, its parent read from the same
  context variable (which reaches an in-process callee through the request's
  task; over sockets such a caller's calls are roots). The wrapper then sets
  the variable to its own record for the behaviour's sub-calls, and points
  the turn's ``on_step`` at the record, so a model-driven peer's rounds and
  tool calls land on it as `TurnStep`s.
- Over A2A the session opens with the message, and the task id the caller's
  event names is not that session's id: the turn finds its record by
  `Turn.call_id` instead, the call of this process that sent the message (the
  tool noted it before sending, and the host handed the note to the session,
  see `_hops`), when that call is one of the fleet's tools'. An A2A SDK agent of
  the fleet has no turn: its executor runs inside `answering`, which does the
  same by the message's id, so a behaviour (or an executor of the user's) that
  asks a peer through a fleet tool it holds makes a child of its own call.

Bounded: the log keeps its newest `max_records` calls and the session map as
many; records of callers the fleet never saw take negative ids, so they never
collide with a `CallPeer`'s (positive) call ids.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from coreagent_sdk import CallLog, CallPeerEvent
from coreagent_sdk.host import Agent, Turn, entering_message

__all__ = ["CallRecorder"]

# (the recorder, the record id) of the turn running in this context, if any.
_turn: contextvars.ContextVar[tuple[CallRecorder, int] | None] = contextvars.ContextVar(
    "simulator_turn", default=None
)

# How a turn that raised ended, by the exception's class name (kept by name: the Turn API's
# exceptions are the agent host's, wherever it keeps them).
_ENDED = {
    "TurnFailed": "PeerTurnError",
    "TurnAbandoned": "StreamEndedError",
    "CancelledError": "Cancelled",
}


class CallRecorder:
    """Feeds one fleet's `CallLog` (``log``) from its tools and its peers' turns."""

    def __init__(self, max_records: int = 10_000) -> None:
        self.log = CallLog(max_records=max_records)
        self._max = max_records
        self._lock = threading.Lock()
        self._sessions: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._calls: OrderedDict[int, None] = OrderedDict()  # the tools' calls, by call_id
        self._unseen = itertools.count(-1, -1)

    def _parent(self) -> int | None:
        current = _turn.get()
        if current is None or current[0] is not self:
            return None  # no turn, or another fleet's
        return current[1]

    def hook(
        self, chained: Callable[[CallPeerEvent], None] | None
    ) -> Callable[[CallPeerEvent], None]:
        """An ``on_event`` for a tool the fleet hands out: records, then calls ``chained``."""

        def on_event(event: CallPeerEvent) -> None:
            if event.kind == "started":
                with self._lock:
                    self._calls[event.call_id] = None
                    while len(self._calls) > self._max:
                        self._calls.popitem(last=False)
            elif event.kind == "session_opened" and event.session_id:
                with self._lock:
                    self._sessions[(event.peer, event.session_id)] = event.call_id
                    while len(self._sessions) > self._max:
                        self._sessions.popitem(last=False)
            self.log.on_event(event, parent=self._parent())
            if chained is not None:
                chained(event)

        return on_event

    @contextlib.contextmanager
    def answering(self, peer: str, message_id: str) -> Iterator[None]:
        """Run ``peer``'s answer to A2A message ``message_id`` (an A2A SDK agent's, no turn).

        Its calls take their deadline from the message's sender (as a host's turn does)
        and, when a tool of this fleet sent it, go under that call's record.
        """
        with entering_message(message_id, peer) as call_id:
            with self._lock:
                ours = call_id is not None and call_id in self._calls
            if not ours:
                yield  # a caller the fleet did not equip: its call is not in the log
                return
            assert call_id is not None
            token = _turn.set((self, call_id))
            try:
                yield
            finally:
                _turn.reset(token)

    def observe(self, peer: str, behavior: Agent) -> Agent:
        """``behavior`` run as a recorded turn of ``peer`` (its name and docs kept)."""

        @functools.wraps(behavior)
        async def recorded(turn: Turn) -> None:
            session = turn.session_id
            with self._lock:
                known = self._sessions.get((peer, session))
                if known is None and turn.call_id in self._calls:
                    # An A2A call: its session opened with its message, and the task id its
                    # event names is not this session's; the call noted itself for the turn.
                    known = turn.call_id
            call_id = known if known is not None else next(self._unseen)
            if known is None:  # a caller the fleet did not equip: the turn is all it sees
                self.log.on_event(
                    CallPeerEvent("started", "", peer, session, call_id=call_id),
                    parent=self._parent(),
                )
            token = _turn.set((self, call_id))
            # What the turn does inside (model rounds, tools, its error) goes on its record.
            turn.on_step = functools.partial(self.log.on_step, call_id)
            started = time.perf_counter()
            try:
                await behavior(turn)
            except BaseException as exc:
                if known is None:
                    ended = _ENDED.get(type(exc).__name__, type(exc).__name__)
                    took = int((time.perf_counter() - started) * 1000)
                    self.log.on_event(
                        CallPeerEvent(
                            "failed", "", peer, session, took, call_id=call_id, error_type=ended
                        )
                    )
                raise
            else:
                if known is None:
                    took = int((time.perf_counter() - started) * 1000)
                    self.log.on_event(
                        CallPeerEvent("finished", "", peer, session, took, call_id=call_id)
                    )
            finally:
                _turn.reset(token)

        return recorded
