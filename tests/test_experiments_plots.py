"""Plots of experiments are readable: no text drawn over other text or off the figure."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from coreagent_sdk import Price, PriceTable
from simulator.experiments import Experiment, Results

from .experiment_fleets import routing

plt = pytest.importorskip("matplotlib.pyplot")


@pytest.fixture(scope="module")
def priced() -> Results:
    # Six settings, one parameter constant, and a cost of millionths of a dollar a trial.
    prices = PriceTable({n: Price(0.15, 0.6) for n in ("scripted", "storage", "compute", "logs")})
    grid = {"error_rate": [0.0, 0.2, 0.4, 0.6, 0.8, 1.0], "persona": ["a $ b $ c"], "k": [1]}
    return Experiment(routing(prices=prices), grid=grid).run(progress=False)


def _texts(figure: Any) -> list[tuple[str, Any]]:
    """Every text the figure draws, with its extent on the canvas."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    drawn = []
    ticks = set()
    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                ticks.update({id(tick.label1), id(tick.label2)})
                # Ticks outside the view exist but are not drawn.
                if low - 1e-9 <= tick.get_loc() <= high + 1e-9 and tick.label1.get_visible():
                    drawn.append(tick.label1)
    drawn += [
        t for t in figure.findobj(match=lambda a: type(a).__name__ in ("Text", "Annotation"))
        if id(t) not in ticks and t.get_visible()
    ]  # fmt: skip
    return [(t.get_text(), t.get_window_extent(renderer)) for t in drawn if t.get_text().strip()]


def _readable(figure: Any) -> None:
    texts = _texts(figure)
    assert texts
    whole = figure.bbox
    for label, box in texts:
        assert whole.x0 - 1 <= box.x0 and box.x1 <= whole.x1 + 1, f"{label!r} runs off the figure"
        assert whole.y0 - 1 <= box.y0 and box.y1 <= whole.y1 + 1, f"{label!r} runs off the figure"
    for (a, box_a), (b, box_b) in itertools.combinations(texts, 2):
        overlap = box_a.overlaps(box_b) and (
            min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 1
            and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 1
        )
        assert not overlap, f"{a!r} is drawn over {b!r}"


@pytest.mark.parametrize(
    "plot", ["plot_cost_vs_accuracy", "plot_pass_rate", "plot_cost", "plot_latency"]
)
def test_each_plot_draws_no_text_over_other_text_or_off_the_figure(
    priced: Results, plot: str
) -> None:
    ax = getattr(priced, plot)()
    try:
        _readable(ax.figure)
    finally:
        plt.close(ax.figure)


def test_side_by_side_plots_stay_readable_with_tight_layout(priced: Results) -> None:
    figure, axes = plt.subplots(1, 2, figsize=(12, 3.2))
    try:
        priced.plot_pass_rate(ax=axes[0])
        priced.plot_cost_vs_accuracy(ax=axes[1])
        figure.tight_layout()
        _readable(figure)
    finally:
        plt.close(figure)


def test_cost_is_drawn_in_a_unit_that_fits_and_constants_are_said_once(priced: Results) -> None:
    ax = priced.plot_cost_vs_accuracy()
    try:
        assert "µ$" in ax.get_xlabel()
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend[0] == "error_rate=0.0" and len(legend) == 6  # no persona on each point
        title = ax._left_title  # "$" drawn as itself, not as mathtext
        assert title.get_text() == "persona=a $ b $ c, k=1" and not title.get_parse_math()
        ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert ticks and all(len(t) <= 6 for t in ticks), ticks
    finally:
        plt.close(ax.figure)
