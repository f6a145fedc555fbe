"""A Jupyter kernelspec of the tests' own, so a real kernel runs this interpreter."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def own_kernel(root: Path, name: str) -> Iterator[str]:
    """Install kernelspec `name` (this interpreter) under `root`, found first while inside."""
    spec = root / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": f"coreagent-sdk tests ({name})",
                "language": "python",
            }
        )
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(root))
        patch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # the future default; no migration warning
        yield name
