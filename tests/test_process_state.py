"""The guard that fails a test which leaves process-wide state behind sees each kind of it."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from .process_state import Snapshot


def test_an_env_var_set_and_a_working_directory_changed_are_both_named(
    monkeypatch, tmp_path
) -> None:
    taken = Snapshot()
    assert taken.changes() == []
    monkeypatch.setenv("COREAGENT_LEAK_PROBE", "1")
    monkeypatch.chdir(tmp_path)
    changes = taken.changes()
    assert any("'COREAGENT_LEAK_PROBE': None -> '1'" in c for c in changes)
    assert any(c.startswith("working directory") for c in changes)


def test_a_logger_level_and_a_handler_left_on_a_logger_are_named() -> None:
    logger = logging.getLogger("coreagent.leak-probe")
    taken = Snapshot()
    handler = logging.NullHandler()
    logger.setLevel(logging.ERROR)
    logger.addHandler(handler)
    try:
        assert any("logger 'coreagent.leak-probe'" in c for c in taken.changes())
    finally:
        logger.setLevel(logging.NOTSET)
        logger.removeHandler(handler)
    assert taken.changes() == []


def test_an_event_loop_policy_of_another_kind_and_a_patched_asyncio_are_named() -> None:
    class Patched(asyncio.DefaultEventLoopPolicy):
        pass

    taken = Snapshot()
    old_run = asyncio.run
    try:
        asyncio.set_event_loop_policy(Patched())
        asyncio.run = lambda *a, **k: None  # type: ignore[assignment]
        changes = taken.changes()
        assert any(c.startswith("asyncio event loop policy") for c in changes)
        assert any(c.startswith("asyncio.run replaced") for c in changes)
    finally:
        asyncio.run = old_run
        taken.restore()
    assert taken.changes() == []


def test_restore_puts_back_what_a_leaking_test_changed() -> None:
    taken = Snapshot()
    os.environ["COREAGENT_LEAK_PROBE"] = "2"
    logging.getLogger("coreagent.leak-probe").setLevel(logging.ERROR)
    assert len(taken.changes()) == 2
    taken.restore()
    assert taken.changes() == []
    assert "COREAGENT_LEAK_PROBE" not in os.environ


@pytest.mark.parametrize("what", ["env", "logger"])
def test_a_fresh_snapshot_sees_no_change_of_its_own(what) -> None:
    assert Snapshot().changes() == []
