"""`CallLog`: the calls a `CallPeer` made, rebuilt from its `on_event` stream.

The invariant: one `CallRecord` per call, keyed by the event's `call_id`, so
many concurrent calls to the same peer never mix. A record only moves
forward (running, then finished, truncated or failed) and the log is
bounded: past `max_records` the oldest finished records are dropped, never
a running one. The log itself is plain Python: widgets and plots read it,
and neither is imported here.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

import attrs

from . import _display
from ._call_peer import CallPeerEvent

__all__ = ["CallLog", "CallRecord"]

_DONE = frozenset({"finished", "truncated", "failed"})


@attrs.frozen
class CallRecord:
    """One call as its events told it.

    ``state`` is running, finished, truncated or failed; ``started`` and
    ``ended`` are seconds on the log's timer since the log was made.
    """

    call_id: int
    tool: str
    peer: str
    state: str
    started: float
    ended: float | None = None
    session_id: str = ""
    duration_ms: int | None = None
    response_bytes: int | None = None
    truncated: bool = False
    error_type: str | None = None
    error: str | None = None


class CallLog:
    """Collects `CallPeerEvent`s into `CallRecord`s: pass ``on_event=log.on_event``.

    ``max_records`` bounds memory (the oldest finished calls go first);
    ``timer`` gives monotonic seconds (default `time.perf_counter`).
    Listeners added with `subscribe` run after each event (widgets use this).
    """

    def __init__(
        self, *, max_records: int = 10_000, timer: Callable[[], float] = time.perf_counter
    ) -> None:
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise ValueError(f"call_log: max_records must be a positive int, got {max_records!r}")
        self.max_records = max_records
        self._timer = timer
        self._origin = timer()
        self._records: OrderedDict[int, CallRecord] = OrderedDict()
        self._listeners: list[Callable[[CallPeerEvent], None]] = []
        self.events = 0

    def __repr__(self) -> str:
        return f"CallLog({len(self._records)} calls: {self._summary()})"

    def _repr_html_(self) -> str:
        return _display.calls_html(self.records(), title="CallLog")

    def _summary(self) -> str:
        counts: dict[str, int] = {}
        for r in self._records.values():
            counts[r.state] = counts.get(r.state, 0) + 1
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[CallRecord]:
        return iter(list(self._records.values()))

    def records(self) -> list[CallRecord]:
        """Every record, oldest call first."""
        return list(self._records.values())

    def subscribe(self, listener: Callable[[CallPeerEvent], None]) -> Callable[[], None]:
        """Run `listener(event)` after each event; returns a function that unsubscribes."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def clear(self) -> None:
        self._records.clear()

    def on_event(self, event: CallPeerEvent) -> None:
        """The hook to give a `CallPeer` (``on_event=log.on_event``)."""
        self.events += 1
        now = self._timer() - self._origin
        record = self._records.get(event.call_id)
        if record is None:
            record = CallRecord(event.call_id, event.tool, event.peer, "running", started=now)
            if event.duration_ms is not None:  # joined mid-call: the duration says when it began
                record = attrs.evolve(record, started=now - event.duration_ms / 1000)
        if record.state not in _DONE or event.kind == "finished":
            record = self._apply(record, event, now)
        self._records[event.call_id] = record
        self._trim()
        for listener in list(self._listeners):
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
        if len(self._records) <= self.max_records:
            return
        for call_id, record in list(self._records.items()):
            if len(self._records) <= self.max_records:
                break
            if record.state in _DONE:
                del self._records[call_id]
