"""Shared fixtures: fixtures from ../shared/conformance, and a fleet reachable two ways."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from coreagent_sdk import CallPeer, HubDirectory, _scrub
from simulator import Fleet, ServedFleet

from .canary import CANARY, CanaryWatch
from .process_state import Snapshot

pytest_plugins = ["pytester", "tests.leftovers"]

__all__ = ["CANARY", "PLAIN_PYTEST", "Reach", "ReachFactory", "load_fixture"]

# Options for a pytester run in a subprocess (a user's project): the plugins a user's run of
# those tests has nothing to do with stay out, which saves most of a second of startup each
# (pytester's runs are the fast suite's costliest tests after the docs' builds).
PLAIN_PYTEST = (
    *("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", "-p", "no:xdist.looponfail"),
    *("-p", "no:hypothesispytest", "-p", "no:respx", "-p", "no:platformdirs"),
)

# One canary token for the whole run (see tests/canary.py): use it for every token
# a test sends, and the watch proves it never surfaced in an error, repr, log or event.
_WATCH = CanaryWatch()
# The process-wide state as the session found it (tests/process_state.py): a test that
# leaves any of it changed fails, so the suite passes in any order and on any xdist worker.
_STATE: list[Snapshot] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    _WATCH.install()
    # A run started in the background by a non-interactive shell (`cmd &` in a script)
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler: Ctrl-C
    # tests could not interrupt anything, and the first library to install Python's usual
    # handler (Jupyter's, on import) was blamed for changing process-wide state. The suite
    # runs with the handler a terminal's Python has.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    # After collection: importing the test modules may set state up for the whole run.
    _STATE[:] = [Snapshot()]


def pytest_sessionfinish(session: pytest.Session) -> None:
    _WATCH.uninstall()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _WATCH.clear()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    # trylast: after the fixtures' own teardown, which closes fleets and logs too.
    leaks = _WATCH.verdict()
    if leaks:
        pytest.fail(
            f"the canary token leaked during {item.nodeid}:\n  " + "\n  ".join(leaks[:10]),
            pytrace=False,
        )
    # A module-scoped fixture may hold state for its module's tests (a kernelspec's
    # JUPYTER_PATH): the state is compared when the next test is another module's, once
    # that fixture is torn down too.
    module_done = nextitem is None or getattr(nextitem, "module", None) is not getattr(
        item, "module", None
    )
    changed = _STATE[0].changes() if _STATE and module_done else []
    if changed:
        _STATE[0].restore()  # one leak fails one test, not every test after it
        pytest.fail(
            f"{item.nodeid} (or an earlier test of its module) left process-wide state "
            "changed (tests/process_state.py says how to undo it):\n  " + "\n  ".join(changed[:10]),
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _secrets_scrubbed_for_this_test_only() -> Iterator[None]:
    """A token a test registers (by reading it) is not scrubbed from later tests' text."""
    with _scrub.scoped():
        yield


_HERE = Path(__file__).resolve().parent
# The daemon's own fixtures: ../shared/conformance beside the checkout, or a vendored copy.
CONFORMANCE = next(
    (
        p
        for p in (_HERE.parent.parent / "shared" / "conformance", _HERE / "conformance")
        if p.is_dir()
    ),
    _HERE / "conformance",
)


def load_fixture(name: str) -> Any:
    return json.loads((CONFORMANCE / name).read_text())


class Reach:
    """One way of reaching a fleet: in-process (fleet.transport) or loopback sockets."""

    def __init__(self, fleet: Fleet, served: ServedFleet | None) -> None:
        self.fleet = fleet
        self.served = served
        self.made: list[Any] = []  # tools and directories, closed at teardown

    @property
    def mode(self) -> str:
        return "loopback" if self.served else "in-process"

    def url(self, name: str) -> str:
        return self.served.urls[name] if self.served else self.fleet.url(name)

    @property
    def transport(self) -> Any:
        return None if self.served else self.fleet.transport

    def directory(self, labels: Mapping[str, str] | None = None, **kw: Any) -> HubDirectory:
        made = HubDirectory(self.url("hub"), transport=self.transport, labels=labels, **kw)
        self.made.append(made)
        return made

    def call_peer(self, **kw: Any) -> CallPeer:
        directory = kw.pop("directory", None) or self.directory(
            token_env=kw.get("token_env"), environ=kw.get("environ")
        )
        kw.setdefault("transport", self.transport)
        made = CallPeer(directory, **kw)
        self.made.append(made)
        return made

    async def aclose(self) -> None:
        for made in self.made:
            await made.aclose()
        await self.fleet.aclose()


class ReachFactory:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._made: list[Reach] = []

    async def __call__(self, fleet: Fleet) -> Reach:
        served = await fleet.serve() if self.mode == "loopback" else None
        reach = Reach(fleet, served)
        self._made.append(reach)
        return reach

    async def aclose(self) -> None:
        for reach in self._made:
            await reach.aclose()


@pytest.fixture(params=["in-process", "loopback"])
async def make_reach(request: pytest.FixtureRequest) -> AsyncIterator[ReachFactory]:
    """`await make_reach(fleet)` after adding peers: the fleet in-process, then on loopback."""
    factory = ReachFactory(request.param)
    try:
        yield factory
    finally:
        await factory.aclose()
