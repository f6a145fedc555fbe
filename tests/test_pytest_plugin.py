"""The `fleet` fixture users get by installing the package (pytest11 entry point)."""

from __future__ import annotations

import subprocess
import sys

import pytest

USER_TESTS = """
from simulator import behaviors

def test_my_agent_delegates(fleet):
    fleet.add_peer("prod-1", behaviors.reply("3 nodes ready"))
    tool = fleet.call_peer(timeout=5)
    assert tool(peer="prod-1", prompt="status?").response == "3 nodes ready"

def test_each_test_gets_a_fresh_fleet(fleet):
    assert [p.name for p in fleet.registry.peers()] == []
"""


def test_a_users_test_gets_a_simulated_fleet_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_the_plugin_does_not_import_the_simulator_until_the_fixture_is_used() -> None:
    code = (
        "import sys, simulator.pytest_plugin; "
        "print('simulator._fleet' in sys.modules, 'starlette' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.split() == ["False", "False"]
