"""The delegation timeline, drawn headless (Agg) from a real call log."""

from __future__ import annotations

import asyncio

import pytest

from coreagent_sdk import CallLog
from coreagent_sdk.plots import OUTCOME_COLOURS, delegation_timeline
from simulator import Fleet, behaviors

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


async def test_the_timeline_draws_one_bar_per_call_coloured_by_outcome() -> None:
    import matplotlib.colors
    import matplotlib.pyplot as plt

    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    fleet.add_peer("writer", behaviors.stream(2_000, 200))
    fleet.add_peer("flaky", behaviors.fail())
    log = CallLog()
    async with fleet.call_peer(timeout=10, max_response_bytes=100, on_event=log.on_event) as tool:
        await asyncio.gather(
            *(tool.acall(peer=p, prompt="x") for p in ["echo"] * 5 + ["writer"] * 3 + ["flaky"]),
            return_exceptions=True,
        )
    ax = delegation_timeline(log)
    bars = ax.patches
    assert len(bars) == 9
    colours = [matplotlib.colors.to_hex(b.get_facecolor()) for b in bars]
    assert colours.count(OUTCOME_COLOURS["finished"]) == 5
    assert colours.count(OUTCOME_COLOURS["truncated"]) == 3
    assert colours.count(OUTCOME_COLOURS["failed"]) == 1
    assert all(b.get_width() > 0 for b in bars)
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == [
        "failed",
        "finished",
        "truncated",
    ]
    plt.close("all")
    await fleet.aclose()


async def test_the_timelines_legend_sits_clear_of_every_bar_and_rows_carry_the_logs_call_ids() -> (
    None
):
    import matplotlib.pyplot as plt

    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    fleet.add_peer("flaky", behaviors.fail())
    log = CallLog()
    async with fleet.call_peer(timeout=10, on_event=log.on_event) as tool:
        await tool.acall(peer="echo", prompt="first")  # ids of other tests' calls came first
        await asyncio.gather(
            *(tool.acall(peer=p, prompt="x") for p in ["echo"] * 20 + ["flaky"] * 5),
            return_exceptions=True,
        )
    ax = delegation_timeline(log)
    figure = ax.figure
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    covered = [b for b in ax.patches if b.get_window_extent(renderer).overlaps(legend)]
    assert covered == []
    assert legend.x0 >= ax.get_window_extent(renderer).x1  # beside the plot, not on it
    by_start = sorted(log.records(), key=lambda r: (r.started, r.call_id))
    shown = {
        round(t): label.get_text()
        for t, label in zip(ax.get_yticks(), ax.get_yticklabels(), strict=True)
    }
    shown = {row: text for row, text in shown.items() if 0 <= row < len(by_start)}
    assert len(shown) >= 3
    assert all(text == str(by_start[row].call_id) for row, text in shown.items())
    assert min(r.call_id for r in by_start) > 0 and ax.get_ylabel() == "call id"
    plt.close("all")
    await fleet.aclose()


def test_an_empty_log_draws_an_empty_timeline() -> None:
    import matplotlib.pyplot as plt

    ax = delegation_timeline([])
    assert len(ax.patches) == 0 and ax.get_title() == "0 delegations"
    plt.close("all")


async def test_a_fleets_calls_are_drawn_grouped_by_delegation_tree() -> None:
    import matplotlib.pyplot as plt

    fleet = Fleet()
    fleet.add_peer("boss", behaviors.fan_out(via=fleet, labels={"team": "x"}, timeout=5))
    for name in ("w1", "w2"):
        fleet.add_peer(name, behaviors.echo(), labels={"team": "x"})
    tool = fleet.call_peer(timeout=10)
    await tool.acall(peer="boss", prompt="go")
    await tool.acall(peer="w1", prompt="alone")
    ax = delegation_timeline(fleet.calls)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["boss", "   w1", "   w2", "w1"]  # each tree together, callees indented
    assert ax.get_title() == "4 calls in 2 delegation trees"
    separators = [line for line in ax.get_lines() if line.get_ydata()[0] == 2.5]
    assert len(separators) == 1  # a line between the two trees
    bars = ax.patches
    starts = [b.get_x() for b in bars]
    assert starts[1] >= starts[0] and starts[3] >= starts[2]  # a callee starts after its caller
    flat = delegation_timeline(fleet.calls, by_tree=False)
    assert flat.get_title() == "4 delegations"
    plt.close("all")
    await fleet.aclose()


# Names and grid values are text, never TeX: matplotlib reads "$...$" as mathtext, which
# raised ValueError at the draw for "p$^$q" and set "$x$" in italics.
DOLLARS = ["p$^$q", "a$_$b", "$x$"]


def test_peer_names_with_dollar_signs_are_drawn_as_written_on_the_timeline() -> None:
    import matplotlib.pyplot as plt

    from coreagent_sdk import CallRecord

    records = [
        CallRecord(1, "call_peer", DOLLARS[0], "finished", started=0.0, ended=0.1, parent=None),
        *(
            CallRecord(i + 2, "call_peer", name, "finished", started=0.01, ended=0.05, parent=1)
            for i, name in enumerate(DOLLARS[1:])
        ),
    ]
    try:
        ax = delegation_timeline(records, title="dollars")
        ax.figure.canvas.draw()  # mathtext would raise here
        labels = ax.get_yticklabels()
        assert [t.get_text().strip() for t in labels] == DOLLARS
        assert not any(t.get_parse_math() for t in labels)
    finally:
        plt.close("all")


def test_grid_values_with_dollar_signs_are_drawn_as_written_in_every_results_plot() -> None:
    import json

    import matplotlib.pyplot as plt

    from simulator.experiments import Results

    rows = [
        {
            "scenario": "s", "params": json.dumps({"price": value}), "price": value,
            "case": "c", "seed": 1, "repetition": 0, "passed": i % 2 == 0,
            "duration_ms": 1.0 + i, "tokens_in": 1, "tokens_out": i, "cost": None,
            "error_kind": None,
        }
        for i, value in enumerate(DOLLARS)
    ]  # fmt: skip
    results = Results(rows)
    try:
        for plot in ("plot_pass_rate", "plot_latency", "plot_cost", "plot_cost_vs_accuracy"):
            ax = getattr(results, plot)(by="price")
            ax.figure.canvas.draw()  # mathtext would raise here
            legend = ax.get_legend()
            texts = [
                *ax.get_yticklabels(),
                *ax.texts,
                ax.title,
                ax._left_title,
                *(legend.get_texts() if legend is not None else []),
            ]
            # What each text draws (matplotlib's own reading of it): plain text, never TeX.
            drawn = [t._preprocess_math(t.get_text()) for t in texts if "$" in t.get_text()]
            assert drawn and not any(math for _, math in drawn), plot
            shown = " ".join(text for text, _ in drawn)
            assert all(value in shown for value in DOLLARS), (plot, shown)
    finally:
        plt.close("all")
