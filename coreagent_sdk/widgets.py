"""Live notebook views of a fleet's roster, a call log and a runtime cache (ipywidgets).

Needs the `jupyter` extra (`pip install 'coreagent-sdk[jupyter]'`). ipywidgets
is imported when a view is made, never by `import coreagent_sdk`.

The invariant every view keeps: however many events arrive, the front end is
sent at most one update per ``min_interval`` seconds, and the last state is
always drawn. The first event after a quiet spell draws at once; events
inside the interval only mark the view dirty, and one redraw is scheduled for
the end of the interval. So 1,000 calls a second cost a handful of redraws,
not 1,000.

Events arrive on any thread: a sync call inside a notebook cell runs on
run_sync's worker thread, under a loop closed when the call returns, and
users make sync calls from thread pools. So a view belongs to the loop (and
thread) that built it: an event on another thread hands the redraw over to
that loop with `call_soon_threadsafe`, and a redraw never runs on a caller's
loop, which may be gone before it fires. A view built with no running loop
(a plain script), or whose loop has closed, draws on the event's thread when
the interval allows, and otherwise on the next event or `refresh()`; redraws
never overlap. What a redraw reads is read under the reader's own lock
(`CallLog`) or from a copy the event's thread made (`CacheView`).

Each view is driven by what it shows: `CallLogView` by a `CallLog` fed from
`CallPeer(on_event=...)`, `CacheView` by the cache's own events, `FleetView`
by re-reading the fleet's roster (an in-process read, no network) on a timer
that stops by itself after ``watch_seconds``.

A saved notebook reads like a log: what is saved under a cell is each view's
state as that cell ended, while the widget itself stays live in a running
front end. Each display of a view is its own output, under a display id of
its own, carrying the live widget and, for front ends where widgets do not
run (nbconvert, the docs, a console), the view's table as HTML and its repr.
At the end of the cell that showed it (IPython's ``post_run_cell`` event) a
display draws what is pending, its HTML and text are brought up to that
moment, and from then on they are left alone: a later cell changing the view
never rewrites an earlier cell's output (display the view again to record it
there). A throttled redraw that fires after its cell has ended updates the
live widget only. `close()` turns every display of the view into its record
(that cell's HTML and text, without the widget), so a notebook that closes
its views at the end saves no widget at all.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ._display import _render as _display
from ._peer._call_peer import CallPeerEvent
from ._records._calllog import CallLog
from ._runtime._runtime_cache import CacheEvent, RuntimeCache

__all__ = ["CacheView", "CallLogView", "CallTreeView", "FleetView"]

_log = logging.getLogger("coreagent_sdk.widgets")


def _ipywidgets() -> Any:
    try:
        import ipywidgets
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "coreagent_sdk.widgets: needs ipywidgets; pip install 'coreagent-sdk[jupyter]'"
        ) from exc
    return ipywidgets


class _Throttle:
    """Calls `redraw` at most once per `min_interval` seconds, and always after the last request.

    Owned by the loop running where it was made (if any): scheduled redraws run
    there, whichever thread requests them.
    """

    def __init__(
        self,
        redraw: Callable[[], None],
        min_interval: float,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(min_interval, (int, float)) or not 0 <= min_interval <= 60:
            raise ValueError(
                f"widgets: min_interval must be seconds in [0, 60], got {min_interval!r}"
            )
        self._redraw = redraw
        self.min_interval = float(min_interval)
        self._timer = timer
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # a plain script: draw on the event's thread
        self._owner = threading.get_ident()
        self._state = threading.Lock()  # guards the fields below; never held while drawing
        self._drawing = threading.Lock()  # one redraw at a time
        self._last = -math.inf
        # A redraw is due: True while handed over to the owner loop, then its TimerHandle.
        self._pending: asyncio.TimerHandle | bool = False
        self.dirty = False
        self.requests = 0

    def _live_loop(self) -> asyncio.AbstractEventLoop | None:
        loop = self._loop
        if loop is not None and (loop.is_closed() or not loop.is_running()):
            # Its loop is gone (or stopped): a redraw left on it would never run.
            # Forget it for good once closed; a stopped loop may run again.
            if loop.is_closed():
                self._loop = None
            self._pending = False
            return None
        return loop

    def request(self) -> None:
        with self._state:
            self.requests += 1
            self.dirty = True
            loop = self._live_loop()
            if self._pending:
                return  # a redraw is already due at the end of the interval
            wait = self._last + self.min_interval - self._timer()
            if loop is not None and threading.get_ident() != self._owner:
                self._pending = True
                try:
                    loop.call_soon_threadsafe(self._arm)
                except RuntimeError:  # closed since we looked: the next request draws
                    self._pending = False
                return
            if wait > 0:
                if loop is not None:
                    self._pending = loop.call_later(wait, self.fire)
                return  # without a loop nothing can wake us: the next request or refresh()
            self._claim()  # under the lock, so two threads cannot both draw in one interval
        self._draw()

    def _arm(self) -> None:
        """On the owner loop: draw now, or at the end of the interval."""
        with self._state:
            if self._pending is not True:
                return  # cancelled, or drawn since
            wait = self._last + self.min_interval - self._timer()
            if wait > 0 and self._loop is not None:
                self._pending = self._loop.call_later(wait, self.fire)
                return
            self._claim()
        self._draw()

    def fire(self) -> None:
        """Draw now, whatever the interval says (`refresh()`, and the scheduled redraw)."""
        with self._state:
            self._claim()
        self._draw()

    def _claim(self) -> None:
        self._cancel()
        self._last = self._timer()
        self.dirty = False  # cleared before drawing: an event during the draw marks it again

    def _draw(self) -> None:
        with self._drawing:
            self._redraw()  # reads the newest state, whenever it runs

    def cancel(self) -> None:
        with self._state:
            self._cancel()

    def _cancel(self) -> None:
        pending, self._pending = self._pending, False
        if isinstance(pending, asyncio.TimerHandle):
            pending.cancel()


def _kernel() -> Any:
    """The running IPython kernel's shell, or None (a script, pytest, a terminal IPython).

    IPython is looked up, never imported: a process that has not imported it runs no kernel.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell if getattr(shell, "kernel", None) is not None else None


