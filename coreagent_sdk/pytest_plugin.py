"""pytest plugin: a `fleet` fixture, so your tests run against a simulated fleet in one line.

Invariant: installing coreagent-sdk never breaks another project's pytest.
The plugin is registered (`pytest11` entry point) from this module, which
imports nothing but pytest; the simulator is imported only when a test first
asks for a fleet. A project whose own package is called `simulator` still
gets the fixture: it loads coreagent-sdk's under its second name,
`coreagent_sdk.simulator`.

Configuration, the pytest way:

- ``@pytest.mark.fleet(**options)`` on a test, a class or a module
  (``pytestmark``) passes `Fleet(**options)` to that test's `fleet`; a
  closer marker's option wins over a farther one's. ``clock=FakeClock``
  (the class) gives each test a fresh clock; an instance is shared.
- ``fleet_factory(**options)`` makes as many fleets as a test needs, each
  closed at teardown.

With ``raise_behavior_errors=True`` (marker or factory), an exception raised
inside a behaviour is re-raised, with its traceback, at the test's teardown.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

__all__ = ["fleet", "fleet_factory"]

_MARKER = (
    "fleet(**options): options for the `fleet` fixture's Fleet(...), e.g. "
    "fleet(clock=FakeClock, tokens={...}, session_rate_limit=True) (coreagent-sdk)"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER)


def _fleet_class() -> Any:
    """coreagent-sdk's `Fleet`, whatever the name `simulator` means in this project."""
    try:
        facade = importlib.import_module("coreagent_sdk.simulator")
        return facade.Fleet
    except ImportError as exc:
        pytest.fail(
            f"coreagent_sdk: the fleet fixture needs the simulator, which did not import "
            f"({exc}); install it with: pip install 'coreagent-sdk[simulator]'",
            pytrace=False,
        )


def _marked_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for marker in request.node.iter_markers("fleet"):  # closest first
        if marker.args:
            pytest.fail(
                f"coreagent_sdk: @pytest.mark.fleet takes keyword options only (those of "
                f"Fleet(...)), got positional {marker.args!r}; write e.g. "
                "@pytest.mark.fleet(clock=FakeClock)",
                pytrace=False,
            )
        for key, value in marker.kwargs.items():
            options.setdefault(key, value)
    clock = options.get("clock")
    if isinstance(clock, type):  # a class: a fresh clock for this test
        options["clock"] = clock()
    return options


@pytest.fixture
def fleet_factory() -> Iterator[Callable[..., Any]]:
    """Make fleets with any `Fleet(...)` options; each is closed at teardown.

        def test_leases(fleet_factory):
            fleet = fleet_factory(clock=FakeClock(), tokens={"t": "alice"})

    An option `Fleet` does not take fails the test, listing those it does.
    """
    fleet_class = _fleet_class()
    made: list[Any] = []

    known = inspect.signature(fleet_class).parameters

    def make(**options: Any) -> Any:
        unknown = sorted(set(options) - set(known))
        if unknown:
            pytest.fail(
                f"coreagent_sdk: Fleet() has no option {', '.join(map(repr, unknown))}; its "
                f"options are: {', '.join(known)}",
                pytrace=False,
            )
        built = fleet_class(**options)
        made.append(built)
        return built

    try:
        yield make
    finally:
        # Every fleet is closed even when one re-raises a behaviour's exception (the first
        # such exception is re-raised once all are closed).
        failure: BaseException | None = None
        for built in reversed(made):
            try:
                built.close()
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


@pytest.fixture
def fleet(request: pytest.FixtureRequest, fleet_factory: Callable[..., Any]) -> Any:
    """An open simulated fleet (a hub at http://hub.sim, no peers yet); add them with add_peer.

    Options come from ``@pytest.mark.fleet(...)`` (see the module docs).
    Running turns are cancelled at teardown. A test that serves it awaits
    `fleet.aclose()` itself (that also closes the tools it handed out).
    """
    return fleet_factory(**_marked_options(request))
