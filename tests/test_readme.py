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


def test_the_readmes_python_blocks_are_formatted_as_ruff_formats_them() -> None:
    # The development section's `ruff format --check` reads the README's Python blocks too.
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed beside this Python (pip install -e '.[dev]')")
    readme = Path(__file__).resolve().parent.parent / "README.md"
    done = subprocess.run(
        [str(ruff), "format", "--check", "--diff", str(readme)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_development_section_checks_what_ci_checks() -> None:
    section = README.split("## Development", 1)[1]
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    for command in (
        "ruff check coreagent_sdk simulator tests bench",
        "ruff format --check coreagent_sdk simulator tests bench README.md",
        "mypy --strict coreagent_sdk",
    ):
        assert command in section and command in ci, command