def _ipython_display_api() -> Any:
    import IPython.display  # only ever called inside IPython, which has imported it

    return IPython.display


# Views that settle at the end of each cell; weak, so a view nobody holds is not kept alive.
_live: weakref.WeakSet[_View] = weakref.WeakSet()
_hooked: list[Any] = []  # the shell whose post_run_cell event settles them (at most one)


def _watch_cells() -> None:
    """In a kernel, settle every live view after each cell (registered once per process)."""
    shell = _kernel()
    if shell is None or shell in _hooked:
        return
    shell.events.register("post_run_cell", _settle_all)
    _hooked[:] = [shell]


def _settle_all(*_result: Any) -> None:
    for view in list(_live):
        try:
            view._settle()
        except Exception:  # one broken view must not stop the others, nor fail the cell
            _log.warning("widgets: settling %r at the end of a cell failed", view, exc_info=True)


class _Shown:
    """One display of a view: its display id and what its output holds (HTML, text)."""

    __slots__ = ("display_id", "html", "open", "text")

    def __init__(self, display_id: str, html: str, text: str) -> None:
        self.display_id = display_id
        self.html = html
        self.text = text
        self.open = True  # until the end of the cell that showed it


class _View:
    """An `ipywidgets.HTML` redrawn through a throttle; `updates` counts front-end updates."""

    def __init__(self, min_interval: float) -> None:
        self.widget = _ipywidgets().HTML()
        self.updates = 0
        self._throttle = _Throttle(self._draw, min_interval)
        self.closed = False
        # Every display of this view in a kernel, oldest first: each is updated in place until
        # its cell ends, then kept as that cell's record (see the module's docstring).
        self._shown: list[_Shown] = []
        _live.add(self)
        _watch_cells()

    def _html(self) -> str:  # pragma: no cover - every view overrides it
        raise NotImplementedError

    def _draw(self) -> None:
        if self.closed:
            return
        markup = self._html()
        if markup != self.widget.value:  # an unchanged value sends nothing to the front end
            self.widget.value = markup
            self.updates += 1

    def _flush(self) -> None:
        """Draw now if an event is still waiting for its redraw."""
        if self._throttle.dirty:
            self._throttle.fire()

    def _settle(self) -> None:
        """The end of a cell: draw what is pending; the displays that cell made become records."""
        if self.closed or not any(shown.open for shown in self._shown):
            return
        self._flush()
        for shown in self._shown:
            if not shown.open:
                continue  # an earlier cell's record: whatever changed since is not its state
            shown.open = False
            html, text = self.widget.value, repr(self)
            if (html, text) != (shown.html, shown.text):
                shown.html, shown.text = html, text
                _ipython_display_api().update_display(
                    self._bundle(), raw=True, display_id=shown.display_id
                )

    def refresh(self) -> None:
        """Draw the current state now."""
        self._throttle.fire()

    def close(self) -> None:
        """Stop updating and close the widget; each display keeps its cell's table and text."""
        if self.closed:
            return
        self._flush()
        html, text = self.widget.value, repr(self)
        self.closed = True
        _live.discard(self)
        self._throttle.cancel()
        for shown in self._shown:
            if shown.open:  # shown in this very cell: its record is the final state
                shown.html, shown.text, shown.open = html, text, False
            # The widget is gone from the front end once closed: leave the record in its place.
            _ipython_display_api().update_display(
                {"text/html": shown.html, "text/plain": shown.text},
                raw=True,
                display_id=shown.display_id,
            )
        self.widget.close()

    def _bundle(self) -> dict[str, Any]:
        # The live widget for front ends that run widgets; the current table as HTML and
        # this view's repr for those that do not (nbconvert, the docs, a console).
        bundle = dict(self.widget._repr_mimebundle_() or {})
        bundle["text/html"] = self.widget.value
        bundle["text/plain"] = repr(self)
        return bundle

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        self._flush()  # the HTML shown must be the state the text describes
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/html"] = self.widget.value
        bundle["text/plain"] = repr(self)
        return bundle

    def _ipython_display_(self) -> None:
        # In a kernel, each display is an output of its own under a display id of its own, so
        # the end of its cell can bring its HTML up to date without touching earlier cells.
        display = _ipython_display_api().display
        if self.closed or _kernel() is None:
            display(self._repr_mimebundle_(), raw=True)
            return
        self._flush()
        shown = _Shown(f"coreagent-view-{uuid.uuid4().hex}", self.widget.value, repr(self))
        self._shown.append(shown)
        display(self._bundle(), raw=True, display_id=shown.display_id)


