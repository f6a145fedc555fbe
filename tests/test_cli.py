"""`python -m simulator demo` and `serve`, as a user runs them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.processes import reap, timed_exit


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


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


def run_demo(out: Path, err: Path) -> subprocess.Popen[str]:
    with out.open("w") as stdout, err.open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "simulator", "demo"],
            stdout=stdout,
            stderr=stderr,
            text=True,
            env={**os.environ, "COLUMNS": "72"},  # a narrow terminal
        )


async def test_the_demo_runs_every_scenario_in_under_ten_seconds(tmp_path: Path) -> None:
    out_file, err_file = tmp_path / "out.txt", tmp_path / "err.txt"
    proc = run_demo(out_file, err_file)
    try:
        # From its start to its exit, less the time it waited for a CPU on a loaded machine.
        code, took = await timed_exit(proc, 60)
    finally:
        reap(proc)
    assert code == 0, err_file.read_text()
    assert took < 10, f"the demo took {took:.2f} s (not counting its waits for a CPU)"
    out = out_file.read_text()
    assert max(len(line) for line in out.splitlines()) <= 72  # the table fits the terminal
    # Its details are wrapped, not cut: the unknown peer's roster is there in full.
    joined = " ".join(out.split())
    assert '(registered: "flaky", "prod-1", "prod-2", "slowpoke", "writer")' in joined
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


def run_serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simulator", "serve", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_serve_on_a_port_in_use_says_so_in_one_line_and_exits_2() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_serve("--port", str(port), "--peers", "1")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"simulator: port {port} is already in use (another fleet or program holds it); "
        "stop that, pick another --port, or pass --port 0 for free ports"
    ]


def test_serve_on_a_host_that_is_not_loopback_says_so_in_one_line_and_exits_2() -> None:
    done = run_serve("--host", "0.0.0.0")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "simulator: serve binds loopback only, got host '0.0.0.0'; use '127.0.0.1'"
    ]


@pytest.mark.parametrize("ttl", ["0", "-1", "nan", "inf"])
def test_a_ttl_that_is_not_a_positive_number_is_a_usage_error(ttl, capsys) -> None:
    from simulator.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(["serve", f"--ttl={ttl}"])
    assert exited.value.code == 2
    assert "--ttl must be a positive number of seconds" in capsys.readouterr().err


def test_served_peers_with_a_one_second_lease_are_still_listed_after_it() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "simulator", "serve", "--peers", "2", "--ttl", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:
        try:
            assert proc.stdout is not None
            urls = json.loads(proc.stdout.readline())["urls"]
            first = {
                p["name"]: p for p in httpx.get(f"{urls['hub']}/peers", timeout=5).json()["peers"]
            }
            time.sleep(1.5)  # past the one-second lease: only heartbeats keep them
            later = httpx.get(f"{urls['hub']}/peers", timeout=5).json()["peers"]
            now = time.time()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            finally:
                if proc.poll() is None:
                    proc.kill()
    assert sorted(first) == ["peer-1", "peer-2"]
    assert [p["name"] for p in later] == ["peer-1", "peer-2"]
    for row in later:
        assert stamp(row["lease_expires_at"]) > now
        assert stamp(row["last_heartbeat"]) > stamp(first[row["name"]]["last_heartbeat"])
    assert proc.returncode == 0


@contextlib.contextmanager
def serving(*args: str) -> Iterator[dict[str, str]]:
    """`python -m simulator serve ARGS` until the block ends (SIGTERM); yields its URLs."""
    with subprocess.Popen(
        [sys.executable, "-m", "simulator", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:
        try:
            assert proc.stdout is not None
            yield json.loads(proc.stdout.readline())["urls"]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            finally:
                if proc.poll() is None:
                    proc.kill()


def test_serve_with_the_session_rate_limit_answers_429_past_the_daemons_burst_of_5() -> None:
    with serving("--peers", "1", "--session-rate-limit") as urls:
        statuses = []
        with httpx.Client(timeout=5, trust_env=False) as client:
            for _ in range(6):
                answer = client.post(f"{urls['peer-1']}/sessions", json={})
                statuses.append(answer.status_code)
        retry_after = answer.headers.get("retry-after")
    assert statuses == [201] * 5 + [429]
    assert retry_after == "6"  # 10 a minute: one more session in 6 s


def test_serve_takes_its_own_burst_and_rate() -> None:
    args = ("--peers", "1", "--rate-limit-burst", "2", "--rate-limit-per-minute", "1")
    with serving(*args) as urls, httpx.Client(timeout=5, trust_env=False) as client:
        answers = [client.post(f"{urls['peer-1']}/sessions", json={}) for _ in range(3)]
    assert [a.status_code for a in answers] == [201, 201, 429]
    assert answers[-1].headers["retry-after"] == "60"


def test_serve_without_the_flag_opens_sessions_unlimited() -> None:
    with serving("--peers", "1") as urls, httpx.Client(timeout=5, trust_env=False) as client:
        statuses = {
            client.post(f"{urls['peer-1']}/sessions", json={}).status_code for _ in range(8)
        }
    assert statuses == {201}


def test_serve_gives_its_peers_the_session_idle_timeout(monkeypatch, capsys) -> None:
    # What eviction then does (a sweep every max(idle / 4, 60 s), evicted sessions listed
    # as idle and resumed) is the host's, pinned in tests/test_host_store.py on a fake clock.
    from simulator import __main__ as cli

    made: list[dict[str, object]] = []

    def fleet(**options: object) -> None:
        made.append(options)
        raise ValueError("seen the fleet's options; not serving it")

    monkeypatch.setattr(cli, "Fleet", fleet)
    assert cli.main(["serve", "--peers", "1", "--session-idle-timeout", "0.3"]) == 2
    assert made[0]["session_idle_timeout"] == 0.3
    assert "seen the fleet's options" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--rate-limit-burst", "0"], "--rate-limit-burst must be >= 1"),
        (["--rate-limit-per-minute", "0"], "--rate-limit-per-minute must be a positive number"),
        (["--rate-limit-per-minute", "inf"], "--rate-limit-per-minute must be a positive number"),
        (["--session-idle-timeout", "-1"], "--session-idle-timeout must be seconds >= 0"),
        (["--session-idle-timeout", "nan"], "--session-idle-timeout must be seconds >= 0"),
    ],
)
def test_rate_limit_and_idle_flags_out_of_range_are_usage_errors(args, said, capsys) -> None:
    from simulator.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(["serve", *args])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err
