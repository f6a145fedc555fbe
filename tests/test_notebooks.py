"""The notebooks run top to bottom in a real Jupyter kernel, quickly, and dial only loopback.

Each notebook is executed by nbclient in a fresh ipykernel (the `notebooks`
extra, part of `dev`), all of them side by side to keep the suite short. A
first cell, added here and not saved, installs an audit hook in the kernel
that records every address the kernel's Python code resolves or connects to
and refuses anything but loopback before the socket is touched; a last cell
reports what it saw.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .html_parse import Page
from .kernels import jupyter, own_kernel
from .loopback_guard import LOOPBACK

# Kernels execute every notebook; one xdist worker runs them all, so each runs once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("notebook-kernels")]

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
KERNEL = "coreagent-sdk-tests"

GUARD = f"""
import sys as _sys

_sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from loopback_guard import install as _install

_sys.path.pop(0)
_dialed = _install("notebook test")

# What every open view shows at the end of each cell, read from what it shows (its log, cache
# or fleet), not from the view: the truth each view's saved output is checked against.
_views_at = {{}}


def _record_views(result):
    widgets = _sys.modules.get("coreagent_sdk.widgets")
    if widgets is None:
        return
    truths = []
    for value in list(get_ipython().user_ns.values()):
        if not isinstance(value, widgets.CallLogView | widgets.CacheView | widgets.FleetView):
            continue
        if value.closed:
            continue
        if isinstance(value, widgets.CallTreeView):
            truths.append(value.log.tree()._repr_html_())
        elif isinstance(value, widgets.CallLogView):
            truths.append(value.log._repr_html_())
        elif isinstance(value, widgets.CacheView):
            truths.append(value.cache._repr_html_())
        else:
            truths.append(value.fleet._repr_html_())
    _views_at[result.execution_count] = truths


get_ipython().events.register("post_run_cell", _record_views)
"""

REPORT = """
import json as _json
print("DIALED=" + _json.dumps(sorted(set(_dialed))))
print("VIEWS=" + _json.dumps(_views_at))
"""


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kernelspec of our own that runs this interpreter, whatever else is installed."""
    with own_kernel(tmp_path_factory.mktemp("jupyter"), KERNEL) as name:
        yield name


def test_there_are_nine_notebooks() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01_delegation.ipynb",
        "02_truncation.ipynb",
        "03_eviction.ipynb",
        "04_trees.ipynb",
        "05_your_agent.ipynb",
        "06_model_fleet.ipynb",
        "07_experiments.ipynb",
        "08_mcp.ipynb",
        "09_a2a.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_is_committed_without_outputs_and_opens_with_what_it_shows(
    path: Path,
) -> None:
    nbformat, _ = jupyter()
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    first = notebook.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert "This notebook shows" in first.source


def test_the_delegation_notebook_makes_a_sync_call_in_a_cell() -> None:
    nbformat, _ = jupyter()
    notebook = nbformat.read(NOTEBOOKS[0], as_version=4)
    sources = [c.source for c in notebook.cells if c.cell_type == "code"]
    assert any("= call_peer(peer=" in s and "await" not in s for s in sources)


# Views shown in one cell and changed in the next, with a redraw interval far longer than
# the run: nothing but the end of each cell can bring the saved notebook up to date.
VIEW_CELLS = [
    """
from IPython.display import display
from coreagent_sdk import CallPeerEvent
from coreagent_sdk.widgets import CallLogView

kept, closed = CallLogView(min_interval=60), CallLogView(min_interval=60)
display(closed)
display(kept)
for view in (kept, closed):  # the first event draws at once; the second waits out the interval
    view.on_event(CallPeerEvent("started", "call_peer", "p", call_id=1))
    view.on_event(CallPeerEvent("finished", "call_peer", "p", "s-1", 5, call_id=1))
""",
    """
for view in (kept, closed):
    view.on_event(CallPeerEvent("started", "call_peer", "q", call_id=2))
    view.on_event(CallPeerEvent("failed", "call_peer", "q", call_id=2, error_type="X"))
kept
""",
    "closed.close()",
]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
RAISES = "# raises\n"

