"""Render docs/diagrams/*.mmd to docs/assets/diagrams/*.svg, once, when a diagram changes.

The site ships the SVGs, so building or reading it needs no script and no network
(a page that loads mermaid from a CDN shows its raw source offline). Each SVG records
the SHA-256 of its source; tests/test_docs.py fails when a source changed without a
re-render.

Needs a Chromium and mermaid's standalone bundle, neither of them a dependency of the
project:

    apt-get install chromium
    (cd /tmp && npm pack mermaid@11 && tar -xzf mermaid-*.tgz package/dist/mermaid.min.js)
    python docs/diagrams/render.py /tmp/package/dist/mermaid.min.js

Chromium runs headless with every host name resolving to nothing and a dead loopback
proxy, so the page can load only the local files it is given.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "assets" / "diagrams"
CONFIG = {
    "startOnLoad": False,
    "theme": "neutral",
    "fontFamily": "sans-serif",
    # Plain SVG text, not HTML in a foreignObject: it renders the same in an <img>.
    "htmlLabels": False,
    "flowchart": {"htmlLabels": False},
}


def source_digest(source: str) -> str:
    """What an SVG records of the source it was rendered from."""
    return hashlib.sha256(source.encode()).hexdigest()


def render(source: str, mermaid_js: Path) -> str:
    page = f"""<!doctype html><meta charset="utf-8">
<script src="{mermaid_js.as_uri()}"></script><pre id="src">{html.escape(source)}</pre>
<div id="out"></div><script>
mermaid.initialize({json.dumps(CONFIG)});
mermaid.render("diagram", document.getElementById("src").textContent)
  .then(r => {{ document.getElementById("out").textContent = r.svg; }})
  .catch(e => {{ document.getElementById("out").textContent = "ERROR " + e; }});
</script>"""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "render.html"
        path.write_text(page)
        dom = subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--proxy-server=127.0.0.1:9",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--allow-file-access-from-files",
                "--virtual-time-budget=5000",
                "--dump-dom",
                path.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    found = re.search(r'<div id="out">(.*?)</div>', dom, re.S)
    svg = html.unescape(found.group(1)) if found else "ERROR no output"
    if not svg.startswith("<svg"):
        raise SystemExit(f"render: mermaid failed: {svg[:300]}")
    return svg


def main() -> None:
    mermaid_js = Path(sys.argv[1]).resolve()
    OUT.mkdir(parents=True, exist_ok=True)
    for mmd in sorted(HERE.glob("*.mmd")):
        source = mmd.read_text()
        svg = render(source, mermaid_js)
        stamp = f"<!-- rendered from docs/diagrams/{mmd.name}, sha256 {source_digest(source)} -->"
        (OUT / f"{mmd.stem}.svg").write_text(stamp + "\n" + svg + "\n")
        print(f"render: {mmd.name} -> {OUT / mmd.stem}.svg")


if __name__ == "__main__":
    main()
