"""Build hooks for the documentation site.

- The notebooks live in ../notebooks (where users open them), not in docs/.
- The site loads nothing from a CDN. Notebook pages show each widget's static HTML (the
  SDK's views carry their table as `text/html` beside the live widget) instead of a widget
  manager fetched from unpkg, and carry no mermaid, MathJax or widget loader scripts.
- A notebook page keeps its nav title, and its table of contents is read from the headings
  the page really has, so the TOC and the skip link point at anchors that exist (and a
  heading that is only a code span is not a blank entry).
- The build fails on an image that is not in the built site (missing, or excluded by
  `exclude_docs`, which mkdocs only reports at INFO even under --strict) and on a tag
  that is not HTML (a docstring's `<agent name>` becomes a tag that swallows its text).
"""

from __future__ import annotations

import html
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.structure.toc import get_toc

ROOT = Path(__file__).resolve().parent.parent

# What a static page can show, best first. No widget views (they need a widget manager,
# which nbconvert loads from a CDN) and no JavaScript outputs.
STATIC_PRIORITY = [
    "text/html",
    "image/svg+xml",
    "image/png",
    "image/jpeg",
    "text/markdown",
    "text/latex",
    "text/plain",
]

# Scripts nbconvert's templates write whatever the notebook holds: the mermaid and MathJax
# loaders (from cdnjs) and the widget manager loader (from unpkg).
_LOADER = re.compile(
    r"<script\b(?:(?!</script>).)*?"
    r"(?:mermaid|mathjax|widgetRendererSrc|jupyter-widgets)"
    r"(?:(?!</script>).)*</script>\s*",
    re.S | re.I,
)
_EMPTY_SRC = re.compile(r'<script src="">\s*</script>\s*')
_HEADING = re.compile(r'<h([1-6])\b[^>]*\bid="([^"]+)"[^>]*>(.*?)</h\1>', re.S)
_ANCHOR = re.compile(r'<a class="anchor-link"[^>]*>.*?</a>', re.S)
_TAG = re.compile(r"<[^>]+>")

_original_app: Any = None


def _static_nbconvert_app(*args: Any, **kwargs: Any) -> Any:
    app = _original_app(*args, **kwargs)
    # Widget state in a page only feeds a widget manager the page does not load.
    execute = {**app.config.get("ExecutePreprocessor", {}), "store_widget_state": False}
    app.config.update(
        {
            "NbConvertBase": {"display_data_priority": STATIC_PRIORITY},
            "ExecutePreprocessor": execute,
        }
    )
    return app


def static_notebooks() -> None:
    """Make mkdocs-jupyter's notebook pages static (`STATIC_PRIORITY`); once is enough."""
    global _original_app
    # Imported here, not with the module: it imports nbformat and jsonschema, seconds of CPU
    # that a build without notebooks (the tests' one-page sites) need not pay.
    import mkdocs_jupyter.nbconvert2 as nbconvert2

    if nbconvert2.get_nbconvert_app is not _static_nbconvert_app:
        _original_app = nbconvert2.get_nbconvert_app
        nbconvert2.get_nbconvert_app = _static_nbconvert_app


def on_config(config: Any) -> Any:
    if "mkdocs-jupyter" in config["plugins"]:
        static_notebooks()
    return config


def strip_loaders(page: str) -> str:
    """A converted notebook without the scripts that would fetch code from a CDN."""
    return _EMPTY_SRC.sub("", _LOADER.sub("", page))


def headings(page: str) -> list[dict[str, Any]]:
    """The page's headings as TOC tokens (nested by level), ids as the page has them."""
    tokens: list[dict[str, Any]] = []
    stack: list[dict[str, Any]] = []
    for level, anchor, inner in _HEADING.findall(page):
        text = html.unescape(_TAG.sub("", _ANCHOR.sub("", inner))).replace("¶", "").strip()
        token = {"level": int(level), "id": anchor, "name": html.escape(text), "children": []}
        while stack and stack[-1]["level"] >= token["level"]:
            stack.pop()
        (stack[-1]["children"] if stack else tokens).append(token)
        stack.append(token)
    return tokens


