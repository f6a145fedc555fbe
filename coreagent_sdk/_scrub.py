"""One scrubber between what a server sends and every message this package builds.

Invariant: no secret this process sends (a bearer token, the password of an
endpoint's userinfo) appears in an error, a log line, an event or a result,
whatever a server echoes back and wherever it echoes it (reason phrase, body,
header, JSON key, a turn error, an id that later appears in a URL).

How it holds: messages are built in layers that cannot know which token is in
play (wire decoding, HTTP plumbing, CallPeer), so secrets are registered here
when they are read, and every message passes one function, `scrub`, on its
way into a `CoreAgentError` (its constructor calls it) or into a result.
Server text that is cut to a length goes through `server_text`, which scrubs
*before* it cuts, so a secret straddling the cut cannot leave its first
characters behind. Foreign exceptions kept as a `__cause__` are scrubbed in
place by `scrub_chain`.

Log records are scrubbed where every record is made: logging's record factory
(`logging.setLogRecordFactory`), which every logger of the process calls,
whoever made it and whenever (httpx, httpcore, the vendor SDKs' httpx2 and
httpcore2, uvicorn, a dependency nobody has named yet). No list of logger
names is kept, so none can be missed. The factory is put in place when the
first secret is registered and again by any registration that finds another
one installed since, built over whatever factory was there (a user's own is
kept and still makes the record). A record holding a secret leaves the factory
with its message already formatted and scrubbed (its arguments dropped); one
holding none keeps its message and arguments as given. A logged exception
holding one is scrubbed in place and its traceback text set scrubbed.

Secrets of every length are scrubbed. One of 6 characters or more is
replaced wherever it occurs. A shorter one (`t0k`) is replaced wherever it
stands as a word of its own (no letter or digit touching it on either side;
a `%XX` escape before it counts as a separator), because replacing two
letters inside every word would make every message unreadable for as long
as the process runs, and letters inside a longer word are not the token.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = [
    "LOG_FILTER",
    "REDACTED",
    "forget_all",
    "generation",
    "install_record_scrubbing",
    "register",
    "scoped",
    "scrub",
    "scrub_chain",
    "server_text",
]

REDACTED = "[redacted]"
# Secrets are kept as long as they are in use, the least recently registered
# dropped past this many, so a process that rotates tokens forever stays bounded.
_MAX_SECRETS = 256
# Spellings shorter than this are replaced only where they stand as a word:
# "a" replaced everywhere would eat every a of every message, and of every
# answer a peer gives, for as long as the secret stays registered.
_MIN_LENGTH = 6
# A short secret is a word of its own when no letter or digit touches it; a
# percent escape before it (`Bearer%20t0k`, `token%3Dt0k`) separates it too, and
# so does a JSON escape (`"\nt0k"`: a recording scrubs JSON text as written).
_WORD_BEFORE = r"(?:(?<=%[0-9A-Fa-f]{2})|(?<=\\[nrtbf])|(?<=\\u[0-9A-Fa-f]{4})|(?<![0-9A-Za-z]))"
_WORD_AFTER = r"(?![0-9A-Za-z])"
_PERCENT = re.compile(r"%[0-9A-F]{2}")

_lock = threading.Lock()
_secrets: OrderedDict[str, None] = OrderedDict()
_variants: tuple[str, ...] = ()  # replaced wherever they occur
_words: re.Pattern[str] | None = None  # short spellings, replaced as whole words
_longest = 0
_generation = 0  # bumped whenever the set of secrets changes


def generation() -> int:
    """A number that changes whenever the set of scrubbed secrets does.

    Whoever keeps the outcome of a check against the secrets (a row once
    accepted, an id once let through) checks again when it changed.
    """
    return _generation


def register(secret: str | None) -> None:
    """Scrub `secret` (and its escaped and percent-encoded spellings) from every message."""
    if not secret:
        return
    with _lock:
        if secret in _secrets:
            _secrets.move_to_end(secret)
            return
        _secrets[secret] = None
        while len(_secrets) > _MAX_SECRETS:
            _secrets.popitem(last=False)
        _rebuild()
    install_record_scrubbing()


def _rebuild() -> None:
    """Compile the spellings of `_secrets` (called with `_lock` held, after any change)."""
    global _variants, _words, _longest, _generation
    _generation += 1
    spellings: set[str] = set()
    for s in _secrets:
        spellings |= _spellings(s)
    # Longest first, so a spelling that contains another is replaced whole.
    ordered = sorted(spellings, key=len, reverse=True)
    _variants = tuple(s for s in ordered if len(s) >= _MIN_LENGTH)
    short = [re.escape(s) for s in ordered if len(s) < _MIN_LENGTH]
    _words = re.compile(f"{_WORD_BEFORE}(?:{'|'.join(short)}){_WORD_AFTER}") if short else None
    _longest = max(map(len, ordered), default=0)


@contextlib.contextmanager
def scoped() -> Iterator[None]:
    """Inside: scrub as always. On the way out: the secrets scrubbed are those of the way in.

    For tests. The registry is process-wide on purpose (a token is registered
    where it is read, and every message anywhere is scrubbed of it), so a test
    that reads a token (`"nope"`) would otherwise go on redacting it from the
    text of every later test (`gpt-4o-mini-nope`). A secret registered before
    the scope (by a longer-lived fixture) stays registered; one evicted inside
    comes back. Nothing in the package enters a scope: in an application a
    secret stays scrubbed for as long as the process runs.
    """
    with _lock:
        before = list(_secrets)
    try:
        yield
    finally:
        with _lock:
            if list(_secrets) != before:
                _secrets.clear()
                _secrets.update(dict.fromkeys(before))
                _rebuild()


def _spellings(secret: str) -> set[str]:
    """The ways a server may echo `secret`: as sent, escaped, and percent-encoded."""
    # A server echoing a URL or a form quotes it as it likes: `/` kept or not,
    # hex digits in either case (RFC 3986 allows both), `+` for a blank.
    encoded = {quote(secret, safe=""), quote(secret), quote_plus(secret)}
    encoded |= {_PERCENT.sub(lambda m: m.group(0).lower(), e) for e in encoded}
    return {secret, json.dumps(secret)[1:-1], repr(secret)[1:-1], *encoded}


def forget_all() -> None:
    """Drop every registered secret (for tests of the registry itself, inside `scoped()`)."""
    with _lock:
        _secrets.clear()
        _rebuild()


def is_registered(value: str) -> bool:
    """Whether `value` is a registered secret (as given, or as a token is read: stripped).

    For what must not be handed on: an MCP server's environment leaves out every
    variable whose value this says is some other agent's secret.
    """
    if not value:
        return False
    with _lock:
        return value in _secrets or value.strip() in _secrets


def scrub(text: str) -> str:
    """`text` with every registered secret replaced by `[redacted]`."""
    for secret in _variants:
        if secret in text:
            text = text.replace(secret, REDACTED)
    words = _words
    if words is not None:
        text = words.sub(REDACTED, text)
    return text


def slack() -> int:
    """How many bytes past a cut to read, so a secret straddling it is seen whole."""
    return _longest


def server_text(raw: bytes | bytearray | str, limit: int) -> tuple[str, bool]:
    """Server-sent text for a message: decoded, scrubbed, then cut to `limit` characters.

    Returns the text and whether it was cut. Read `limit + slack()` bytes so
    that the scrub sees a secret lying across the cut.
    """
    text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace")
    text = scrub(text)
    if len(text) > limit:
        return text[:limit], True
    return text, False


def scrub_chain(error: BaseException) -> None:
    """Scrub the args of `error` and of every exception chained to it, in place.

    A foreign exception (httpx, h11) kept as a cause quotes what the server
    sent in its own words; scrubbing its args is what its str() reads.
    """
    seen: set[int] = set()
    todo = [error]
    while todo:
        exc = todo.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        if any(isinstance(a, str) for a in exc.args):
            exc.args = tuple(scrub(a) if isinstance(a, str) else a for a in exc.args)
        todo += [e for e in (exc.__cause__, exc.__context__) if e is not None]


def _scrub_record(record: logging.LogRecord) -> None:
    """Scrub `record` in place: its message, and a logged exception's text."""
    try:
        message = record.getMessage()
    except Exception:  # arguments that do not fit the format: logging reports it, secret-free
        message = f"{record.msg!s} (arguments: {record.args!r})"
    clean = scrub(message)
    if clean != message:
        record.msg, record.args = clean, None
    exc_info = record.exc_info
    if exc_info and exc_info[1] is not None:
        scrub_chain(exc_info[1])
        # What str(exc) reads is not always its args (an attribute, a note): the traceback
        # text is made here, scrubbed, and kept for the formatter when it held a secret.
        text = logging.Formatter().formatException(exc_info)
        clean = scrub(text)
        if clean != text:
            record.exc_text = clean


class _ScrubbingFactory:
    """A record factory: the one it was built over makes the record, then it is scrubbed."""

    def __init__(self, made_by: Callable[..., logging.LogRecord]) -> None:
        self.made_by = made_by

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.made_by(*args, **kwargs)
        if _variants or _words is not None:
            _scrub_record(record)
        return record


def install_record_scrubbing() -> None:
    """Make every log record of the process pass the scrubber as it is made (idempotent)."""
    current = logging.getLogRecordFactory()
    if not isinstance(current, _ScrubbingFactory):
        logging.setLogRecordFactory(_ScrubbingFactory(current))


class _ScrubbingFilter(logging.Filter):
    """Scrubs a record's message in place; never drops a record.

    Not needed where the record factory is in place; for a handler of your own
    that receives records made elsewhere (a queue from another process).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if _variants or _words is not None:
            _scrub_record(record)
        return True


LOG_FILTER = _ScrubbingFilter()
