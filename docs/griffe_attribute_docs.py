"""A griffe extension: an `Attributes:` section of a class docstring documents its members.

Frozen attrs classes read best with their fields described together in the class
docstring. The reference lists each attribute under its own heading, though, so each
gets its line from that section (unless it has a docstring of its own), and the section
leaves the class text so it is not shown twice. tests/test_docs.py loads the package with
this extension to check that every public member has a description.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

# "Attributes:" at the start of a line, then its indented lines (blank lines inside too).
_SECTION = re.compile(r"^Attributes:\n((?:[ \t]+\S.*\n?|[ \t]*\n(?=[ \t]+\S))*)", re.M)
_ITEM = re.compile(r"^(\s+)(\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def _items(body: str) -> dict[str, str]:
    items: dict[str, list[str]] = {}
    indent: str | None = None
    current: str | None = None
    for line in body.splitlines():
        match = _ITEM.match(line)
        if match and (indent is None or match.group(1) == indent):
            indent, current = match.group(1), match.group(2)
            items[current] = [match.group(3)]
        elif current is not None:
            items[current].append(line.strip())
    return {name: " ".join(part for part in text if part) for name, text in items.items()}


class AttributeDocs(griffe.Extension):
    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        if cls.docstring is None:
            return
        found = _SECTION.search(cls.docstring.value + "\n")
        if found is None:
            return
        for name, text in _items(found.group(1)).items():
            member = cls.members.get(name)
            if member is not None and not member.is_alias and member.docstring is None:
                member.docstring = griffe.Docstring(text, parent=member)
        value = cls.docstring.value
        cls.docstring.value = (value[: found.start()] + value[found.end() :]).strip()