# A notebook that serves a fleet and calls it synchronously: first refused with one
# readable error, then, after the explicit opt-in, re-entering the kernel's loop.
NESTED_CELLS = [
    """
import asyncio, sys
import coreagent_sdk.jupyter, coreagent_sdk.widgets
from simulator import Fleet, behaviors

assert not [m for m in sys.modules if m.startswith("nest_asyncio")], "loaded before asked"
fleet = Fleet()
fleet.add_peer("p", behaviors.echo())
served = await fleet.serve()
tool = served.call_peer(timeout=5)
""",
    RAISES + 'tool(peer="p", prompt="before")',
    RAISES + 'fleet.call_peer(timeout=5)(peer="nobody", prompt="hello?")',
    RAISES + 'await fleet.call_peer(timeout=5).acall(peer="nobody", prompt="hello?")',
    """
from coreagent_sdk.jupyter import enable_nested_sync

enable_nested_sync()
print("ANSWER=" + tool(peer="p", prompt="after").response)
print("ANSWER=" + fleet.call_peer(timeout=5)(peer="p", prompt="in-process").response)
""",
    "await fleet.aclose()",
]


def _html_text(markup: Any) -> str:
    return " ".join(Page("".join(markup)).text.split())


def _saved_views(notebook: Any) -> list[tuple[int, str, str, str | None]]:
    """(cell index, the HTML an output keeps, its text, its widget's saved HTML or None)."""
    state = (
        notebook.metadata.get("widgets", {})
        .get("application/vnd.jupyter.widget-state+json", {})
        .get("state", {})
    )
    seen = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = "".join(data.get("text/plain", ""))
            if "text/html" not in data or not text.startswith(VIEW_REPRS):
                continue
            model = data.get(WIDGET_VIEW, {}).get("model_id")
            value = state[model]["state"]["value"] if model is not None else None
            seen.append((index, _html_text(data["text/html"]), text, value and _html_text(value)))
    return seen


VIEW_REPRS = ("CallLogView(", "CallTreeView(", "CacheView(", "FleetView(")


def _unclocked(text: str) -> str:
    # A lease's seconds left move with the clock between two reads: not what a view is about.
    return re.sub(r"\b[\d,]+ s\b", "<n> s", text)


def _views_at_each_cell(done: Run) -> dict[int, list[str]]:
    """What the notebook's own post_run_cell hook saw each open view show, by execution count."""
    report = "".join(
        o.get("text", "") for o in done.notebook.cells[-1].outputs if o.output_type == "stream"
    )
    seen = json.loads(report.split("VIEWS=", 1)[1].splitlines()[0])
    return {
        int(count): [_unclocked(_html_text(t)) for t in truths] for count, truths in seen.items()
    }


class Run:
    """One notebook executed in its own kernel: the notebook with outputs, time, error."""

    def __init__(self, notebook: Any, took: float, error: BaseException | None) -> None:
        self.notebook = notebook
        self.took = took
        self.error = error


