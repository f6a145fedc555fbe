"""The A2A SDK's client is imported as an `A2ADirectory` is made, not in a call's deadline."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
import coreagent_sdk
before = "a2a.client" in sys.modules
coreagent_sdk.A2ADirectory(["http://127.0.0.1:9/.well-known/agent-card.json"])
print(before, "a2a.client" in sys.modules)
"""


def test_making_an_a2a_directory_imports_the_sdks_client_and_importing_the_package_does_not() -> (
    None
):
    # A fresh process: this one's sys.modules holds whatever other tests imported. Nothing is
    # dialed: the directory reads no card until it is asked.
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["False", "True"], done.stdout + done.stderr
