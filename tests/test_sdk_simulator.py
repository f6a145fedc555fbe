"""`coreagent_sdk.simulator`: the simulator's second import path (for projects owning the name)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import coreagent_sdk.simulator as second
import simulator
import simulator.behaviors


def test_where_the_name_is_ours_both_paths_give_the_same_objects() -> None:
    import coreagent_sdk.simulator.behaviors as behaviors

    assert second.Fleet is simulator.Fleet
    assert second.Turn is simulator.Turn
    assert behaviors is simulator.behaviors is second.behaviors
    assert second.__all__ == simulator.__all__


def test_an_unknown_name_is_an_attribute_error_naming_the_module() -> None:
    with pytest.raises(AttributeError, match=r"'coreagent_sdk.simulator' has no attribute 'Flet'"):
        second.Flet  # noqa: B018


def run(code: str, cwd: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_project_owning_the_name_simulator_gets_the_bundled_one_without_its_own_imported(
    tmp_path: Path,
) -> None:
    (tmp_path / "simulator").mkdir()
    (tmp_path / "simulator" / "__init__.py").write_text("raise RuntimeError('not me')\n")
    code = (
        "import asyncio, sys\n"
        "from coreagent_sdk.simulator import Fleet, behaviors\n"
        "import coreagent_sdk.simulator.behaviors as again\n"
        "async def main():\n"
        "    fleet = Fleet()\n"
        "    fleet.add_peer('p', behaviors.echo())\n"
        "    answer = await fleet.call_peer(timeout=5).acall(peer='p', prompt='hi')\n"
        "    await fleet.aclose()\n"
        "    return answer.response\n"
        "print(asyncio.run(main()), again is behaviors, 'simulator' in sys.modules,\n"
        "      Fleet.__module__)\n"
    )
    assert run(code, tmp_path) == ["hi", "True", "False", "coreagent_sdk.simulator._bundled._fleet"]


def test_importing_the_sdk_does_not_import_the_second_path(tmp_path: Path) -> None:
    code = "import sys, coreagent_sdk; print(any('simulator' in m for m in sys.modules))"
    assert run(code, tmp_path) == ["False"]