@pytest.fixture(scope="module")
def runs(kernel_name: str) -> dict[str, Run]:
    """Every notebook, each in a fresh kernel, all at once (kernels start in parallel)."""
    nbformat, nbclient = jupyter()

    async def run(path: Path) -> tuple[str, Run]:
        notebook = nbformat.read(path, as_version=4)
        notebook.cells.insert(0, nbformat.v4.new_code_cell(GUARD))
        notebook.cells.append(nbformat.v4.new_code_cell(REPORT))
        client = nbclient.NotebookClient(
            notebook,
            timeout=60,  # per cell; the whole notebook is checked by the test
            kernel_name=kernel_name,
            resources={"metadata": {"path": str(path.parent)}},
        )
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            await client.async_execute()  # CellExecutionError on the first failing cell
        except Exception as exc:
            error = exc
        return path.stem, Run(notebook, time.perf_counter() - started, error)

    async def run_cells(name: str, sources: list[str], *, probed: bool = False) -> tuple[str, Run]:
        notebook = nbformat.v4.new_notebook()
        # Probed: the guard and the report around the cells, as around each notebook.
        for source in [GUARD, *sources, REPORT] if probed else sources:
            cell = nbformat.v4.new_code_cell(source.removeprefix(RAISES))
            if source.startswith(RAISES):
                cell.metadata["tags"] = ["raises-exception"]  # nbclient goes on past it
            notebook.cells.append(cell)
        client = nbclient.NotebookClient(notebook, timeout=60, kernel_name=kernel_name)
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            await client.async_execute()
        except Exception as exc:
            error = exc
        return name, Run(notebook, time.perf_counter() - started, error)

    async def run_all() -> dict[str, Run]:
        return dict(
            await asyncio.gather(
                run_cells("views", VIEW_CELLS, probed=True),
                run_cells("nested", NESTED_CELLS),
                *(run(p) for p in NOTEBOOKS),
            )
        )

    return asyncio.run(run_all())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_runs_top_to_bottom_in_a_kernel_in_under_a_minute(
    path: Path, runs: dict[str, Run]
) -> None:
    done = runs[path.stem]
    if done.error is not None:
        raise done.error
    # Measured while the other notebooks ran beside it: alone each takes a few seconds.
    assert done.took < 60, f"{path.name} took {done.took:.1f} s"
    notebook = done.notebook
    errors = [
        o
        for c in notebook.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    assert errors == []
    report = "".join(
        o.get("text", "") for o in notebook.cells[-1].outputs if o.output_type == "stream"
    )
    dialed = json.loads(report.split("DIALED=", 1)[1].splitlines()[0])
    assert set(dialed) <= set(LOOPBACK), dialed
    if path.stem == "01_delegation":
        assert dialed == ["127.0.0.1"]  # it served the fleet on loopback: the hook saw that


def test_each_display_of_a_view_saves_its_own_cells_state_and_close_keeps_those_records(
    runs: dict[str, Run],
) -> None:
    done = runs["views"]
    if done.error is not None:
        raise done.error
    views = _saved_views(done.notebook)
    first, second = "CallLog: 1 (finished 1)", "CallLog: 2 (failed 1 · finished 1)"
    # Cell 1 shows both views; the call it finished only its end could draw (interval 60 s).
    # Cell 2 changes both and shows `kept` again; cell 3 closes `closed`.
    assert [(cell, html[: len(first if cell == 1 else second)]) for cell, html, *_ in views] == [
        (1, first),
        (1, first),
        (2, second),
    ]
    (closed, kept_then, kept_now) = views
    assert closed[3] is None  # closed: its record stands where the widget was
    assert kept_then[3] is not None and second in kept_then[3]  # the live widget: the newest
    assert kept_now[2].startswith("CallLogView(CallLog(2 calls")


def _cell_html(page: str) -> dict[str, str]:
    """The converted page's markup for each cell, by the cell's id."""
    chunks = page.split('id="cell-id=')[1:]
    return {chunk.split('"', 1)[0]: chunk for chunk in chunks}


@pytest.mark.parametrize("stem", ["views", "01_delegation", "03_eviction", "06_model_fleet"])
def test_each_view_saved_in_a_converted_notebook_shows_the_state_at_its_own_cell(
    stem: str, runs: dict[str, Run]
) -> None:
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    done = runs[stem]
    if done.error is not None:
        raise done.error
    truths = _views_at_each_cell(done)
    views = _saved_views(done.notebook)
    assert views
    # As the notebooks guide converts (and the docs render): each view's HTML, not the widget.
    priority = ["text/html", "image/png", "text/plain"]
    page, _ = HTMLExporter(
        config=Config({"NbConvertBase": {"display_data_priority": priority}})
    ).from_notebook_node(done.notebook)
    cells = _cell_html(page)
    for index, html, *_ in views:
        cell = done.notebook.cells[index]
        at_its_end = truths[cell.execution_count]
        assert _unclocked(html) in at_its_end, (index, html, at_its_end)
        assert html in _html_text(cells[cell.id]), (index, html)


def _plain(lines: list[str]) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(lines))


