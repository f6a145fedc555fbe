"""Live widgets, built headless and driven by real calls, expiries and evictions."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from coreagent_sdk import AgentConfig, CallPeerEvent, FakeClock, RuntimeCache
from coreagent_sdk.jupyter import run_sync
from coreagent_sdk.widgets import CacheView, CallLogView, FleetView
from simulator import Fleet, SimulatedBuilder, SimulatedConfigLoader, behaviors

from .clocks import SteppedTime
from .html_parse import Page

pytest.importorskip("ipywidgets")


def _value_changes(view: object) -> list[str]:
    """Every value the widget sends to the front end, observed on the widget itself."""
    sent: list[str] = []
    view.widget.observe(lambda change: sent.append(change["new"]), names="value")  # type: ignore[attr-defined]
    return sent


async def _until(predicate, seconds: float = 3.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


async def test_a_thousand_call_events_cause_only_a_few_front_end_updates() -> None:
    view = CallLogView(min_interval=0.05)
    sent = _value_changes(view)
    # The burst takes no time on the throttle's clock, however long a loaded machine takes
    # to send it: the count then says what the throttle did, not how fast this ran.
    frozen = time.monotonic()
    view._throttle._timer = lambda: frozen
    for i in range(1, 251):  # 250 calls, 4 events each: 1,000 events in a burst
        view.on_event(CallPeerEvent("started", "call_peer", f"p{i % 7}", call_id=i))
        view.on_event(CallPeerEvent("session_opened", "call_peer", f"p{i % 7}", "s", call_id=i))
        view.on_event(CallPeerEvent("truncated", "call_peer", f"p{i % 7}", "s", 3, call_id=i))
        view.on_event(
            CallPeerEvent("finished", "call_peer", f"p{i % 7}", "s", 3, call_id=i, response_bytes=9)
        )
    assert view.log.events == 1000
    assert len(sent) <= 2  # the first event drew at once; the rest wait for one trailing redraw
    await _until(lambda: "250" in Page(view.widget.value).text)
    assert len(sent) <= 3
    page = Page(view.widget.value)
    assert "CallLog: 250 (truncated 250)" in page.text
    view.close()


async def test_the_call_log_view_follows_real_concurrent_calls() -> None:
    fleet = Fleet()
    fleet.add_peer("echo", behaviors.echo())
    fleet.add_peer("flaky", behaviors.fail("transient_network", "<b>down</b>"))
    view = CallLogView(min_interval=0.02)
    async with fleet.call_peer(timeout=10, on_event=view.on_event) as tool:
        results = await asyncio.gather(
            *(tool.acall(peer=("echo", "flaky")[i % 2], prompt="hi") for i in range(20)),
            return_exceptions=True,
        )
    assert sum(isinstance(r, Exception) for r in results) == 10
    await _until(lambda: "CallLog: 20 (failed 10 · finished 10)" in Page(view.widget.value).text)
    page = Page(view.widget.value)
    errors = {row[6] for row in page.rows[1:]}
    assert errors == {"", "PeerTurnError"}
    assert "b" not in page.tags
    view.close()
    await fleet.aclose()


async def test_the_fleet_view_shows_peers_joining_expiring_coming_back_and_leaving() -> None:
    clock = FakeClock()
    fleet = Fleet(clock=clock)
    fleet.add_peer("prod-1", behaviors.echo())
    view = FleetView(fleet, interval=0.01, min_interval=0.0)

    def states() -> dict[str, str]:
        return {row[0]: row[5] for row in Page(view.widget.value).rows[1:]}

    assert states() == {"prod-1": "live"}
    fleet.add_peer("prod-2", behaviors.reply("ok"))
    await _until(lambda: states() == {"prod-1": "live", "prod-2": "live"})
    fleet.expire("prod-2")
    await _until(lambda: states() == {"prod-1": "live", "prod-2": "expired"})
    assert [r.state for r in view.rows] == ["live", "expired"]
    fleet.revive("prod-2")
    await _until(lambda: states() == {"prod-1": "live", "prod-2": "live"})
    fleet.remove_peer("prod-2")
    await _until(lambda: states() == {"prod-1": "live"})
    assert repr(view).startswith("FleetView([prod-1]")
    updates = view.updates
    await asyncio.sleep(0.1)  # ten ticks of an unchanged roster send nothing
    assert view.updates == updates
    view.close()
    await fleet.aclose()


def test_the_fleet_view_refreshes_by_hand_without_an_event_loop() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1")
    view = FleetView(fleet)
    fleet.expire("prod-1")
    view.refresh()
    assert Page(view.widget.value).rows[1][5] == "expired"
    view.close()


async def test_the_cache_view_shows_an_eviction_from_the_caches_own_events() -> None:
    loader = SimulatedConfigLoader(AgentConfig(id=a, slug=a) for a in "abc")
    seen: list[str] = []
    cache = RuntimeCache(
        loader, SimulatedBuilder(), max_instances=2, on_event=lambda e: seen.append(e.kind)
    )
    view = CacheView(cache, min_interval=0.02)
    for agent in ("a", "b", "a", "c"):
        await cache.processor(agent)

    def resident() -> list[str]:
        return [row[1] for row in Page(view.widget.value).rows[1:]]

    await _until(lambda: resident() == ["c", "a"] and "evictions 1" in Page(view.widget.value).text)
    assert "evicted" in seen and "hit" in seen  # the cache's own hook kept running
    assert view.events == len(seen)
    view.close()
    await cache.processor("b")
    assert view.events < len(seen)  # closed: unhooked
    await cache.aclose()


def test_min_interval_is_checked() -> None:
    with pytest.raises(ValueError, match="min_interval"):
        CallLogView(min_interval=-1)


def test_importing_the_sdk_and_the_simulator_imports_no_widgets_and_no_matplotlib() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, coreagent_sdk, simulator\n"
        "from simulator import Fleet\n"
        "Fleet().add_peer('p')\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('ipywidgets', 'matplotlib', 'IPython', 'ipykernel'))\n"
        "print(heavy)\n"
        "import coreagent_sdk.widgets, coreagent_sdk.plots\n"  # lazy even when imported
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ipywidgets', 'matplotlib')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == ["[]", "[]"]


def test_a_view_shows_its_table_where_widgets_do_not_run() -> None:
    view = CallLogView()
    view.on_event(CallPeerEvent("failed", "call_peer", "<i>p</i>", call_id=1, error_type="X"))
    view.refresh()
    bundle = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # the live widget
    page = Page(bundle["text/html"])  # what nbconvert and the docs render
    assert page.rows[1][1] == "<i>p</i>" and "i" not in page.tags
    assert bundle["text/plain"] == repr(view) and len(bundle["text/plain"]) < 200
    view.close()


async def test_a_live_view_shows_sync_calls_made_in_a_running_loop_and_the_async_ones_after() -> (
    None
):
    # As in a notebook cell: the sync call runs on run_sync's own loop in a worker thread,
    # which is closed when the call returns; the view's redraws must not be left on it.
    fleet = Fleet()
    fleet.add_peer("a", behaviors.echo())
    view = CallLogView(min_interval=0.05)
    tool = fleet.call_peer(timeout=5, on_event=view.on_event)
    for i in range(3):
        tool(peer="a", prompt=f"sync-{i}")
    await _until(lambda: "CallLog: 3 (finished 3)" in Page(view.widget.value).text)
    for i in range(3):
        await tool.acall(peer="a", prompt=f"async-{i}")
    await _until(lambda: "CallLog: 6 (finished 6)" in Page(view.widget.value).text)
    assert [row[1] for row in Page(view.widget.value).rows[1:]] == ["a"] * 6
    view.close()
    await tool.aclose()
    await fleet.aclose()


def test_a_view_whose_event_loop_has_closed_still_draws_the_events_that_follow() -> None:
    clock = SteppedTime()  # the throttle's clock moves by hand, not with a loaded machine

    async def build() -> CallLogView:
        # The loop's timer for the due redraw is real time: at 60 s it cannot fire while
        # asyncio.run shuts the loop down, however slow a loaded machine makes that.
        view = CallLogView(min_interval=60)
        view._throttle._timer = clock.monotonic
        view.on_event(CallPeerEvent("started", "call_peer", "p", call_id=1))  # draws at once
        view.on_event(CallPeerEvent("finished", "call_peer", "p", call_id=1))  # a redraw is due
        return view

    view = asyncio.run(build())  # its loop closes with that redraw still due
    view.on_event(CallPeerEvent("finished", "call_peer", "p", call_id=2))
    assert "finished" not in Page(view.widget.value).text  # inside the interval: not yet
    clock.step(60)  # no loop any more: the next event draws once the interval has passed
    view.on_event(CallPeerEvent("finished", "call_peer", "p", call_id=3))
    assert "CallLog: 3 (finished 3)" in Page(view.widget.value).text
    view.close()


async def test_views_fed_from_many_threads_redraw_on_their_own_loop_and_show_every_call() -> None:
    fleet = Fleet()
    fleet.add_peer("a", behaviors.echo())
    view = CallLogView(min_interval=0.01)
    drawn_on: set[int] = set()
    view.widget.observe(lambda _change: drawn_on.add(threading.get_ident()), names="value")
    tool = fleet.call_peer(timeout=10, on_event=view.on_event)

    def calls(worker: int) -> None:
        for j in range(10):
            tool(peer="a", prompt=f"{worker}-{j}")

    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(8) as pool:
        await asyncio.wait_for(
            asyncio.gather(*(loop.run_in_executor(pool, calls, w) for w in range(8))), 60
        )
    await _until(lambda: "CallLog: 80 (finished 80)" in Page(view.widget.value).text)
    assert drawn_on == {threading.get_ident()}  # never on a caller's thread
    view.close()
    await tool.aclose()
    await fleet.aclose()


async def test_the_cache_view_keeps_updating_after_sync_use_of_the_cache_in_a_running_loop() -> (
    None
):
    loader = SimulatedConfigLoader(AgentConfig(id=a, slug=a) for a in "abcd")
    cache = RuntimeCache(loader, SimulatedBuilder(), max_instances=2)
    view = CacheView(cache, min_interval=0.05)

    async def use(agents: str) -> None:
        for agent in agents:
            await cache.processor(agent)

    run_sync(use("abac"))  # on run_sync's own loop, closed when it returns

    def resident() -> list[str]:
        return [row[1] for row in Page(view.widget.value).rows[1:]]

    await _until(lambda: resident() == ["c", "a"] and "evictions 1" in Page(view.widget.value).text)
    await use("d")  # now on this loop
    await _until(lambda: resident() == ["d", "c"] and "evictions 2" in Page(view.widget.value).text)
    view.close()
    await cache.aclose()


async def test_the_cache_view_draws_a_cache_driven_on_another_thread_consistently() -> None:
    loader = SimulatedConfigLoader(AgentConfig(id=a, slug=a) for a in "abcdefgh")
    cache = RuntimeCache(loader, SimulatedBuilder(), max_instances=3)
    view = CacheView(cache, min_interval=0.0)  # every event asks for a redraw
    frames: list[tuple[str, int, int]] = []

    def check(change: dict[str, str]) -> None:
        page = Page(change["new"])
        frames.append((page.text.split(" resident")[0], len(page.rows) - 1, threading.get_ident()))

    view.widget.observe(check, names="value")

    async def churn() -> None:
        for i in range(300):
            await cache.processor("abcdefgh"[(i * 5) % 8])

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so a torn read would show
    try:
        worker = threading.Thread(target=asyncio.run, args=(churn(),))
        worker.start()
        for _ in range(600):  # the view's loop stays free to redraw while the worker churns
            if not worker.is_alive():
                break
            await asyncio.sleep(0.005)
        worker.join(timeout=10)
    finally:
        sys.setswitchinterval(switch)
    assert not worker.is_alive()
    await _until(lambda: f"hits {cache.stats.hits}" in Page(view.widget.value).text)
    assert len(frames) > 2
    for title, rows, drawn_on in frames:
        assert title == f"RuntimeCache: {rows} of 3", title  # count and rows from one moment
        assert drawn_on == threading.get_ident()
    view.close()
    await cache.aclose()


async def test_a_view_displayed_right_after_its_calls_shows_the_state_its_text_describes() -> None:
    # The first event draws at once; the rest of the call lands inside the interval, so its
    # redraw is still due when the cell displays the view.
    view = CallLogView(min_interval=60)
    view.on_event(CallPeerEvent("started", "call_peer", "p", call_id=1))
    view.on_event(CallPeerEvent("finished", "call_peer", "p", "s-1", 5, call_id=1))
    bundle = view._repr_mimebundle_()
    assert "CallLog: 1 (finished 1)" in Page(bundle["text/html"]).text
    assert "finished 1" in bundle["text/plain"]
    assert Page(view.widget.value).text == Page(bundle["text/html"]).text  # the widget too
    view.close()


async def test_closing_a_view_draws_its_final_state_first() -> None:
    loader = SimulatedConfigLoader(AgentConfig(id=a, slug=a) for a in "ab")
    cache = RuntimeCache(loader, SimulatedBuilder(), max_instances=2)
    view = CacheView(cache, min_interval=60)
    for agent in ("a", "b", "a"):
        await cache.processor(agent)
    view.close()
    assert "2 of 2 resident" in Page(view.widget.value).text
    assert "hits 1" in Page(view.widget.value).text
    await cache.aclose()


def test_a_fleet_view_displayed_reads_the_roster_first() -> None:
    fleet = Fleet()
    fleet.add_peer("prod-1")
    view = FleetView(fleet, min_interval=60)  # no loop: its timer never runs
    fleet.add_peer("prod-2")
    rows = Page(view._repr_mimebundle_()["text/html"]).rows
    assert [row[0] for row in rows[1:]] == ["prod-1", "prod-2"]
    view.close()
    fleet.close()
