"""`simulator.behaviors` under the second name: `from coreagent_sdk.simulator import behaviors`.

This module replaces itself with the real one as it is imported, so both
names give the same module object (see `coreagent_sdk.simulator`).
"""

from __future__ import annotations

import sys

from . import _package

sys.modules[__name__] = _package().behaviors
