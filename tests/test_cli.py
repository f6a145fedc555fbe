"""`python -m simulator demo` and `serve`, as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

DEMO_SCENARIOS = [
    "delegation",
    "unknown peer",
    "discovery",
    "truncation",
    "turn error",
    "deadline",
    "lease expiry",
    "runtime eviction",
    "loopback sockets",
]


def test_the_demo_runs_every_scenario_in_under_ten_seconds() -> None:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "simulator", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    assert elapsed < 10
    out = done.stdout
    for scenario in DEMO_SCENARIOS:
        assert scenario in out, scenario
    assert "UnknownPeerError" in out and "PeerTimeoutError" in out and "truncated" in out
    assert "unexpected" not in out
    assert "9 scenarios in" in out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_answers_on_loopback_and_stops_cleanly_on_a_signal(sig) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "simulator", "serve", "--peers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            ready = json.loads(proc.stdout.readline())  # printed once every socket accepts
            urls = ready["urls"]
            assert set(urls) == {"hub", "peer-1", "peer-2"}
            assert all(u.startswith("http://127.0.0.1:") for u in urls.values())
            peers = httpx.get(f"{urls['hub']}/peers", timeout=5).json()["peers"]
            assert {p["name"]: p["endpoint"] for p in peers} == {
                "peer-1": urls["peer-1"],
                "peer-2": urls["peer-2"],
            }
            proc.send_signal(sig)
            returncode = proc.wait(timeout=15)
            stderr = proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
    assert returncode == 0, stderr
    assert "simulator: stopped" in stderr and "Traceback" not in stderr


def test_a_negative_peer_count_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "simulator", "serve", "--peers", "-1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "--peers must be >= 0" in done.stderr
