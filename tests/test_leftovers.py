"""A test that leaves an unclosed socket behind fails itself; the session does not fail later."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LEAKY = """
import socket


class Cycle:
    def __init__(self):
        self.me = self  # only the garbage collector frees this, whenever it runs
        self.sock = socket.socket()


def test_a_clean_one():
    pass


def test_leaves_an_unclosed_socket_in_a_cycle():
    Cycle()


def test_another_clean_one():
    pass
"""

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


def test_the_test_that_leaves_a_socket_unclosed_is_the_one_that_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeini(INI)
    pytester.makepyfile(test_leaky=LEAKY)
    result = pytester.runpytest_subprocess(
        "-p", "tests.leftovers", "-p", "no:randomly", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_leaves_an_unclosed_socket_in_a_cycle*", "*unclosed*"]
    )
    assert result.ret == 1