def _is_notebook(page: Any) -> bool:
    return bool(page.file.src_uri.endswith(".ipynb"))


# Before mkdocs-jupyter's own on_files, which turns .ipynb files into pages.
@event_priority(100)
def on_files(files: Files, config: Any) -> Files:
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        files.append(
            File(
                f"notebooks/{notebook.name}",
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files


# Before mkdocs-jupyter replaces the title with the notebook's first heading as plain text
# (which drops its code spans: "Delegation with").
@event_priority(100)
def on_pre_page(page: Any, config: Any, files: Files) -> Any:
    if _is_notebook(page):
        page.nav_title = page.title
    return page


# The elements a built page may hold: HTML's, the SVG icons the theme inlines, and the
# theme's own custom element. Anything else came from text read as markup.
HTML_TAGS = frozenset(
    re.split(
        r"\s+",
        """a abbr address area article aside audio b base bdi bdo blockquote body br button canvas
    caption cite code col colgroup data datalist dd del details dfn dialog div dl dt em embed
    fieldset figcaption figure footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html i
    iframe img input ins kbd label legend li link main map mark menu meta meter nav noscript
    object ol optgroup option output p param picture pre progress q rp rt ruby s samp script
    search section select slot small source span strong style sub summary sup table tbody td
    template textarea tfoot th thead time title tr track u ul var video wbr
    svg path g circle rect line polyline polygon ellipse text tspan defs use symbol marker
    clippath lineargradient radialgradient stop mask pattern image foreignobject
    clipboard-copy""",
    )
)
_START_TAG = re.compile(r"<([A-Za-z][A-Za-z0-9-]*)[\s/>]")
_IMG_SRC = re.compile(r"<img\b[^>]*?\bsrc=\"([^\"]+)\"", re.I)


def page_problems(markup: str, url: str, built: Any) -> list[str]:
    """What is wrong with one built page: images not in the site, tags that are not HTML.

    `url` is the page's URL path under the site (``guides/host/``); `built(path)` says
    whether the site holds a file at that path. Scripts and code blocks are left out: what
    they hold is text, whatever it looks like.
    """
    problems = []
    text = re.sub(r"<(script|pre|code|style)\b.*?</\1>", "", markup, flags=re.S | re.I)
    for tag in sorted({t.lower() for t in _START_TAG.findall(text)} - HTML_TAGS):
        problems.append(f"<{tag}> is not HTML: escape it (a docstring's <...> in backticks)")
    for src in _IMG_SRC.findall(markup):
        if src.startswith(("data:", "http:", "https:", "//")):
            continue
        target = posixpath.normpath(posixpath.join(url, html.unescape(src).split("#")[0]))
        if target.startswith("..") or not built(target):
            problems.append(
                f"image {src!r} is not in the built site (missing, or excluded by exclude_docs)"
            )
    return problems


def on_post_page(output: str, page: Any, config: Any) -> str:
    # Static files (images among them, excluded ones left out) are written before any page.
    site = Path(config["site_dir"])
    problems = page_problems(_article(output), page.url, lambda path: (site / path).is_file())
    if problems:
        raise PluginError(f"{page.file.src_uri}: " + "; ".join(problems))
    return output


_ARTICLE = re.compile(r"<article\b.*?</article>", re.S)


def _article(page: str) -> str:
    # The page's own content; the theme's frame around it is the theme's.
    found = _ARTICLE.search(page)
    return found.group(0) if found else page


def on_page_content(content: str, page: Any, config: Any, files: Files) -> str:
    if not _is_notebook(page):
        return content
    content = strip_loaders(content)
    # mkdocs-jupyter copies the notebook beside its page (include_source); link to it.
    name = Path(page.file.src_uri).name
    guide = files.get_file_from_path("guides/notebooks.md")
    content = (
        f'<p class="nb-download"><a href="{name}" download>Download {name}</a>'
        " (open it with the command in"
        f' <a href="{guide.url_relative_to(page.file)}#open-them">'
        "Notebooks, widgets and plots</a>)</p>\n" + content
    )
    if getattr(page, "nav_title", None):
        page.title = page.nav_title
    page.toc = get_toc(headings(content))
    return content