def test_an_sdk_error_in_a_cell_shows_the_cells_line_and_the_message_only(
    runs: dict[str, Run],
) -> None:
    done = runs["nested"]
    if done.error is not None:
        raise done.error
    cells = done.notebook.cells
    expected = {1: "LoopBlockedError", 2: "UnknownPeerError", 3: "UnknownPeerError"}
    for index, name in expected.items():
        (error,) = [o for o in cells[index].outputs if o.output_type == "error"]
        shown = _plain(error.traceback)
        assert error.ename == name
        assert shown.count("Cell In[") == 1, shown  # the user's line
        assert "File " not in shown, shown  # and no frame of the SDK, asyncio or threads
        assert "During handling" not in shown and "direct cause" not in shown, shown
        assert shown.rstrip().splitlines()[-1].startswith(f"{name}: "), shown
    assert "enable_nested_sync()" in _plain(cells[1].outputs[0].traceback)
    assert 'unknown peer "nobody" (registered: "p")' in _plain(cells[2].outputs[0].traceback)


def test_after_the_opt_in_a_sync_call_reaches_the_fleet_the_notebook_serves(
    runs: dict[str, Run],
) -> None:
    done = runs["nested"]
    if done.error is not None:
        raise done.error
    printed = "".join(o.get("text", "") for o in done.notebook.cells[4].outputs)
    assert printed.split() == ["ANSWER=after", "ANSWER=in-process"]


def test_the_trees_notebook_shows_the_tree_displays_its_values_and_closes_its_fleets(
    runs: dict[str, Run],
) -> None:
    done = runs["04_trees"]
    if done.error is not None:
        raise done.error
    code = [c for c in done.notebook.cells if c.cell_type == "code"][1:-1]  # less guard, report
    assert not any("print(" in c.source for c in code)  # it displays, as the others do
    assert "aclose()" in code[-1].source and "replayed" in code[-1].source
    trees = [
        Page("".join(o.data["text/html"])).summaries
        for c in code
        for o in c.outputs
        if "".join(o.get("data", {}).get("text/plain", "")).startswith("CallTree: 7 calls")
    ]
    assert trees, "the first tree is shown as a tree"
    assert [(depth, text.split(" ")[0]) for depth, text in trees[0]] == [
        (1, "region"),
        (2, "zone-a"),
        (3, "node-a1"),
        (3, "node-a2"),
        (2, "zone-b"),
        (3, "node-b1"),
        (3, "node-b2"),
    ]


def test_the_model_fleet_notebook_routes_by_name_and_shows_the_slow_and_the_cut_specialist(
    runs: dict[str, Run],
) -> None:
    done = runs["06_model_fleet"]
    if done.error is not None:
        raise done.error
    code = [c for c in done.notebook.cells if c.cell_type == "code"][1:-1]  # less guard, report
    printed = "".join(o.get("text", "") for c in code for o in c.outputs if o.get("text"))
    assert (
        "Status report:\nstorage: Disks are 81% full on node-3.\n"
        "compute: CPU load is 0.62, steady.\n"
        "logs: ERROR disk latency high on node-3 (truncated)\n"
    ) in printed
    trees = [
        Page("".join(o.data["text/html"])).summaries
        for c in code
        for o in c.outputs
        if "".join(o.get("data", {}).get("text/plain", "")).startswith("CallTree: 6 calls")
    ]
    assert trees, "the tree of the first two questions is shown"
    calls = [(d, t.split(" ")[0]) for d, t in trees[0] if t.split(" ")[0] not in ("model", "tool")]
    # Each specialist under the router's call_peer step that asked it (the three at once).
    assert calls[:3] == [(1, "router"), (3, "storage"), (1, "router")]
    assert sorted(calls[3:]) == [(3, "compute"), (3, "logs"), (3, "storage")]
    # Tokens and calls come from to_pandas(), not from comprehensions over internals.
    source = "".join(c.source for c in code)
    assert "fleet.calls.to_pandas()" in source and "usage(prices)" in source
    assert "fleet.peer(" not in source and "for c in fleet.calls" not in source
    tables = {
        c.source.strip().splitlines()[-1]: Page("".join(o.data.get("text/html", ""))).rows
        for c in code
        for o in c.outputs
        if o.get("output_type") == "execute_result"
    }
    header, _index_name, *rows = [row for row in tables["by_agent"] if len(row) == 8]
    assert header[1:4] == ["turns", "model_rounds", "input_tokens"]
    by_agent = {row[0]: row[1:] for row in rows}
    assert sorted(by_agent) == ["compute", "logs", "router", "storage"]
    assert all(int(r[2]) > 0 and float(r[5]) > 0 for r in by_agent.values())  # tokens, cost
    # One delegation opened down to the model's rounds and tools: the status question.
    opened = [
        Page("".join(o.data["text/html"]))
        for c in code
        for o in c.outputs
        if "".join(o.get("data", {}).get("text/plain", "")).startswith("CallTree: 4 calls")
    ]
    assert opened, "the status question's delegation is shown"
    page = opened[0]
    assert page.opened == len(page.summaries) > 4
    kinds = [text.split(" ")[:2] for _, text in page.summaries]
    assert ["model", "scripted"] in kinds and ["tool", "call_peer"] in kinds
    # The fleet graph: an SVG in the saved output, with every agent.
    graphs = [
        "".join(o.data["text/html"])
        for c in code
        for o in c.outputs
        if "".join(o.get("data", {}).get("text/plain", "")).startswith("CallGraph(")
    ]
    assert graphs and "<svg" in graphs[0]
    assert all(f">{name}</text>" in graphs[0] for name in ("router", "storage", "compute", "logs"))
    assert "OpenAIChatModel(" in "".join(c.source for c in done.notebook.cells)
    assert "aclose()" in code[-1].source


