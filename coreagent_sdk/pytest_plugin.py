"""pytest plugin: a `fleet` fixture, so your tests run against a simulated fleet in one line.

Invariant: installing coreagent-sdk never breaks another project's pytest.
The plugin is registered (`pytest11` entry point) from this module, which
imports nothing but pytest; the `simulator` package is imported only when a
test first asks for `fleet`. When the name `simulator` belongs to another
package (a project's own `simulator/`), only that fixture fails, saying so.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["fleet"]

_OURS = Path(__file__).resolve().parent.parent / "simulator"


def _fleet_class() -> Any:
    """The simulator's `Fleet`, after checking that `simulator` is the one shipped with us."""
    found = sys.modules.get("simulator")
    if found is None:
        try:
            found = importlib.import_module("simulator")
        except ImportError as exc:
            pytest.fail(
                f"coreagent_sdk: the fleet fixture needs the simulator, which did not import "
                f"({exc}); install it with: pip install 'coreagent-sdk[simulator]'",
                pytrace=False,
            )
    where = getattr(found, "__file__", None)
    if where is None or Path(where).resolve().parent != _OURS:
        pytest.fail(
            "coreagent_sdk: the fleet fixture needs coreagent-sdk's `simulator` package, but "
            f"the name `simulator` is another package here ({where or found!r}), which comes "
            f"first on sys.path; coreagent-sdk's is at {_OURS}. Rename your own `simulator` "
            "package, or drop this fixture with `-p no:coreagent_simulator`",
            pytrace=False,
        )
    return found.Fleet


@pytest.fixture
def fleet() -> Iterator[Any]:  # a simulator.Fleet; typed loosely so the SDK needs no simulator
    """An open simulated fleet (a hub at http://hub.sim, no peers yet); add them with add_peer.

    Running turns are cancelled at teardown. A test that serves it awaits
    `fleet.aclose()` itself (that also closes the tools it handed out).
    """
    made = _fleet_class()()
    try:
        yield made
    finally:
        made.close()
