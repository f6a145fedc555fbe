"""The one documented notebook install holds everything every notebook imports.

docs/guides/notebooks.md documents one command, `pip install -e '.[notebooks]'` then
`jupyter lab notebooks/`; CI runs the notebooks from exactly that install. These tests
catch a notebook that starts importing a package the extra does not bring (04 once needed
OpenTelemetry that `[notebooks]` lacked).
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
GUIDE = (ROOT / "docs" / "guides" / "notebooks.md").read_text()
IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", re.M)


def _closure(extra: str) -> set[str]:
    """Distributions `pip install coreagent-sdk[extra]` installs (names canonical)."""
    seen: set[str] = set()
    todo = [(canonicalize_name("coreagent-sdk"), frozenset({extra}))]
    while todo:
        name, extras = todo.pop()
        key = name + "[" + ",".join(sorted(extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        seen.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue  # not installed here; its own requirements cannot be read
        for line in requires:
            req = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return {k for k in seen if "[" not in k}


def _imports(notebook: Path) -> set[str]:
    cells = json.loads(notebook.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return set(IMPORT.findall(code))


def test_the_notebooks_extra_installs_every_package_a_notebook_imports() -> None:
    installed = _closure("notebooks")
    providers = metadata.packages_distributions()
    missing = []
    for notebook in NOTEBOOKS:
        for module in sorted(_imports(notebook)):
            dists = {canonicalize_name(d) for d in providers.get(module, [])}
            if dists and not dists & installed:  # stdlib modules have no distribution
                missing.append(f"{notebook.name}: {module} ({', '.join(sorted(dists))})")
    assert NOTEBOOKS, "no notebooks found"
    assert missing == [], "add these to the notebooks extra in pyproject.toml"


def test_the_notebooks_extra_brings_a_kernel_and_the_front_end_the_guide_opens() -> None:
    installed = _closure("notebooks")
    assert {"ipykernel", "jupyterlab", "opentelemetry-sdk"} <= installed


def test_the_notebook_guide_documents_one_command_that_installs_and_opens_them() -> None:
    section = GUIDE.split("<!-- notebooks:start -->", 1)[1].split("<!-- notebooks:end -->", 1)[0]
    commands = [line for line in section.splitlines() if line.startswith("python3")]
    assert commands == [
        "python3 -m venv .venv && .venv/bin/pip install -e '.[notebooks]'"
        " && .venv/bin/jupyter lab notebooks/"
    ]
