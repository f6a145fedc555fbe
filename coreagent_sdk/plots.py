"""Plots of delegations (matplotlib, in the `jupyter` extra).

matplotlib is imported when a plot is drawn, never by `import coreagent_sdk`.
The plots read the same records the widgets show (`CallLog`), so a timeline
is drawn from what actually happened, not from a re-run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._calllog import CallLog, CallRecord

__all__ = ["OUTCOME_COLOURS", "delegation_timeline"]

OUTCOME_COLOURS = {
    "finished": "#1a7f37",
    "truncated": "#bf8700",
    "failed": "#cf222e",
    "running": "#0969da",
}
"""The colour of each call outcome in `delegation_timeline`, by state."""


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "coreagent_sdk.plots: needs matplotlib; pip install 'coreagent-sdk[jupyter]'"
        ) from exc
    return plt


def delegation_timeline(
    calls: CallLog | Iterable[CallRecord], *, ax: Any = None, title: str | None = None
) -> Any:
    """One horizontal bar per call, from its start to its end, coloured by outcome.

    ``calls`` is a `CallLog` or its records; calls still running end at the
    latest time seen. Returns the matplotlib ``Axes`` (a new figure unless
    ``ax`` is given).
    """
    records = sorted(calls, key=lambda r: (r.started, r.call_id))
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, min(12, 1.2 + 0.12 * max(1, len(records)))))
    latest = max((r.ended if r.ended is not None else r.started for r in records), default=0.0)
    origin = records[0].started if records else 0.0
    for row, r in enumerate(records):
        end = r.ended if r.ended is not None else latest
        ax.barh(
            row,
            max((end - r.started) * 1000, 0.05),
            left=(r.started - origin) * 1000,
            height=0.8,
            color=OUTCOME_COLOURS.get(r.state, "#57606a"),
            label=r.state,
        )
    handles, labels = ax.get_legend_handles_labels()
    firsts: dict[str, Any] = {}
    for handle, label in zip(handles, labels, strict=True):
        firsts.setdefault(label, handle)
    if firsts:
        ax.legend(firsts.values(), firsts.keys(), loc="lower right", fontsize="small")
    ax.set_xlabel("milliseconds since the first call started")
    ax.set_ylabel("call")
    ax.set_ylim(-1, max(1, len(records)))
    ax.set_title(title if title is not None else f"{len(records)} delegations")
    return ax
