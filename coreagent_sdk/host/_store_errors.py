"""A session store that cannot be read, as a lookup answers it (`writeLookupError`'s 400)."""

from __future__ import annotations

import logging
import sqlite3

from starlette.requests import Request
from starlette.responses import Response

from .._attach._quote import go_quote
from ._replies import _text

__all__ = ["STORE_ERRORS"]

_log = logging.getLogger("coreagent_sdk.host")

# What a store that cannot be read raises (see _store: sqlite3, the file, a closed store).
STORE_ERRORS = (sqlite3.Error, OSError, ValueError, RuntimeError)


class _StoreUnreadable(Exception):
    """A lookup's store read failed: answered 400, as `writeLookupError` answers an error
    that is neither a miss (404) nor an ambiguous id (409)."""


def _unreadable(daemon: str, sid: str, exc: BaseException) -> _StoreUnreadable:
    # The caller gets SQLite's own words (fixed texts: "no such table: sessions"), never a
    # path or a Python error's text; the host's log gets the whole error.
    _log.warning("AgentHost %r: resuming session %s: the store failed: %r", daemon, sid, exc)
    reason = str(exc) if isinstance(exc, sqlite3.Error) else type(exc).__name__
    return _StoreUnreadable(
        f"attach: resume {go_quote(sid)}: the session store could not be read ({reason})"
    )


def _answer_unreadable(request: Request, exc: Exception) -> Response:
    return _text(400, str(exc))
