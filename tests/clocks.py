"""A `time` module whose monotonic clock a test moves by hand (for code reading `time.monotonic`).

Patched over a module's `time` (`monkeypatch.setattr(module, "time", SteppedTime())`), it makes
that module's deadlines and pacing independent of how long a loaded machine takes.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["SteppedTime"]


class SteppedTime:
    """The `time` module, with a monotonic clock that stands still until `step()` moves it."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def step(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)
