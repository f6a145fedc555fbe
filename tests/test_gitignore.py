"""`.gitignore` ignores only what the project never tracks, each pattern once."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True, timeout=30
    ).stdout


def test_no_tracked_file_is_ignored() -> None:
    assert _git("ls-files", "--cached", "--ignored", "--exclude-standard") == ""


def test_each_ignore_pattern_is_listed_once() -> None:
    _git("rev-parse", "--git-dir")
    patterns = [
        line.strip()
        for line in (ROOT / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(patterns) == len(set(patterns)), sorted(p for p in patterns if patterns.count(p) > 1)
