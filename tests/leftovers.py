"""Garbage is collected after each test, so a test that leaves something unclosed fails itself.

Without it, an unclosed socket or event loop kept in a reference cycle is found whenever the
garbage collector next runs: during some later test (which then fails for nothing it did)
or, in a short run, at the session's end, where pytest's last collection turns its warning
into an error and the run exits 1 after every test passed (hypothesis's plugin, importing
hypothesis there, runs a collection too). Collected at each test's teardown, the warning is
that test's own. Everything alive after collection, and again after each test's collection,
is frozen (`gc.freeze()`), so that each collection looks only at what one test made, not at
every imported module and cache: about a millisecond, not tens. (A cycle of such survivors
that a later test frees is then never collected: the session's objects, not a test's leak.)

Loaded from tests/conftest.py as a plugin (`pytest_plugins`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    # hypothesis is imported before the freeze: importing it runs its plugins' entry points,
    # and trio's registers a PRNG after checking, with the garbage collector, that something
    # refers to it. Left to hypothesis's pytest plugin, which imports it for its terminal
    # summary, that happened at the session's end: after gc.freeze() the check finds no
    # referrer and warns, an error under `filterwarnings = error` (a run of files that never
    # import hypothesis exited 1 after every test passed). Here, where tests run, not at
    # import: xdist's controller loads this plugin too, and never freezes.
    with contextlib.suppress(ImportError):
        import hypothesis  # noqa: F401
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _garbage_collected_after_each_test() -> Iterator[None]:
    # Autouse: set up before the test's other fixtures, so torn down after them, inside the
    # teardown phase that pytest's unraisable-exception plugin then reports on.
    yield
    gc.collect()
    # What outlived the test belongs to the session (caches, modules a test imported, a
    # module-scoped fixture's objects): frozen too, so the next test's collection looks only
    # at what that test makes. Unfrozen, it grew with every test: 40 ms a collection in a
    # whole run, a sixth of the suite's CPU.
    gc.freeze()
