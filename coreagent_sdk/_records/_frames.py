"""Records of calls as pandas tables (`to_pandas()`), when pandas is installed.

The invariant: `import coreagent_sdk` never imports pandas. It is imported
here, by the call that builds a table, and its absence is an `ImportError`
naming the extra that brings it (`jupyter`, hence `notebooks`). Tables are
built from copies the records already are (frozen values), so a table never
changes under a reader, and each column has one type whatever the rows hold
(a missing number is NaN or `<NA>`, not a mix of None and ints).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._calltree import CallTree
    from ._record import CallRecord

__all__ = ["CALL_COLUMNS", "STEP_COLUMNS", "calls_frame", "frame", "steps_frame", "tree_frame"]

CALL_COLUMNS = (
    "call_id",
    "parent",
    "peer",
    "tool",
    "state",
    "started",
    "ended",
    "duration_ms",
    "session_id",
    "response_bytes",
    "truncated",
    "error_type",
    "error",
    "model_rounds",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "steps_dropped",
)
"""The columns of `CallLog.to_pandas()`: one row per call."""

STEP_COLUMNS = (
    "call_id",
    "peer",
    "depth",
    "kind",
    "name",
    "started",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "error",
    "step_peer",
    "session_id",
    "sent",
    "received",
)
"""The columns of `CallTree.to_pandas(steps=True)`: one row per step of a turn."""

# Integer columns that may be missing: pandas' nullable Int64 keeps them integers.
_NULLABLE_INTS = frozenset(
    {"parent", "duration_ms", "response_bytes", "input_tokens", "output_tokens"}
)


def pandas() -> Any:
    """The pandas module; an `ImportError` naming the extra when it is not installed."""
    try:
        return importlib.import_module("pandas")
    except ImportError as exc:
        raise ImportError(
            "to_pandas: needs pandas, which coreagent-sdk does not install by default; "
            "pip install 'coreagent-sdk[jupyter]' (or pip install pandas)"
        ) from exc


def frame(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
    ints: frozenset[str] = _NULLABLE_INTS,
) -> Any:
    """A DataFrame of `rows` with exactly `columns`, missing integers (`ints`) as `<NA>`."""
    pd = pandas()
    table = pd.DataFrame(list(rows), columns=list(columns))
    for column in columns:
        if column in ints:
            table[column] = table[column].astype("Int64")
    return table


def _call_row(record: CallRecord) -> dict[str, Any]:
    chats = [s for s in record.steps if s.kind == "chat"]
    return {
        "call_id": record.call_id,
        "parent": record.parent,
        "peer": record.peer,
        "tool": record.tool,
        "state": record.state,
        "started": record.started,
        "ended": record.ended,
        "duration_ms": record.duration_ms,
        "session_id": record.session_id,
        "response_bytes": record.response_bytes,
        "truncated": record.truncated,
        "error_type": record.error_type,
        "error": record.error,
        "model_rounds": len(chats),
        "tool_calls": sum(1 for s in record.steps if s.kind == "tool"),
        "input_tokens": sum(s.input_tokens or 0 for s in chats) if chats else None,
        "output_tokens": sum(s.output_tokens or 0 for s in chats) if chats else None,
        "steps_dropped": record.steps_dropped,
    }


def calls_frame(records: Iterable[CallRecord]) -> Any:
    """One row per call, oldest first (`CALL_COLUMNS`)."""
    return frame((_call_row(r) for r in records), CALL_COLUMNS)


def tree_frame(tree: CallTree) -> Any:
    """One row per call in the tree's order (each under its caller), with depth and root."""
    rows = []
    root = 0
    for prefix, record in tree.walk():
        depth = len(prefix) // 4
        if depth == 0:
            root = record.call_id
        rows.append({"root": root, "depth": depth, **_call_row(record)})
    return frame(rows, ("root", "depth", *CALL_COLUMNS))


def steps_frame(tree: CallTree) -> Any:
    """One row per step of every turn, the turns in the tree's order (`STEP_COLUMNS`)."""
    rows = []
    for prefix, record in tree.walk():
        for step in sorted(record.steps, key=lambda s: s.started):
            rows.append(
                {
                    "call_id": record.call_id,
                    "peer": record.peer,
                    "depth": len(prefix) // 4,
                    "kind": step.kind,
                    "name": step.name,
                    "started": step.started,
                    "duration_ms": step.duration_ms,
                    "input_tokens": step.input_tokens,
                    "output_tokens": step.output_tokens,
                    "error": step.error,
                    "step_peer": step.peer,
                    "session_id": step.session_id,
                    "sent": step.sent,
                    "received": step.received,
                }
            )
    return frame(rows, STEP_COLUMNS, _NULLABLE_INTS - {"duration_ms"})  # a step's: float ms