def test_the_experiments_notebook_resumes_its_run_and_shows_intervals_and_confusion(
    runs: dict[str, Run],
) -> None:
    done = runs["07_experiments"]
    if done.error is not None:
        raise done.error
    code = [c for c in done.notebook.cells if c.cell_type == "code"][1:-1]  # less guard, report
    printed = "".join(o.get("text", "") for c in code for o in c.outputs if o.get("text"))
    resumed = re.search(r"(\d+) trials were already done; 300 rows now; stopped: None", printed)
    assert resumed and 0 < int(resumed.group(1)) < 300  # the first run stopped part way
    shown = "".join(
        "".join(o.get("data", {}).get("text/html", "")) for c in code for o in c.outputs
    )
    assert "Wilson score interval" in shown and "stopped: budget: tokens" in shown
    plain = "".join(
        "".join(o.get("data", {}).get("text/plain", "")) for c in code for o in c.outputs
    )
    assert "expected" in plain and "asked" in plain  # the confusion table
    assert "paired by case" in plain and "CaseDiff(persona='terse' -> persona='careful'" in plain
    assert "route: expected" in plain  # a flipped trial's tree explains itself
    # The saved progress bars show where each run ended, not the "0/300" they started at.
    assert re.search(r"routing: 100%.*300/300", plain), plain[:2000]
    assert "client.get_executor()" in "".join(c.source for c in done.notebook.cells)


def test_the_mcp_notebook_uses_a_servers_tools_and_serves_the_fleet_to_the_sdks_client(
    runs: dict[str, Run],
) -> None:
    done = runs["08_mcp"]
    if done.error is not None:
        raise done.error
    code = [c for c in done.notebook.cells if c.cell_type == "code"][1:-1]  # less guard, report
    shown = [
        "".join(o.get("text", "") or o.get("data", {}).get("text/plain", ""))
        for c in code
        for o in c.outputs
    ]
    text = "\n".join(shown)
    # The keeper's model called the notes server's tools under the daemon's names.
    assert "['notes_topics', 'notes_read', 'notes_add']" in text
    assert "keeper: notes_add: noted under deploys" in text
    # Served over MCP: one tool per peer, described from its card, called by the SDK's client.
    assert "keeper: Keeps the team's notes by topic." in text
    assert "router: Routes a request to the agent that handles it." in text
    assert "remember: the freeze starts Friday" in text
    assert "'peer': 'router'" in text and "'truncated': False" in text
    trees = [t for t in shown if t.startswith("CallTree: 4 calls in 2 trees")]
    assert trees, "both questions' trees are shown, the one asked over MCP among them"