class CallLogView(_View):
    """A live table of calls: peer, state, duration, bytes, truncated, error class.

    ``log`` is the `CallLog` to show (a new one by default); give the view's
    `on_event` to each `CallPeer` whose calls it should show, any number of
    them, with any number of concurrent calls.

    Attributes:
        log: The `CallLog` the view shows.
    """

    def __init__(self, log: CallLog | None = None, *, min_interval: float = 0.25) -> None:
        super().__init__(min_interval)
        self.log = log if log is not None else CallLog()
        self._unsubscribe = self.log.subscribe(self._on_log_event)
        self._draw()

    def __repr__(self) -> str:
        return f"CallLogView({self.log!r}, updates={self.updates})"

    def on_event(self, event: CallPeerEvent) -> None:
        """The hook to give a `CallPeer`: ``CallPeer(..., on_event=view.on_event)``."""
        self.log.on_event(event)

    def _on_log_event(self, _event: CallPeerEvent) -> None:
        self._throttle.request()

    def _html(self) -> str:
        return self.log._repr_html_()

    def close(self) -> None:
        """Stop following the log and close the widget (the log keeps its records)."""
        self._unsubscribe()
        super().close()


class CallTreeView(CallLogView):
    """A live delegation tree: each call under the call whose turn made it.

    ``log`` is a `CallLog` whose records carry their parent call, such as a
    simulated fleet's ``fleet.calls`` (every call the fleet carries,
    ``delegate`` and ``fan_out`` sub-calls included). Throttled, settled at the
    end of each cell and shown as HTML where widgets do not run, as every view.
    """

    def __repr__(self) -> str:
        summary = repr(self.log.tree()).split("\n", 1)[0]  # its first line: the counts
        return f"CallTreeView({summary}, updates={self.updates})"

    def _html(self) -> str:
        return self.log.tree()._repr_html_()


