"""pytest plugin: a `fleet` fixture, so your tests run against a simulated fleet in one line.

Registered through the `pytest11` entry point; the simulator is imported only
when a test asks for the fixture, so installing the SDK without the
`simulator` extra never breaks pytest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from simulator import Fleet


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    """An open simulated fleet (a hub at http://hub.sim, no peers yet); add them with add_peer."""
    from simulator import Fleet

    made = Fleet()
    try:
        yield made
    finally:
        made.close()
