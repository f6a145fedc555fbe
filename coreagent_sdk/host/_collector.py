"""The garbage collector while a host serves: fewer, cheaper passes, put back as found.

Why: at a few hundred answers in flight, CPython's collector at its defaults takes about
a third of a served host's CPU (`gc.callbacks`, 200 A2A messages in flight: 2.3 ms of
7.5 ms per answer). Each message keeps hundreds of container objects alive while it runs,
so the young generation fills every 700 allocations with objects still in use; they are
traversed, promoted, traversed again, and every few hundred answers a full pass walks the
whole heap, the imports of every module included. Two changes, while serving only:

- **The heap as it stands when serving starts is frozen** (`gc.collect()`, then
  `gc.freeze()`): modules, the app, the agent; a full pass no longer walks them. What
  was frozen is never collected while frozen: a reference cycle among those objects that
  becomes garbage while the host serves is freed when serving ends (`gc.unfreeze()`).
  Objects freed by their reference count, most objects, are freed as always.
- **The young generation's threshold is raised** from 700 to `YOUNG_THRESHOLD`: a young
  pass finds more of a finished message's objects already freed, and fewer survivors are
  promoted into the passes above it.

Put back as found, and only what was found at its default: the thresholds are changed
only while they are CPython's defaults and restored when the last server in the process
stops; the heap is frozen only when nothing was frozen before (a process that freezes
its own heap, as a pre-forking server does, keeps its own). Never in a Jupyter kernel,
whose heap is the user's work (a frozen cycle there would outlive its cell), never when
the collector is disabled, and not with ``serve(tune_gc=False)``.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["YOUNG_THRESHOLD", "serving_collector"]

YOUNG_THRESHOLD = 10_000
"""The young generation's threshold while a host serves (CPython's default: 700)."""

_DEFAULTS = (700, 10, 10)  # CPython 3.10 to 3.13; another interpreter's are left alone

_lock = threading.Lock()  # servers may start and stop on several threads' loops
_serving = 0  # servers running in this process under the tuned collector
_raised = False  # whether this module raised the young threshold (from _DEFAULTS)
_froze = False  # whether this module froze the heap (and so unfreezes it)


def _enter(in_kernel: bool) -> bool:
    global _serving, _raised, _froze
    if in_kernel or not gc.isenabled():
        return False
    with _lock:
        _serving += 1
        if _serving > 1:
            return True  # the first server's settings hold for all
        if gc.get_threshold() == _DEFAULTS:
            gc.set_threshold(YOUNG_THRESHOLD, *_DEFAULTS[1:])
            _raised = True
        if gc.get_freeze_count() == 0:
            gc.collect()  # what is garbage already is not frozen with the rest
            gc.freeze()
            _froze = True
    return True


def _exit() -> None:
    global _serving, _raised, _froze
    with _lock:
        _serving -= 1
        if _serving:
            return
        if _raised:
            if gc.get_threshold()[0] == YOUNG_THRESHOLD:  # unless someone set their own since
                gc.set_threshold(*_DEFAULTS)
            _raised = False
        if _froze:
            gc.unfreeze()
            _froze = False


@contextlib.contextmanager
def serving_collector(enabled: bool, in_kernel: bool) -> Iterator[None]:
    """The collector tuned for serving while the block runs (see the module's rules)."""
    entered = enabled and _enter(in_kernel)
    try:
        yield
    finally:
        if entered:
            _exit()
