"""Lone surrogates as Go's `encoding/json` treats them: each becomes U+FFFD.

JSON may escape half of a surrogate pair (``"\\ud800"``), and models do emit
split pairs. Python decodes one into a string that no UTF-8 encoder accepts,
so a frame holding it could not be written; Go's decoder (and its encoder,
for invalid UTF-8) writes U+FFFD in its place and the text goes through.
Everything that reads JSON from outside, or writes a frame, goes through here.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SURROGATE", "replace_surrogates"]

SURROGATE = re.compile("[\ud800-\udfff]")
"""One UTF-16 surrogate code point (in a decoded str, always a lone one)."""


def replace_surrogates(value: Any) -> Any:
    """`value` with every lone surrogate in its strings and keys made U+FFFD (lists and dicts
    are changed in place).

    Iterative, so a deeply nested body costs no recursion (Go's decoder nests 10,000 deep).
    """

    def fix(item: Any) -> Any:
        return SURROGATE.sub("\ufffd", item) if isinstance(item, str) else item

    value = fix(value)
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for i, item in enumerate(node):
                node[i] = fix(item)
                stack.append(node[i])
        elif isinstance(node, dict):
            for key in list(node):
                item = node.pop(key)
                node[fix(key)] = fix(item)
                stack.append(node[fix(key)])
    return value
