"""`CallLog`: the calls a `CallPeer` made, rebuilt from its `on_event` stream.

The invariant: one `CallRecord` per call, keyed by the event's `call_id`, so
many concurrent calls to the same peer never mix. A record only moves
forward (running, then finished, truncated or failed) and the log is
bounded: past `max_records` the oldest finished records are dropped, never
a running one. What a turn did inside (its model rounds and tool calls, as
`TurnStep`s) is bounded twice: `MAX_STEPS_PER_CALL` per record (the rest
counted in ``steps_dropped``) and ``max_steps`` in the whole log (past it the
oldest finished records lose their steps first, and count them dropped).
The log itself is plain Python: widgets and plots read it, and neither is
imported here.

Sync calls run on worker threads (run_sync, or a user's ThreadPoolExecutor),
so events arrive from any thread while a notebook reads the log: every write
happens under one lock, every reader copies what it needs under that lock
and works on the copy, and listeners run after the lock is released (a
listener that reads the log, as a widget's redraw does, cannot deadlock).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs

from .._peer._call_peer import CallPeerEvent
from . import _frames
from ._calltree import CallTree
from ._record import CallRecord
from ._steps import TurnStep
from ._usage import TokenUsage

if TYPE_CHECKING:
    from ._pricing import PriceTable

__all__ = ["MAX_STEPS_PER_CALL", "CallLog", "CallRecord"]

MAX_STEPS_PER_CALL = 256
"""Steps one record keeps; a turn past it counts the rest in `CallRecord.steps_dropped`."""

_DONE = frozenset({"finished", "truncated", "failed"})


class CallLog:
    """Collects `CallPeerEvent`s into `CallRecord`s: pass ``on_event=log.on_event``.

    ``max_records`` bounds memory (the oldest finished calls go first), and
    ``max_steps`` the steps kept in all records together; ``timer`` gives
    monotonic seconds (default `time.perf_counter`).
    Listeners added with `subscribe` run after each event (widgets use this),
    on the thread that delivered it. Safe to feed from many threads and read
    from others at once.

    Attributes:
        max_records: How many records the log keeps at most.
        max_steps: How many steps (`TurnStep`) all records keep together at most.
        epoch: The wall-clock time (Unix seconds) of the log's time 0.
        events: How many events the log has received.
    """

    def __init__(
        self,
        *,
        max_records: int = 10_000,
        max_steps: int = 100_000,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        for name, value in (("max_records", max_records), ("max_steps", max_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"call_log: {name} must be a positive int, got {value!r}")
        self.max_records = max_records
        self.max_steps = max_steps
        self._timer = timer
        self._origin = timer()
        self.epoch = time.time()
        self._steps = 0  # steps kept in all records together
        self._records: OrderedDict[int, CallRecord] = OrderedDict()
        self._lock = threading.Lock()
        # Replaced, never mutated: on_event reads it without copying.
        self._listeners: tuple[Callable[[CallPeerEvent], None], ...] = ()
        self.events = 0

    def __repr__(self) -> str:
        records = self.records()
        return f"CallLog({len(records)} calls: {self._summary(records)})"

    def _repr_html_(self) -> str:
        from .._display import _render as _display  # at display time only

        return _display.calls_html(self.records(), title="CallLog")

    @staticmethod
    def _summary(records: list[CallRecord]) -> str:
        counts: dict[str, int] = {}
        for r in records:
            counts[r.state] = counts.get(r.state, 0) + 1
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[CallRecord]:
        return iter(self.records())

    def records(self) -> list[CallRecord]:
        """Every record, oldest call first (a copy: later events do not change it)."""
        with self._lock:
            return list(self._records.values())

    def subscribe(self, listener: Callable[[CallPeerEvent], None]) -> Callable[[], None]:
        """Run `listener(event)` after each event; returns a function that unsubscribes."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    kept = list(self._listeners)
                    kept.remove(listener)
                    self._listeners = tuple(kept)

        return unsubscribe

    def clear(self) -> None:
        """Forget every record (listeners stay subscribed)."""
        with self._lock:
            self._records.clear()
            self._steps = 0

    def tree(self) -> CallTree:
        """The records arranged by parent call: a delegation tree per top-level call."""
        return CallTree(tuple(self.records()), epoch=self.epoch)

    def to_pandas(self) -> Any:
        """A pandas DataFrame, one row per call, oldest first (needs the ``jupyter`` extra).

        Columns: the record's fields, and what its turn did: ``model_rounds``,
        ``tool_calls``, ``input_tokens``, ``output_tokens`` (`<NA>` for a turn no
        model drove), ``steps_dropped``.
        """
        return _frames.calls_frame(self.records())

    def usage(self, prices: PriceTable | None = None) -> TokenUsage:
        """Tokens per turn and per agent, as the models reported them; priced by ``prices``.

        ``prices`` is a `PriceTable`; a model it does not price is its `KeyError`.
        ``.to_pandas(by="turn" | "agent")`` gives the table.
        """
        return TokenUsage.of(self.records(), prices)

    def on_step(self, call_id: int, step: TurnStep) -> None:
        """Record `step` (just ended) as something call ``call_id``'s turn did; any thread.

        A step for a call the log does not hold (never seen, or already
        dropped) is ignored. Listeners then get a `CallPeerEvent` of kind
        ``step`` for the call.
        """
        with self._lock:
            record = self._records.get(call_id)
            if record is None:
                return
            now = self._timer() - self._origin
            if self._steps >= self.max_steps:
                self._shed_steps(keep=call_id)
                record = self._records[call_id]
            if len(record.steps) >= MAX_STEPS_PER_CALL or self._steps >= self.max_steps:
                record = attrs.evolve(record, steps_dropped=record.steps_dropped + 1)
            else:
                stamped = attrs.evolve(step, started=now - step.duration_ms / 1000)
                record = attrs.evolve(record, steps=(*record.steps, stamped))
                self._steps += 1
            self._records[call_id] = record
            listeners = self._listeners
            self.events += 1
        event = CallPeerEvent("step", record.tool, record.peer, record.session_id, call_id=call_id)
        for listener in listeners:
            listener(event)

    def _shed_steps(self, keep: int) -> None:
        # Room for one more step: the oldest finished records give up their steps first;
        # then, if only running calls hold steps, the oldest of those (never `keep`, the one
        # being written to: a single turn past max_steps drops its own newest steps instead).
        for finished_only in (True, False):
            for call_id, record in list(self._records.items()):
                if self._steps < self.max_steps:
                    return
                if not record.steps or call_id == keep:
                    continue
                if finished_only and record.state not in _DONE:
                    continue
                self._steps -= len(record.steps)
                self._records[call_id] = attrs.evolve(
                    record, steps=(), steps_dropped=record.steps_dropped + len(record.steps)
                )

    def on_event(self, event: CallPeerEvent, *, parent: int | None = None) -> None:
        """The hook to give a `CallPeer` (``on_event=log.on_event``); any thread may call it.

        ``parent`` (the ``call_id`` of the call whose turn made this call) is
        kept from the first event that gives one.
        """
        with self._lock:
            self.events += 1
            now = self._timer() - self._origin
            record = self._records.get(event.call_id)
            if record is None:
                record = CallRecord(event.call_id, event.tool, event.peer, "running", started=now)
                if event.duration_ms is not None:  # joined mid-call: the duration says when
                    record = attrs.evolve(record, started=now - event.duration_ms / 1000)
            if parent is not None and record.parent is None and parent != event.call_id:
                record = attrs.evolve(record, parent=parent)
            if record.state not in _DONE or event.kind == "finished":
                record = self._apply(record, event, now)
            self._records[event.call_id] = record
            if len(self._records) > self.max_records:
                self._trim()
            listeners = self._listeners
        for listener in listeners:
            listener(event)

    @staticmethod
    def _apply(record: CallRecord, event: CallPeerEvent, now: float) -> CallRecord:
        changes: dict[str, object] = {}
        if event.session_id:
            changes["session_id"] = event.session_id
        if event.response_bytes is not None:
            changes["response_bytes"] = event.response_bytes
        if event.duration_ms is not None:
            changes["duration_ms"] = event.duration_ms
        if event.kind == "truncated":
            changes.update(state="truncated", truncated=True, ended=now)
        elif event.kind == "finished":
            changes.update(state="truncated" if record.truncated else "finished", ended=now)
        elif event.kind == "failed":
            changes.update(
                state="failed", ended=now, error_type=event.error_type, error=event.error
            )
        return attrs.evolve(record, **changes)  # type: ignore[arg-type]

    def _trim(self) -> None:
        # Walk from the oldest and stop as soon as enough finished calls are found: a full
        # log pays for the running calls at its head, not for a copy of every record.
        excess = len(self._records) - self.max_records
        doomed: list[int] = []
        for call_id, record in self._records.items():
            if record.state in _DONE:
                doomed.append(call_id)
                if len(doomed) == excess:
                    break
        for call_id in doomed:
            self._steps -= len(self._records.pop(call_id).steps)
