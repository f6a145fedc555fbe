"""Plots of delegations (matplotlib, in the `jupyter` extra).

matplotlib is imported when a plot is drawn, never by `import coreagent_sdk`.
The plots read the same records the widgets show (`CallLog`), so a timeline
is drawn from what actually happened, not from a re-run; records that carry
their parent call (a simulated fleet's ``fleet.calls``) are drawn grouped by
delegation tree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._records._calllog import CallLog, CallRecord
from ._records._calltree import CallTree

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
    calls: CallLog | CallTree | Iterable[CallRecord],
    *,
    ax: Any = None,
    title: str | None = None,
    by_tree: bool | None = None,
) -> Any:
    """One horizontal bar per call, from its start to its end, coloured by outcome.

    ``calls`` is a `CallLog`, a `CallTree` or records; calls still running end
    at the latest time seen. With ``by_tree`` (the default when any call has
    its parent among them, as a fleet's ``fleet.calls`` has) the rows are
    grouped by delegation tree: each call under the call that made it, labelled
    with its peer indented by depth, a line between trees. Otherwise one row
    per call by start time, labelled with its call id (the id the call log's
    table shows). The legend sits beside the axes, clear of the bars. Returns
    the matplotlib ``Axes`` (a new figure unless ``ax`` is given).
    """
    records = list(calls.records) if isinstance(calls, CallTree) else list(calls)
    ids = {r.call_id for r in records}
    if by_tree is None:
        by_tree = any(r.parent in ids for r in records)
    if by_tree:
        rows = [(prefix, r) for prefix, r in CallTree(tuple(records)).walk()]
    else:
        rows = [("", r) for r in sorted(records, key=lambda r: (r.started, r.call_id))]
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(
            figsize=(8, min(12, 1.2 + (0.25 if by_tree else 0.12) * max(1, len(rows))))
        )
    latest = max((r.ended if r.ended is not None else r.started for r in records), default=0.0)
    origin = min((r.started for r in records), default=0.0)
    for row, (_, r) in enumerate(rows):
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
        # Beside the axes, never over a bar (Jupyter's inline figures are cut to fit it).
        ax.legend(
            firsts.values(),
            firsts.keys(),
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0.0,
            fontsize="small",
            frameon=False,
        )
    ax.set_xlabel("milliseconds since the first call started")
    if by_tree:
        # Indentation by depth (the branches' own characters need a font that has them).
        # Names are text, never TeX: "$^$" in a peer name raised mathtext's ValueError.
        ax.set_yticks(
            range(len(rows)),
            [" " * 3 * (len(prefix) // 4) + r.peer for prefix, r in rows],
            parse_math=False,
        )
        for row, (prefix, _) in enumerate(rows):
            if row and not prefix:
                ax.axhline(row - 0.5, color="#d0d7de", linewidth=0.8)
        ax.set_ylim(len(rows) - 0.5, -0.5)  # the first tree on top, each root above its calls
        trees = sum(1 for prefix, _ in rows if not prefix)
        default = f"{len(rows)} calls in {trees} delegation tree{'s' if trees != 1 else ''}"
    else:
        # Rows are numbered by the call's id, as the call log's table and CallRecord.call_id.
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        row_ids = [r.call_id for _, r in rows]

        def call_id(y: float, _position: int) -> str:
            row = round(y)
            return str(row_ids[row]) if abs(y - row) < 1e-9 and 0 <= row < len(row_ids) else ""

        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(FuncFormatter(call_id))
        ax.set_ylabel("call id")
        ax.set_ylim(-1, max(1, len(rows)))
        default = f"{len(rows)} delegations"
    ax.set_title(title if title is not None else default)
    return ax