class CacheView(_View):
    """A live view of a `RuntimeCache`: resident instances in LRU order, leases, counters.

    Redrawn from the cache's own events (built, hit, evicted, closed, ...); a
    hook the cache already had keeps running, before the view's. A cache driven
    on another thread (a sync call, a thread pool) is drawn as that thread saw
    it at its last event, never read while that thread changes it.

    Attributes:
        cache: The `RuntimeCache` the view shows.
        events: How many cache events the view has received.
    """

    def __init__(self, cache: RuntimeCache, *, min_interval: float = 0.25) -> None:
        super().__init__(min_interval)
        self.cache = cache
        self.events = 0
        self._lock = threading.Lock()
        self._seen: _display.CacheState | None = None  # None: read the cache itself
        owner = threading.get_ident()
        previous = cache._on_event

        def hook(event: CacheEvent) -> None:
            if previous is not None:
                previous(event)
            # On the view's own thread the cache is idle whenever a redraw runs; elsewhere,
            # copy it now, on the thread that is changing it (a few microseconds).
            seen = None if threading.get_ident() == owner else _display.cache_state(cache)
            with self._lock:
                self.events += 1
                self._seen = seen
            self._throttle.request()

        self._previous = previous
        cache._on_event = hook  # the cache's hook is a constructor argument; chain onto it
        self._draw()

    def __repr__(self) -> str:
        return f"CacheView({self.cache!r}, updates={self.updates})"

    def _html(self) -> str:
        with self._lock:
            seen = self._seen
        return _display.cache_html(self.cache if seen is None else seen)

    def close(self) -> None:
        """Give the cache back its own event hook and close the widget."""
        self.cache._on_event = self._previous
        super().close()


class _Roster(Protocol):
    def roster(self) -> Sequence[Any]: ...

    def _repr_html_(self) -> str: ...


class FleetView(_View):
    """A live roster of a simulated fleet (`simulator.Fleet`): peers joining, expiring, removed.

    The roster is re-read every ``interval`` seconds on the running loop (an
    in-process read: nothing is sent over a network) and redrawn when it
    changed; the timer stops by itself after ``watch_seconds``, or at `close()`.
    `refresh()` draws at once.

    Attributes:
        fleet: The fleet (anything with a ``roster()``) the view shows.
        interval: Seconds between two reads of the roster.
        rows: The roster as last read, one entry per peer.
    """

    def __init__(
        self,
        fleet: _Roster,
        *,
        interval: float = 0.5,
        watch_seconds: float = 600.0,
        min_interval: float = 0.25,
    ) -> None:
        if not isinstance(interval, (int, float)) or interval <= 0:
            raise ValueError(f"widgets: interval must be positive seconds, got {interval!r}")
        super().__init__(min_interval)
        self.fleet = fleet
        self.interval = float(interval)
        self.rows: list[Any] = []
        self._signature: tuple[Any, ...] = ()
        self._stop_at = time.monotonic() + watch_seconds
        self._tick_handle: asyncio.TimerHandle | None = None
        self._read()
        self._draw()
        self._schedule()

    def __repr__(self) -> str:
        names = ", ".join(f"{getattr(r, 'name', r)}" for r in self.rows)
        return f"FleetView([{names}], updates={self.updates})"

    def _read(self) -> bool:
        """Read the roster; True when it changed (lease times compared to the second)."""
        self.rows = list(self.fleet.roster())
        signature = tuple(
            (
                getattr(r, "name", None),
                getattr(r, "state", None),
                getattr(r, "endpoint", None),
                tuple(sorted((getattr(r, "labels", None) or {}).items())),
                getattr(r, "url", None),
                None if getattr(r, "lease_left", None) is None else int(r.lease_left),
            )
            for r in self.rows
        )
        changed = signature != self._signature
        self._signature = signature
        return changed

    def _schedule(self) -> None:
        if self.closed or time.monotonic() >= self._stop_at:
            self._tick_handle = None
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a plain script): refresh() by hand
        self._tick_handle = loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        if self._read():
            self._throttle.request()
        self._schedule()

    def refresh(self) -> None:
        """Read the roster and draw it now."""
        self._read()
        super().refresh()

    def _flush(self) -> None:
        # Its events are its own timer's reads: read the roster now rather than wait a tick.
        if not self.closed and self._read():
            self._throttle.fire()
            return
        super()._flush()

    def _html(self) -> str:
        return self.fleet._repr_html_()

    def close(self) -> None:
        """Stop the roster timer and close the widget."""
        if self._tick_handle is not None:
            self._tick_handle.cancel()
            self._tick_handle = None
        super().close()
