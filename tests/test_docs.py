"""The documentation site builds strictly, and its API reference covers every public name.

The reference pages are generated from each package's `__all__`, so a name
someone adds shows up by itself; this test fails when it does not (a page
missing, a name filtered out, a class or function without a docstring).
The site is built with notebook execution off (DOCS_EXECUTE=false) to stay
fast; CI builds it once more with the notebooks executed.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import coreagent_sdk
import coreagent_sdk.errors
import coreagent_sdk.host
import coreagent_sdk.plots
import coreagent_sdk.widgets
import simulator
import simulator.behaviors

from .html_parse import Page

# The `docs` extra installs the toolchain on Python 3.11+ only (see pyproject.toml); CI builds
# the site there. Elsewhere these tests skip rather than fail on a missing tool.
pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings")

ROOT = Path(__file__).resolve().parent.parent

# (module, the reference page that documents it)
REFERENCE = [
    (coreagent_sdk, "reference/coreagent_sdk"),
    (coreagent_sdk.errors, "reference/errors"),
    (coreagent_sdk.host, "reference/host"),
    (coreagent_sdk.widgets, "reference/widgets"),
    (coreagent_sdk.plots, "reference/widgets"),
    (simulator, "reference/simulator"),
    (simulator.behaviors, "reference/simulator"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "DOCS_EXECUTE": "false", "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _plain(text: str) -> str:
    """Text as it reads once rendered: no markdown marks, single spaces."""
    return " ".join(re.sub(r"[`*]", "", text).split())


def _names(module: ModuleType) -> list[str]:
    # Dunders (__version__) are metadata, not API, and the reference filters them.
    return [n for n in module.__all__ if not n.startswith("__")]


@pytest.mark.parametrize(("module", "page"), REFERENCE, ids=[m.__name__ for m, _ in REFERENCE])
def test_every_public_name_is_in_the_reference_with_its_docstring(
    site: Path, module: ModuleType, page: str
) -> None:
    parsed = Page((site / page / "index.html").read_text())
    anchors = {a.get("id") for a in parsed.attrs}
    text = _plain(parsed.text)
    missing, undocumented, unshown = [], [], []
    for name in _names(module):
        if f"{module.__name__}.{name}" not in anchors:
            missing.append(name)
            continue
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismodule(value):
            own = value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__
            if not own:
                undocumented.append(name)
                continue
            first = _plain(inspect.cleandoc(own).split("\n\n")[0])[:40]
            if first not in text:
                unshown.append(f"{name}: {first!r}")
    assert missing == [], f"not in {page} (add it to the page or to __all__)"
    assert undocumented == [], "public classes and functions need a docstring"
    assert unshown == [], f"docstrings not rendered in {page}"


def test_the_notebooks_and_guides_are_part_of_the_site(site: Path) -> None:
    for stem in ("01_delegation", "02_truncation", "03_eviction"):
        assert (site / "notebooks" / stem / "index.html").is_file()
    for guide in (
        "delegation",
        "truncation",
        "eviction",
        "simulator",
        "testing",
        "joining",
        "protocol",
    ):
        assert (site / "guides" / guide / "index.html").is_file()
    changelog = Page((site / "changelog" / "index.html").read_text()).text
    assert "Unreleased" in changelog


def test_the_readme_points_at_the_projects_own_docs_not_a_folder_outside_it() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "../shared" not in readme
    assert "docs/guides/protocol.md" in readme
