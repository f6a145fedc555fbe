"""The README's runnable examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_the_delegation_example_prints_the_peers_answer() -> None:
    example = next(b for b in PYTHON_BLOCKS if "asyncio.run(main())" in b)
    done = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("listing nodes\n\n3 nodes ready\n")


def test_the_fixture_example_passes_as_a_users_test(pytester: pytest.Pytester) -> None:
    example = next(b for b in PYTHON_BLOCKS if "def test_" in b)
    pytester.makepyfile(test_from_readme=example)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
