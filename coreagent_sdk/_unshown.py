"""The characters no output of the SDK carries as they are, and how they are shown instead.

A peer's, a model's or a server's words reach a terminal (an exception's message), a
notebook's markup and an SVG drawing. Some characters do harm there whatever the text
says: C0 controls but tab and line breaks (``ESC[2J`` clears a terminal; XML 1.0 forbids
them even as character references), DEL and the C1 controls, lone surrogates, U+FFFE and
U+FFFF, the line and paragraph separators, and the bidi controls, which turn the rest of a
line around ("admin" + U+202E made a call's "0.2 ms · failed" read "deliaf · sm 2.0").
Each is shown as its escape (``\\x1b``, ``\\u202e``), as the text views' quoting shows it.
One definition, so an error's message and the HTML views cannot disagree on the set.
"""

from __future__ import annotations

import re

__all__ = ["shown_text"]

_UNSHOWN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
    "\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown_text(text: str) -> str:
    """`text` with every character no output may carry raw shown as its escape."""
    # The search first: nearly every message holds none, and then is returned as it is.
    if _UNSHOWN.search(text) is None:
        return text
    return _UNSHOWN.sub(_shown, text)
