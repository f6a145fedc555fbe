"""Reading the SDK's HTML reprs back: elements, text and the rows of tables."""

from __future__ import annotations

from html.parser import HTMLParser


class Page(HTMLParser):
    """Every start tag, the whole text, each table row's cell texts, and each `<summary>`.

    ``summaries`` holds ``(depth, text)`` per `<summary>`, depth counting the
    `<details>` it belongs to and every one around it (1 at the top), and
    ``opened`` how many `<details>` are open by default.
    """

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[dict[str, str | None]] = []
        self.text_parts: list[str] = []
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None
        self._depth = 0
        self.summaries: list[tuple[int, str]] = []
        self.opened = 0
        self._details = 0
        self._summary: list[str] | None = None
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.append(dict(attrs))
        self._depth += 1
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "details":
            self._details += 1
            self.opened += "open" in dict(attrs)
        elif tag == "summary":
            self._summary = []

    def handle_endtag(self, tag: str) -> None:
        self._depth -= 1
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "details":
            self._details -= 1
        elif tag == "summary" and self._summary is not None:
            self.summaries.append((self._details, " ".join("".join(self._summary).split())))
            self._summary = None

    def handle_data(self, data: str) -> None:
        self.text_parts.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._summary is not None:
            self._summary.append(data)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def balanced(self) -> bool:
        return self._depth == 0
