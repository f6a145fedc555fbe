"""The session-wide canary: one token that must never show up where users can see it.

tests/conftest.py installs `CanaryWatch` for the whole run. Any test that needs a
token uses `CANARY`; the watch then checks every `CoreAgentError` created during
the test (its str, repr, args and attributes, along its `__cause__` and
`__context__` chain), the repr of every tool, client, directory, registration,
result and event built, and every log record of every logger at DEBUG. A test
during which the canary (or any 10 characters of it: a token cut in half still
leaks) appeared fails at teardown, saying where.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

CANARY = "cnry-5e1d0a7c94b2f8e3-do-not-leak"
_WINDOW = 10
_WINDOWS = frozenset(CANARY[i : i + _WINDOW] for i in range(len(CANARY) - _WINDOW + 1))


def leaked(text: str) -> bool:
    """Whether `text` holds the canary or any 10-character piece of it."""
    return any(w in text for w in _WINDOWS)


def shown(text: str, limit: int = 300) -> str:
    """`text` around the first leak, with the canary's pieces marked, for the failure message."""
    at = min((text.find(w) for w in _WINDOWS if w in text), default=0)
    start = max(0, at - limit // 2)
    out = text[start : start + limit].replace(CANARY, "<CANARY>")
    for w in sorted(_WINDOWS, key=len, reverse=True):
        out = out.replace(w, "<CANARY-PIECE>")
    return out


def exception_texts(error: BaseException) -> Iterator[tuple[str, str]]:
    """(where, text) for an exception and everything chained to it."""
    seen: set[int] = set()
    todo: list[tuple[str, BaseException]] = [("", error)]
    while todo:
        path, exc = todo.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        name = f"{type(exc).__module__}.{type(exc).__qualname__}{path}"
        yield f"str() of {name}", _safe(str, exc)
        yield f"repr() of {name}", _safe(repr, exc)
        yield f"args of {name}", _safe(lambda e: repr(e.args), exc)
        yield f"attributes of {name}", _safe(lambda e: repr(vars(e)), exc)
        yield f"notes of {name}", _safe(lambda e: repr(getattr(e, "__notes__", "")), exc)
        if exc.__cause__ is not None:
            todo.append((f"{path} -> __cause__", exc.__cause__))
        if exc.__context__ is not None:
            todo.append((f"{path} -> __context__", exc.__context__))


def _safe(fn: Callable[[Any], str], value: Any) -> str:
    try:
        return fn(value)
    except Exception as exc:  # a repr that raises must not hide a leak elsewhere
        return f"<{type(exc).__name__} while rendering>"


class _Handler(logging.Handler):
    def __init__(self, watch: CanaryWatch) -> None:
        super().__init__(logging.DEBUG)
        self._watch = watch
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        text = _safe(self._formatter.format, record)
        if leaked(text):
            self._watch.report(
                f"a log record of logger {record.name!r} at {record.levelname}", text
            )


class CanaryWatch:
    """Collects what a test produced and says where the canary appeared, if anywhere."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.objects: list[Any] = []
        self.leaks: list[str] = []
        self._undo: list[Callable[[], None]] = []
        self._handler = _Handler(self)

    def report(self, where: str, text: str) -> None:
        with self._lock:
            self.leaks.append(f"{where}: {shown(text)!r}")

    # ---------------------------------------------------------------- install

    def install(self) -> None:
        from coreagent_sdk import (
            AttachClient,
            CallPeer,
            CallPeerEvent,
            CallPeerResult,
            HubDirectory,
            PeerRegistration,
            RegistrationEvent,
        )
        from coreagent_sdk.errors import CoreAgentError
        from coreagent_sdk.models import AnthropicModel, OpenAIChatModel

        root = logging.getLogger()
        old_level = root.level
        root.addHandler(self._handler)
        root.setLevel(logging.DEBUG)
        self._undo.append(lambda: (root.removeHandler(self._handler), root.setLevel(old_level)))

        watch = self

        def new(cls: type[BaseException], *args: Any, **kwargs: Any) -> Any:
            # The next __new__ along the MRO (OSError's for a TimeoutError subclass).
            error = super(CoreAgentError, cls).__new__(cls, *args)  # type: ignore[misc]
            with watch._lock:
                watch.errors.append(error)
            return error

        CoreAgentError.__new__ = new  # type: ignore[method-assign,assignment]
        self._undo.append(lambda: delattr(CoreAgentError, "__new__"))

        # Values are frozen: their repr is checked as they are made. Objects with
        # state are kept and their repr checked at the end of the test.
        for cls in (CallPeerEvent, CallPeerResult, RegistrationEvent):
            self._wrap_init(cls, check_now=True)
        for cls in (
            AttachClient,
            CallPeer,
            HubDirectory,
            PeerRegistration,
            OpenAIChatModel,
            AnthropicModel,
        ):
            self._wrap_init(cls, check_now=False)

    def _wrap_init(self, cls: type, *, check_now: bool) -> None:
        original = cls.__dict__["__init__"]
        watch = self

        def init(obj: Any, *args: Any, **kwargs: Any) -> None:
            original(obj, *args, **kwargs)
            if check_now:
                text = _safe(repr, obj)
                if leaked(text):
                    watch.report(f"the repr of a {cls.__name__}", text)
            else:
                with watch._lock:
                    watch.objects.append(obj)

        init.__wrapped__ = original  # type: ignore[attr-defined]
        cls.__init__ = init  # type: ignore[misc]
        self._undo.append(lambda: setattr(cls, "__init__", original))

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    # ------------------------------------------------------------- per test

    def clear(self) -> None:
        with self._lock:
            self.errors.clear()
            self.objects.clear()
            self.leaks.clear()

    def verdict(self) -> list[str]:
        """Where the canary appeared since `clear()`; empty when nowhere."""
        with self._lock:
            errors, objects, leaks = list(self.errors), list(self.objects), list(self.leaks)
        for error in errors:
            for where, text in exception_texts(error):
                if leaked(text):
                    leaks.append(f"the {where}: {shown(text)!r}")
        for obj in objects:
            text = _safe(repr, obj)
            if leaked(text):
                leaks.append(f"the repr of a {type(obj).__name__}: {shown(text)!r}")
        self.clear()
        return leaks
