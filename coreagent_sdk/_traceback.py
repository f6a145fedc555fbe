"""How an SDK error shows in IPython: the user's own frames, then the message.

The invariant: what IPython prints for an error this package raises on
purpose (a `CoreAgentError`) is the cell's frames that led to the call and
the message, which already names the component, the bad value and the fix;
nothing is taken from the error itself. Its full traceback and its chained
cause stay on the exception, and IPython's ``%tb``, ``%debug`` and
``%xmode Verbose`` show them whole.

Without this, an unknown peer printed five SDK frames before its message,
and a sync call (run on a worker thread, see `run_sync`) printed the
worker's frames, asyncio's and concurrent.futures', and then those of
each chained cause: two screens for one sentence of diagnosis.
"""

from __future__ import annotations

import sys
import traceback
import types
from typing import Any

__all__ = ["render_for_ipython"]

# Frames from these packages are the machinery between the user's call and the error.
_MACHINERY = frozenset(
    {
        "coreagent_sdk",
        "simulator",
        "asyncio",
        "concurrent",
        "threading",
        "contextlib",
        "httpx",
        "httpcore",
        "anyio",
        "IPython",
        "ipykernel",
    }
)


def _machinery(frame: types.FrameType) -> bool:
    module = frame.f_globals.get("__name__", "")
    return isinstance(module, str) and module.partition(".")[0] in _MACHINERY


def _users_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A new traceback chain holding only the frames outside the machinery, in order."""
    kept: list[types.TracebackType] = []
    while tb is not None:
        if not _machinery(tb.tb_frame):
            kept.append(tb)
        tb = tb.tb_next
    rebuilt: types.TracebackType | None = None
    for entry in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def render_for_ipython(exc: BaseException) -> list[str]:
    """IPython's structured traceback for `exc`: the user's frames and the message, no chain."""
    try:
        ipython = sys.modules.get("IPython")
        shell: Any = ipython.get_ipython() if ipython is not None else None
        formatter = getattr(shell, "InteractiveTB", None)
        if formatter is None:
            return traceback.format_exception(type(exc), exc, exc.__traceback__)
        if getattr(formatter, "mode", "") == "Verbose":
            return list(formatter.structured_traceback(type(exc), exc, exc.__traceback__))
        # The chain is left out of the display only: the cause's text is in the message,
        # and the exception keeps its cause for %tb and %debug.
        cause, suppress = exc.__cause__, exc.__suppress_context__
        exc.__cause__, exc.__suppress_context__ = None, True
        try:
            return list(
                formatter.structured_traceback(
                    type(exc), exc, _users_frames(exc.__traceback__), tb_offset=0
                )
            )
        finally:
            exc.__cause__, exc.__suppress_context__ = cause, suppress
    except Exception:  # IPython prints a confusing warning if this raises: fall back
        return traceback.format_exception(type(exc), exc, exc.__traceback__)
