"""The documentation site builds strictly, and its API reference covers every public name.

The reference pages are generated from each package's `__all__`, so a name
someone adds shows up by itself; this test fails when it does not (a page
missing, a name filtered out, a class or function without a docstring).
The site is built with notebook execution off (DOCS_EXECUTE=false) to stay
fast; CI builds it once more with the notebooks executed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
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
import coreagent_sdk.mcp
import coreagent_sdk.models
import coreagent_sdk.plots
import coreagent_sdk.widgets
import simulator
import simulator.behaviors
import simulator.experiments

from .html_parse import Page

# The `docs` extra installs the toolchain on Python 3.11+ only (see pyproject.toml); CI builds
# the site there. Elsewhere these tests skip rather than fail on a missing tool.
pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings")

# One xdist worker builds the site once for all of them, not each worker its own.
pytestmark = pytest.mark.xdist_group("docs-site")

ROOT = Path(__file__).resolve().parent.parent

MODULES = [
    coreagent_sdk,
    coreagent_sdk.errors,
    coreagent_sdk.host,
    coreagent_sdk.mcp,
    coreagent_sdk.models,
    coreagent_sdk.widgets,
    coreagent_sdk.plots,
    simulator,
    simulator.behaviors,
    simulator.experiments,
]
# The hosts pages once loaded scripts, styles and fonts from.
CDN_HOSTS = (
    "unpkg.com",
    "cdnjs.cloudflare.com",
    "cdn.jsdelivr.net",
    "googleapis.com",
    "gstatic.com",
)


def readme_docs_command() -> list[str]:
    """The README's command that builds the site, as its words (``.venv/bin/mkdocs ...``)."""
    lines = [
        line.split("#", 1)[0].split()
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith(".venv/bin/mkdocs build")
    ]
    assert len(lines) == 1, "README.md should give one '.venv/bin/mkdocs build' command"
    return lines[0]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "DOCS_EXECUTE": "false", "NO_MKDOCS_2_WARNING": "1"}
    # The README's own command, run by this interpreter's venv: `python -m mkdocs build
    # --strict -q` passed while it failed (-q drops the warnings that --strict counts).
    program, *args = readme_docs_command()
    mkdocs = Path(sys.executable).parent / Path(program).name
    done = subprocess.run(
        [str(mkdocs), *args, "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a bound on a hung build: a loaded 2-core machine takes 2 minutes and more
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


def _reference(site: Path) -> dict[str, str]:
    """Every reference page's HTML, by its path under the site."""
    return {
        str(page.relative_to(site)): page.read_text()
        for page in sorted((site / "reference").rglob("index.html"))
    }


_HEADING = re.compile(r'<h[1-6] id="([^"]+)" class="doc doc-heading">(.*?)</h[1-6]>', re.S)
_SIGNATURE = re.compile(r'\s*<div class="doc-signature highlight">(.*?)</div>', re.S)


def _signatures(markup: str) -> dict[str, tuple[str, str]]:
    """Each documented object's anchor -> (its symbol kind, its signature's text or "")."""
    found = {}
    for match in _HEADING.finditer(markup):
        kind = re.search(r"doc-symbol-(?!heading)(\w+)", match.group(2))
        signature = _SIGNATURE.match(markup, match.end())
        text = Page(signature.group(1)).text if signature else ""
        found[match.group(1)] = (kind.group(1) if kind else "", text)
    return found


@pytest.mark.slow  # the site fixture builds the whole site (mkdocs)
@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_every_public_name_is_in_the_reference_with_its_docstring(
    site: Path, module: ModuleType
) -> None:
    pages = _reference(site)
    anchors = {a.get("id") for markup in pages.values() for a in Page(markup).attrs}
    text = _plain(" ".join(Page(markup).text for markup in pages.values()))
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
    assert missing == [], (
        "not on any docs/reference page (add a ::: line to the page of its concept)"
    )
    assert undocumented == [], "public classes and functions need a docstring"
    assert unshown == [], "docstrings not rendered in the reference"


@pytest.mark.slow  # the site fixture builds the whole site (mkdocs)
@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_every_public_class_shows_its_constructors_signature_with_its_parameters(
    site: Path, module: ModuleType
) -> None:
    signatures: dict[str, tuple[str, str]] = {}
    for markup in _reference(site).values():
        signatures.update(_signatures(markup))
    wrong = []
    for name in _names(module):
        value = getattr(module, name)
        if (
            not inspect.isclass(value)
            or issubclass(value, BaseException)  # its constructor is its message
            or getattr(value, "_is_protocol", False)  # implemented, never constructed
        ):
            continue
        _, shown = signatures.get(f"{module.__name__}.{name}", ("", ""))
        try:
            parameters = [
                p.name
                for p in inspect.signature(value).parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
        except (TypeError, ValueError):  # a Protocol or a builtin: no signature to show
            continue
        if not shown.startswith(f"{name}(") or any(p not in shown for p in parameters):
            wrong.append(f"{name}: shows {shown[:60]!r}, expected the parameters {parameters}")
    assert wrong == []


@pytest.mark.slow  # the site fixture builds the whole site (mkdocs)
def test_no_class_attribute_in_the_reference_shows_a_value(site: Path) -> None:
    # A member's value is implementation (`allowed_hosts = (allowed_hosts if ...)`); a
    # module constant's value is its meaning (`DEFAULT_TIMEOUT = 120.0`), and shows.
    modules = {m.__name__ for m in MODULES}
    shown, constants = [], []
    for page, markup in _reference(site).items():
        for anchor, (kind, signature) in _signatures(markup).items():
            owner = anchor.rsplit(".", 1)[0]
            if kind == "attribute" and owner not in modules and " = " in signature:
                shown.append(f"{page}: {signature.strip()[:80]}")
            if kind == "attribute" and owner in modules and " = " in signature:
                constants.append(anchor)
    assert shown == []
    assert "coreagent_sdk.DEFAULT_TIMEOUT" in constants


@pytest.mark.slow  # the site fixture builds the whole site (mkdocs)
def test_no_built_page_loads_anything_from_another_host(site: Path) -> None:
    loads = re.compile(
        r"""(?:\bsrc=|<link\b[^>]*\bhref=|import\(|@import\s+url\()\s*["']?(https?:)?//""", re.I
    )
    offenders = []
    for page in sorted(site.rglob("*.html")):
        markup = page.read_text()
        relative = str(page.relative_to(site))
        offenders += [f"{relative}: {host}" for host in CDN_HOSTS if host in markup]
        offenders += [f"{relative}: {m.group(0)}" for m in loads.finditer(markup)]
    assert offenders == []


@pytest.mark.slow  # the site fixture builds the whole site (mkdocs)
def test_every_in_page_link_points_at_an_anchor_the_page_has(site: Path) -> None:
    # The skip link and the table of contents once pointed at ids a notebook page lacked.
    broken = []
    for page in sorted(site.rglob("*.html")):
        parsed = Page(page.read_text())
        ids = {a.get("id") for a in parsed.attrs} | {a.get("name") for a in parsed.attrs}
        for attrs in parsed.attrs:
            href = attrs.get("href") or ""
            if href.startswith("#") and len(href) > 1 and href[1:] not in ids:
                broken.append(f"{page.relative_to(site)}: {href}")
    assert broken == []


@pytest.mark.slow  # the site fixture builds the whole site (mkdocs)
def test_each_notebook_page_links_its_notebook_for_download(site: Path) -> None:
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks
    for notebook in notebooks:
        folder = site / "notebooks" / notebook.stem
        parsed = Page((folder / "index.html").read_text())
        assert any(a.get("href") == notebook.name for a in parsed.attrs), notebook.name
        assert (folder / notebook.name).read_text() == notebook.read_text()


@pytest.mark.slow  # the site fixture builds the whole site (mkdocs)
def test_every_table_of_contents_entry_has_a_title(site: Path) -> None:
    # Notebook 03 has a heading that is only a code span (`invalidate`): it was a blank entry.
    entry = re.compile(
        r'<a href="#[^"]*" class="md-nav__link">\s*<span class="md-ellipsis">(.*?)</span>', re.S
    )
    blank = []
    for page in sorted(site.rglob("index.html")):
        titles = [Page(m).text.strip() for m in entry.findall(page.read_text())]
        blank += [str(page.relative_to(site)) for title in titles if not title]
    assert blank == []
    eviction = (site / "notebooks" / "03_eviction" / "index.html").read_text()
    assert [Page(m).text.strip() for m in entry.findall(eviction)].count("invalidate") >= 1


@pytest.mark.slow  # the site fixture builds the whole site (mkdocs)
def test_a_notebook_page_keeps_its_nav_title(site: Path) -> None:
    # mkdocs-jupyter titled it from the first heading as plain text: "Delegation with".
    page = (site / "notebooks" / "01_delegation" / "index.html").read_text()
    assert "<title>Delegation - " in page
    assert not re.search(r'class="md-ellipsis">\s*Delegation with\s*</span>', page)


def test_every_diagram_is_a_shipped_svg_rendered_from_its_current_source() -> None:
    docs = ROOT / "docs"
    sources = sorted((docs / "diagrams").glob("*.mmd"))
    assert sources
    pages = "".join(p.read_text() for p in (docs / "guides").glob("*.md"))
    for source in sources:
        svg = (docs / "assets" / "diagrams" / f"{source.stem}.svg").read_text()
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        assert f"sha256 {digest}" in svg, f"re-render it: python docs/diagrams/render.py ({source})"
        assert f"assets/diagrams/{source.stem}.svg" in pages, f"{source.name} is on no page"
    # A mermaid block would need mermaid's script, from a CDN.
    assert "```mermaid" not in pages


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a Jupyter kernel executes the notebook
def test_a_converted_notebook_shows_a_views_html_and_loads_no_widget_manager(
    tmp_path: Path,
) -> None:
    # The docs execute the notebooks at build time; a view's output holds the live widget
    # and the SDK's HTML of it. The page shows the HTML and fetches nothing.
    pytest.importorskip("ipywidgets")
    import nbformat
    from mkdocs_jupyter import convert

    hooks = _hooks()
    hooks.static_notebooks()  # as a build with the mkdocs-jupyter plugin does
    notebook = tmp_path / "views.ipynb"
    source = "from coreagent_sdk.widgets import CallLogView\nview = CallLogView()\nview"
    made = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    made.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Py"}
    nbformat.write(made, notebook)
    page = hooks.strip_loaders(
        convert.nb2html(str(notebook), execute=True, kernel_name="python3", allow_errors=False)
    )
    assert "CallLog: 0 (no calls yet)" in Page(page).text
    assert "widget-view+json" not in page and "widget-state+json" not in page
    assert [host for host in CDN_HOSTS if host in page] == []
    assert "import(" not in page  # the mermaid loader's dynamic import


def _undocumented_members() -> set[str]:
    """Public names, and their classes' public members, with no text in the reference."""
    import griffe

    extensions = griffe.load_extensions(
        str(ROOT / "docs" / "griffe_runtime_all.py") + ":RuntimeAll",
        str(ROOT / "docs" / "griffe_attribute_docs.py") + ":AttributeDocs",
    )
    loader = griffe.GriffeLoader(extensions=extensions, search_paths=[str(ROOT)])
    undocumented = set()
    packages: dict[str, griffe.Module] = {}  # each loaded once: a load parses all its modules
    for module in MODULES:
        top, _, rest = module.__name__.partition(".")
        loaded = packages.get(top) or packages.setdefault(top, loader.load(top))
        static = loaded[rest] if rest else loaded
        for name in _names(module):
            target = static[name]
            target = target.final_target if target.is_alias else target
            if not target.docstring:
                undocumented.add(f"{module.__name__}.{name}")
            if target.is_class:
                for member_name, member in target.members.items():
                    public = not member_name.startswith("_") and not member.is_alias
                    if public and not member.docstring:
                        undocumented.add(f"{module.__name__}.{name}.{member_name}")
    return undocumented


def test_every_public_member_has_a_description() -> None:
    # Members documented in a class's `Attributes:` section count (the reference shows
    # that text under each one).
    undocumented = _undocumented_members()
    assert sorted(undocumented) == [], "document these (a docstring, or Attributes:)"


@pytest.mark.slow  # a Jupyter kernel executes the notebook
def test_the_documented_nbconvert_options_show_a_views_html_instead_of_an_empty_box(
    tmp_path: Path,
) -> None:
    pytest.importorskip("ipywidgets")
    import nbclient
    import nbformat
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    guide = (ROOT / "docs" / "guides" / "notebooks.md").read_text()
    command = guide.split("<!-- nbconvert:start -->")[1].split("<!-- nbconvert:end -->")[0]
    priority = re.findall(r"--NbConvertBase\.display_data_priority=(\S+)", command)
    assert priority and priority[0] == "text/html"
    source = "from coreagent_sdk.widgets import CallLogView\nview = CallLogView()\nview"
    made = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    made.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Py"}
    nbclient.NotebookClient(made, timeout=60, kernel_name="python3").execute()
    assert "application/vnd.jupyter.widget-view+json" in made.cells[0].outputs[0]["data"]
    config = Config({"NbConvertBase": {"display_data_priority": priority}})
    page, _ = HTMLExporter(config=config).from_notebook_node(made)
    view = '<script type="application/vnd.jupyter.widget-view+json">'
    assert "CallLog: 0 (no calls yet)" in Page(page).text and view not in page
    # nbconvert's default renders the widget view: an empty box without its CDN script.
    default, _ = HTMLExporter().from_notebook_node(made)
    assert view in default


@pytest.mark.slow  # the site fixture builds the whole site (mkdocs)
def test_the_notebooks_and_guides_are_part_of_the_site(site: Path) -> None:
    for stem in (
        "01_delegation",
        "02_truncation",
        "03_eviction",
        "05_your_agent",
        "06_model_fleet",
    ):
        assert (site / "notebooks" / stem / "index.html").is_file()
    for guide in (
        "delegation",
        "truncation",
        "eviction",
        "simulator",
        "testing",
        "joining",
        "host",
        "model-agents",
        "protocol",
    ):
        assert (site / "guides" / guide / "index.html").is_file()
    changelog = Page((site / "changelog" / "index.html").read_text()).text
    assert "Unreleased" in changelog


def test_the_readme_points_at_the_projects_own_docs_not_a_folder_outside_it() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "../shared" not in readme
    assert "docs/guides/protocol.md" in readme


def _tiny_site(tmp_path: Path, page: str) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of one page, with the site's own hooks and exclusions."""
    docs = tmp_path / "docs"
    (docs / "assets" / "diagrams").mkdir(parents=True)
    (docs / "diagrams").mkdir()
    (docs / "assets" / "diagrams" / "shown.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg"/>'
    )
    (docs / "diagrams" / "source.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    (docs / "guides").mkdir()
    (docs / "guides" / "page.md").write_text(page)
    (docs / "index.md").write_text("# Home\n")
    ours = (ROOT / "mkdocs.yml").read_text()
    excluded = re.search(r"^exclude_docs: \|\n(?:  .*\n)+", ours, re.M)
    assert excluded is not None
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: tiny\n"
        + excluded.group(0)
        + f"hooks:\n  - {ROOT / 'docs' / 'hooks.py'}\n"
        + "nav:\n  - Home: index.md\n  - Page: guides/page.md\n"
    )
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_build_passes_with_a_shipped_diagram_and_escaped_angle_brackets(
    tmp_path: Path,
) -> None:
    done = _tiny_site(
        tmp_path, "# Page\n\n![a diagram](../assets/diagrams/shown.svg)\n\n`<agent name>`\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("planted", "complaint"),
    [
        ("![gone](../assets/diagrams/missing.svg)", "diagrams/missing.svg' is not in the built"),
        ("![excluded](../diagrams/source.svg)", "diagrams/source.svg' is not in the built"),
        ('The system prompt (empty: "You are <agent name>.").', "<agent> is not HTML"),
    ],
    ids=["missing image", "excluded image", "raw tag"],
)
def test_the_build_fails_on_a_missing_or_excluded_image_and_on_a_tag_that_is_not_html(
    tmp_path: Path, planted: str, complaint: str
) -> None:
    done = _tiny_site(tmp_path, f"# Page\n\n{planted}\n")
    assert done.returncode != 0
    assert complaint in done.stderr, done.stderr[-2000:]


@pytest.mark.slow  # the site fixture builds the whole site (mkdocs)
def test_the_site_ships_the_diagram_the_delegation_trees_guide_shows(site: Path) -> None:
    # `exclude_docs: diagrams/` once excluded docs/assets/diagrams/ too: a broken image.
    assert (site / "assets" / "diagrams" / "delegation-tree.svg").is_file()


# The guides, and the two pages a newcomer starts from.
GUIDES = [
    ROOT / "docs" / "index.md",
    ROOT / "docs" / "quickstart.md",
    *sorted((ROOT / "docs" / "guides").glob("*.md")),
]
# A block, the mark saying why it is not run (if any), and other tests' markers between them.
_BLOCK = re.compile(
    r"^(?: *<!-- not run: (?P<why>.*?) -->\n)?(?: *<!-- [\w-]+ -->\n)*(?P<indent> *)```python\n",
    re.M,
)
_NOT_RUN = re.compile(r"<!-- not run:(.*?)-->")


def _python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """Each Python block of a page: its number, its source, why it is not run (or None)."""
    blocks = []
    for number, match in enumerate(_BLOCK.finditer(text), start=1):
        indent = match.group("indent")
        body = text[match.end() :].split(f"{indent}```", 1)[0]
        source = "\n".join(line.removeprefix(indent) for line in body.splitlines())
        blocks.append((number, source, match.group("why")))
    return blocks


def test_every_not_run_mark_sits_on_a_python_block_and_says_why() -> None:
    for guide in GUIDES:
        text = guide.read_text()
        marks = [why.strip() for why in _NOT_RUN.findall(text)]
        marked = [why for _, _, why in _python_blocks(text) if why is not None]
        assert len(marks) == len(marked), f"{guide.name}: a mark on no Python block"
        assert all(len(why) > 10 for why in marked), f"{guide.name}: say why it is not run"


@pytest.mark.slow
@pytest.mark.parametrize(
    "guide",
    [g for g in GUIDES if any(why is None for *_, why in _python_blocks(g.read_text()))],
    ids=lambda g: g.stem,
)
def test_every_python_block_of_a_guide_runs_in_order_as_a_notebooks_cells(
    guide: Path, tmp_path: Path
) -> None:
    # Those that cannot run offline (a real hub, a vendor's key, a module of the reader's
    # own) carry <!-- not run: why --> on the line above, visible in the page's source.
    blocks = [(n, source) for n, source, why in _python_blocks(guide.read_text()) if why is None]
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "guide_blocks.py")],
        input=json.dumps(blocks),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(" OK\n") == len(blocks)


def test_the_home_page_and_the_quickstart_show_calling_simulating_and_serving() -> None:
    for page in ("index.md", "quickstart.md"):
        blocks = "\n".join(b for _, b, _ in _python_blocks((ROOT / "docs" / page).read_text()))
        assert "HubDirectory(" in blocks, page  # call a real fleet
        assert "Fleet()" in blocks, page  # simulate one
        assert "AgentHost(" in blocks, page  # serve an agent


def test_the_quickstart_lists_every_extra_a_user_installs() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    quickstart = (ROOT / "docs" / "quickstart.md").read_text().split("## Installs", 1)[1]
    rows = set(re.findall(r"^\| `([\w-]+)` \|", quickstart, re.M))
    assert {"host", "openai", "anthropic"} <= rows
    assert rows == set(extras), "give each extra of pyproject.toml a row in the quickstart"


def test_the_readmes_installs_say_which_command_works_from_a_checkout() -> None:
    readme = (ROOT / "README.md").read_text().split("## Installs", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in readme.splitlines() if r.startswith("| `pip")]
    assert rows and all(r.startswith("| `pip install -e ") for r in rows)


def test_the_benchmarks_page_opens_with_a_summary_and_holds_no_notes_to_ourselves() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    first = page.split("\n## ", 2)[1]
    assert first.startswith("Summary\n") and "| what | against | ratio |" in first
    assert not re.search(r"\bissue \d|Add a section|engineers|TODO", page)
