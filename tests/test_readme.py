"""The README's runnable examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import PLAIN_PYTEST

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_the_delegation_example_prints_the_peers_answer() -> None:
    example = next(b for b in PYTHON_BLOCKS if "asyncio.run(main())" in b)
    done = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("listing nodes\n\n3 nodes ready\n")


def test_the_delegation_example_closes_the_fleet_it_opens() -> None:
    example = next(b for b in PYTHON_BLOCKS if "asyncio.run(main())" in b)
    # Count the Fleet.aclose calls the example makes, and report them at exit.
    prelude = (
        "import atexit, simulator\n"
        "closed = []\n"
        "_aclose = simulator.Fleet.aclose\n"
        "async def _counting(self):\n"
        "    closed.append(self)\n"
        "    await _aclose(self)\n"
        "simulator.Fleet.aclose = _counting\n"
        "atexit.register(lambda: print('fleets closed:', len(closed)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", prelude + example],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("fleets closed: 1")


def test_the_readme_links_to_files_that_exist() -> None:
    root = Path(__file__).resolve().parent.parent
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert "docs/benchmarks.md" in local and "docs/differences.md" in local
    assert [link for link in local if not (root / link).exists()] == []


def test_the_readme_is_a_front_door_not_a_lab_notebook() -> None:
    # Benchmark tables and the fidelity list live on their own docs pages.
    assert len(README.splitlines()) < 160
    assert "## Benchmarks" not in README and "## Where we differ" not in README


def test_the_fixture_example_passes_as_a_users_test(pytester: pytest.Pytester) -> None:
    example = next(b for b in PYTHON_BLOCKS if "def test_" in b)
    pytester.makepyfile(test_from_readme=example)
    pytester.runpytest_subprocess(*PLAIN_PYTEST).assert_outcomes(passed=1)


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
        "ruff check coreagent_sdk simulator tests bench notebooks examples",
        "ruff format --check coreagent_sdk simulator tests bench notebooks examples README.md",
        "mypy --strict coreagent_sdk",
    ):
        assert command in section and command in ci, command


@pytest.mark.parametrize("command", [["check"], ["format", "--check", "--diff"]])
def test_the_notebooks_and_examples_are_as_ruff_wants_them(command: list[str]) -> None:
    """ruff reads .ipynb: the notebooks are code users copy, linted as the package is."""
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed beside this Python (pip install -e '.[dev]')")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [str(ruff), *command, "notebooks", "examples"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_host_example_serves_an_agent_that_a_call_peer_reaches() -> None:
    example = next(b for b in PYTHON_BLOCKS if "AgentHost(" in b)
    done = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "triaged: disk full\n"
