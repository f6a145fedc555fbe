"""The session-wide canary watch (tests/canary.py) sees leaks where it says it looks."""

from __future__ import annotations

import logging

from coreagent_sdk import CallPeerEvent
from coreagent_sdk.errors import CoreAgentError

from .conftest import _WATCH, CANARY


def test_the_watch_reports_a_leak_in_a_log_record_of_any_logger_at_debug() -> None:
    logging.getLogger("somewhere.else").debug("token %s", CANARY[:15])
    leaks = _WATCH.verdict()  # clears, so this test itself passes
    assert len(leaks) == 1 and "logger 'somewhere.else' at DEBUG" in leaks[0]
    assert CANARY[:15] not in leaks[0]


def test_the_watch_reports_a_leak_in_the_context_of_an_error() -> None:
    try:
        try:
            raise KeyError(CANARY)
        except KeyError:
            raise CoreAgentError("clean") from None
    except CoreAgentError:
        pass
    leaks = _WATCH.verdict()
    assert leaks and all("-> __context__" in leak for leak in leaks)


def test_the_watch_reports_a_leak_in_an_event() -> None:
    CallPeerEvent(kind="failed", tool="t", peer="p", error=f"x{CANARY[-12:]}")
    leaks = _WATCH.verdict()
    assert len(leaks) == 1 and "repr of a CallPeerEvent" in leaks[0]


def test_the_watch_is_quiet_when_nothing_leaked() -> None:
    logging.getLogger("x").debug("nothing to see")
    CoreAgentError("fine")
    assert _WATCH.verdict() == []
