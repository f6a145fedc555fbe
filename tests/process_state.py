"""What a test may not leave behind: the process-wide state that the next test would inherit.

tests/conftest.py takes a snapshot when the session starts and compares it after every
test's teardown. A test that changed any of it (and did not undo it) fails, naming what it
changed, and the snapshot is put back so that one leak does not fail every later test.
This is what makes the suite pass in any order (pytest-randomly) and on any xdist worker.

Undo what you change with pytest's `monkeypatch` (env vars, cwd, attributes), `caplog`
(log levels), `coreagent_sdk._scrub.scoped()` (secrets; conftest wraps each test in one),
or a `try/finally`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from coreagent_sdk._scrub import LOG_FILTER

__all__ = ["Snapshot"]

_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGCHLD", "SIGUSR1")
)
# asyncio's module-level names that a patch (nest-asyncio's, say) replaces for the whole process.
_ASYNCIO_NAMES = ("run", "get_event_loop", "Task", "Future", "_get_running_loop")


def _policy() -> Any:
    # The policy object itself, without creating one (asyncio.get_event_loop_policy would).
    return asyncio.events._event_loop_policy  # type: ignore[attr-defined]


def _policy_kind() -> type:
    # None until first asked for; asyncio then makes one of the default class, as it would
    # have anyway. A policy of another class (uvloop's, a patched one) is what would leak.
    policy = _policy()
    return asyncio.DefaultEventLoopPolicy if policy is None else type(policy)


def _ignored(handler: logging.Handler) -> bool:
    # pytest's logging plugin adds and removes its own around each phase of a test; a
    # library adds a NullHandler to its logger when first imported (it does nothing).
    return type(handler).__module__.startswith("_pytest.") or type(handler) is logging.NullHandler


def _logger_state(logger: logging.Logger) -> tuple[Any, ...]:
    return (
        logger.level,
        tuple(h for h in logger.handlers if not _ignored(h)),
        # The SDK's scrubbing filter is installed for good on loggers that quote servers.
        tuple(f for f in logger.filters if f is not LOG_FILTER),
        logger.propagate,
        logger.disabled,
    )


# Configured by uvicorn whenever some servers are made (Fleet.serve()'s access_log=False
# empties uvicorn.access and turns its propagation off; the tests' own loopback servers take
# uvicorn's default dictConfig), the same way each time: known, and left out. A host's own
# servers touch none of them and log no request line (host/_server_logs.py; its test).
# nbconvert's application (a traitlets Application) configures its own logger likewise, and
# lark gives its own a handler and the level CRITICAL when first imported (by jsonschema,
# under nbformat, which a test may be the first to import).
_SET_BY_UVICORN = frozenset(
    {"uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi", "NbConvertApp", "lark"}
)


def _loggers() -> dict[str, tuple[Any, ...]]:
    found = {"<root>": _logger_state(logging.getLogger())}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and name not in _SET_BY_UVICORN:
            found[name] = _logger_state(logger)
    return found


_DEFAULT_LOGGER = (logging.NOTSET, (), (), True, False)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _hooks() -> dict[str, Any]:
    return {
        "sys.excepthook": sys.excepthook,
        "threading.excepthook": threading.excepthook,
        "sys.asyncgen_hooks": tuple(sys.get_asyncgen_hooks()),
        "socket default timeout": socket.getdefaulttimeout(),
        "sys.switchinterval": sys.getswitchinterval(),
        "sys.recursionlimit": sys.getrecursionlimit(),
        "umask": _umask(),
    }


class Snapshot:
    """The process-wide state a test could change, as it was when taken."""

    def __init__(self) -> None:
        # The vendor SDKs put a filter on their own logger when first imported (openai's
        # SensitiveHeadersFilter on "openai._base_client"). Imported before the snapshot, so
        # that filter is part of the state the session starts with: otherwise whichever test
        # first builds an adapter is blamed for it, and only in the orders where it runs
        # first. (Here, not at import: xdist's controller, which runs no test, loads this
        # module too, and need not pay seconds for them.)
        for vendor in ("openai", "anthropic"):
            with contextlib.suppress(ImportError):
                __import__(vendor)
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.policy = _policy()
        self.policy_kind = _policy_kind()
        self.asyncio_names = {name: getattr(asyncio, name) for name in _ASYNCIO_NAMES}
        self.loggers = _loggers()
        self.logging_disabled = logging.root.manager.disable
        self.signals = {sig: signal.getsignal(sig) for sig in _SIGNALS}
        self.sys_path = list(sys.path)
        self.hooks = _hooks()

    def changes(self) -> list[str]:
        """What differs now from the snapshot, each as a sentence naming the thing."""
        found: list[str] = []
        now_env = dict(os.environ)
        for key in sorted(set(now_env) | set(self.environ)):
            if now_env.get(key) != self.environ.get(key):
                found.append(
                    f"environment variable {key!r}: {self.environ.get(key)!r} -> "
                    f"{now_env.get(key)!r}"
                )
        if os.getcwd() != self.cwd:
            found.append(f"working directory: {self.cwd!r} -> {os.getcwd()!r}")
        if _policy_kind() is not self.policy_kind:
            found.append(f"asyncio event loop policy: {self.policy!r} -> {_policy()!r}")
        for name, value in self.asyncio_names.items():
            if getattr(asyncio, name) is not value:
                found.append(f"asyncio.{name} replaced: {getattr(asyncio, name)!r}")
        for name, state in _loggers().items():
            if state != self.loggers.get(name, _DEFAULT_LOGGER):
                found.append(
                    f"logger {name!r} (level, handlers, filters, propagate, disabled): "
                    f"{self.loggers.get(name, _DEFAULT_LOGGER)!r} -> {state!r}"
                )
        if logging.root.manager.disable != self.logging_disabled:
            found.append(f"logging.disable({logging.root.manager.disable})")
        for sig, handler in self.signals.items():
            now = signal.getsignal(sig)
            if now != handler:
                found.append(f"signal handler for {sig!r}: {handler!r} -> {now!r}")
        if sys.path != self.sys_path:
            found.append(f"sys.path: {self.sys_path!r} -> {sys.path!r}")
        now_hooks = _hooks()
        for name, value in self.hooks.items():
            if now_hooks[name] != value:
                found.append(f"{name}: {value!r} -> {now_hooks[name]!r}")
        return found

    def restore(self) -> None:
        """Put the snapshot's state back (after a leak was reported)."""
        os.environ.clear()
        os.environ.update(self.environ)
        os.chdir(self.cwd)
        asyncio.set_event_loop_policy(self.policy)
        for name, value in self.asyncio_names.items():
            setattr(asyncio, name, value)
        for name, logger in list(logging.Logger.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger) and name not in _SET_BY_UVICORN:
                _put_logger(logger, self.loggers.get(name, _DEFAULT_LOGGER))
        _put_logger(logging.getLogger(), self.loggers["<root>"])
        logging.disable(self.logging_disabled)
        for sig, handler in self.signals.items():
            if handler is not None:
                signal.signal(sig, handler)
        sys.path[:] = self.sys_path
        setters: dict[str, Callable[[Any], Any]] = {
            "sys.excepthook": lambda v: setattr(sys, "excepthook", v),
            "threading.excepthook": lambda v: setattr(threading, "excepthook", v),
            "sys.asyncgen_hooks": lambda v: sys.set_asyncgen_hooks(*v),
            "socket default timeout": socket.setdefaulttimeout,
            "sys.switchinterval": sys.setswitchinterval,
            "sys.recursionlimit": sys.setrecursionlimit,
            "umask": os.umask,
        }
        for name, value in self.hooks.items():
            setters[name](value)


def _put_logger(logger: logging.Logger, state: tuple[Any, ...]) -> None:
    level, handlers, filters, propagate, disabled = state
    logger.setLevel(level)
    ours = [h for h in logger.handlers if _ignored(h)]
    logger.handlers[:] = [*handlers, *ours]
    logger.filters[:] = [*filters, *(f for f in logger.filters if f is LOG_FILTER)]
    logger.propagate = propagate
    logger.disabled = disabled
