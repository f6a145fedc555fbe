"""A Jupyter kernelspec of the tests' own, so a real kernel runs this interpreter."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest


def jupyter() -> tuple[ModuleType, ModuleType]:
    """nbformat and nbclient (ipykernel installed too), or the calling test is skipped.

    Called by the tests that run, not at the top of their modules: nbformat imports jsonschema
    (with rfc3987_syntax, which builds 38 grammars), seconds of CPU that every xdist worker
    paid at collection for these slow-group modules even in the fast run, which leaves them out.
    """
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    return nbformat, nbclient


@contextlib.contextmanager
def own_kernel(root: Path, name: str) -> Iterator[str]:
    """Install kernelspec `name` (this interpreter) under `root`, found first while inside.

    COREAGENT_TEST_KERNEL_PYTHON names another interpreter for the kernel: CI runs the
    notebooks' tests with the kernel in the notebooks' own documented install (`.ci/run`),
    so they run once, from what a reader installs, and with the tests' assertions.
    """
    python = os.environ.get("COREAGENT_TEST_KERNEL_PYTHON") or sys.executable
    spec = root / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": f"coreagent-sdk tests ({name})",
                "language": "python",
            }
        )
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(root))
        patch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # the future default; no migration warning
        yield name
