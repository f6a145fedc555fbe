"""A griffe extension: give a class without an `__init__` in its source the one it has at run time.

The source of an attrs class has no `__init__`, so static analysis shows no signature where
users call `RosterEntry(name, endpoint, ...)`. Importing the class gives attrs' real
signature (aliases, defaults, keyword-only fields); the same goes for a class that inherits
its constructor (`SystemClock()`). It becomes the class's `__init__` and, with
`merge_init_into_class`, the signature the reference shows. Protocols and exceptions are
left alone: nobody constructs the first, and the second's constructor is its message.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import griffe

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: griffe.ParameterKind.positional_only,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
    inspect.Parameter.VAR_POSITIONAL: griffe.ParameterKind.var_positional,
    inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
    inspect.Parameter.VAR_KEYWORD: griffe.ParameterKind.var_keyword,
}


def _runtime(cls: griffe.Class) -> Any:
    try:
        value: Any = importlib.import_module(cls.module.path)
    except ImportError:
        return None
    for part in cls.path[len(cls.module.path) + 1 :].split("."):
        value = getattr(value, part, None)
    return value


def _annotation(param: inspect.Parameter) -> str | None:
    if param.annotation is inspect.Parameter.empty:
        return None
    if isinstance(param.annotation, str):
        return param.annotation
    return inspect.formatannotation(param.annotation)


class RuntimeInit(griffe.Extension):
    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        if "__init__" in cls.members:
            return
        runtime = _runtime(cls)
        if (
            not inspect.isclass(runtime)
            or getattr(runtime, "_is_protocol", False)
            or issubclass(runtime, BaseException)
        ):
            return
        try:
            signature = inspect.signature(runtime)  # the call users write: no `self`
        except (TypeError, ValueError):
            return
        parameters = [
            griffe.Parameter(
                name,
                annotation=_annotation(param),
                kind=_KINDS[param.kind],
                default=None if param.default is inspect.Parameter.empty else repr(param.default),
            )
            for name, param in signature.parameters.items()
        ]
        # griffe drops a method's first parameter when it merges __init__ into the class.
        parameters.insert(
            0, griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)
        )
        init = griffe.Function(
            "__init__",
            parameters=griffe.Parameters(*parameters),
            returns="None",
            lineno=cls.lineno,
            endlineno=cls.lineno,
        )
        cls.set_member("__init__", init)
