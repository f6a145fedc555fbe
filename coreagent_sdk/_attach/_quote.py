"""Quoting a name for a message the way the daemon's Go `%q` does, with a bound.

The daemon's messages quote peer names with `fmt`'s `%q` (`strconv.Quote`):
a character is written as is only when Go's `strconv.IsPrint` says so
(letters, marks, numbers, punctuation, symbols and the ASCII space), which
is exactly Python's `str.isprintable`. Everything else is escaped: U+2028,
U+2029 and U+0085 (line breaks to some readers), U+202E (turns the rest of a
line around), DEL, every C0 control. JSON leaves all of those but the C0
controls raw, so a registered name could forge a line in a model's context.

Unlike Go we also cut: a name is hostile input, and one 3 MB name must not
make a 3 MB message that goes to the model. The cut is said, with the size.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MAX_QUOTED_NAME", "go_quote", "names_text", "quote_name", "quoted_names"]

MAX_QUOTED_NAME = 200
"""Characters of quoted output (escapes included) one name may take in a message."""

_SHORT = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _escaped(char: str) -> str:
    if char in ('"', "\\"):
        return "\\" + char
    if char.isprintable():
        return char
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    if 0xD800 <= code <= 0xDFFF:  # a lone surrogate: not a valid rune, Go writes U+FFFD
        return "\\ufffd"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def go_quote(value: str, limit: int = MAX_QUOTED_NAME) -> str:
    """`value` as Go's `strconv.Quote` writes it, cut after `limit` characters of output."""
    out = ['"']
    size = 2  # the quotes
    for index, char in enumerate(value):
        piece = _escaped(char)
        if size + len(piece) > limit:
            out.append('"')
            return "".join(out) + f"... (cut: {len(value)} characters, the first {index} shown)"
        out.append(piece)
        size += len(piece)
    out.append('"')
    return "".join(out)


def quote_name(name: str, limit: int = MAX_QUOTED_NAME) -> str:
    """A peer name as the daemon's messages quote it (Go's ``%q``), cut past `limit` characters.

    Only what Go's ``strconv.IsPrint`` calls printable is written as is; line
    and paragraph separators, U+0085, bidi controls such as U+202E, DEL and
    every control character are escaped, so a name cannot forge a line or
    turn text around in a model's context. Unlike Go, a name whose quoted
    form is over `limit` characters is cut, and the cut says the name's size.
    Use it to name peers in your own messages, a fan-out's ``join`` say.
    """
    return go_quote(name, limit)


def quoted_names(names: Iterable[str], *, most: int, budget: int = 4000) -> tuple[list[str], int]:
    """At most `most` names quoted (each cut), within `budget` characters; and how many are left.

    The count bounds a message's lines, the budget its size whatever the names:
    fifty 3 MB names and fifty short ones both fit on a screen.
    """
    listed = list(names)
    shown: list[str] = []
    size = 0
    for name in listed[:most]:
        quoted = go_quote(name)
        size += len(quoted) + 2  # the ", " between names
        if size > budget:
            break
        shown.append(quoted)
    return shown, len(listed) - len(shown)


def names_text(names: Iterable[str], *, most: int = 20, budget: int = 1000) -> str:
    """Names for a console repr: quoted, cut, bounded, and ``+N more`` for the rest."""
    shown, more = quoted_names(names, most=most, budget=budget)
    return ", ".join(shown + ([f"+{more} more"] if more else []))
