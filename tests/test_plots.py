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


def test_an_empty_log_draws_an_empty_timeline() -> None:
    import matplotlib.pyplot as plt

    ax = delegation_timeline([])
    assert len(ax.patches) == 0 and ax.get_title() == "0 delegations"
    plt.close("all")
