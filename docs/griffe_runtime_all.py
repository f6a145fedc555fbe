"""A griffe extension: take a module's `__all__` from the module itself, at build time.

Static analysis cannot evaluate an `__all__` built by code (the simulator's is
`[*sorted(_WHERE), "behaviors"]`, so that its names load lazily); importing the
module gives the real list, and every name in it is then documented.
"""

from __future__ import annotations

import importlib
from typing import Any

import griffe


class RuntimeAll(griffe.Extension):
    def on_module_members(self, *, mod: griffe.Module, **kwargs: Any) -> None:
        if mod.exports:
            return  # a literal __all__ that griffe read itself
        try:
            runtime = importlib.import_module(mod.path)
        except ImportError:
            return
        names = getattr(runtime, "__all__", None)
        if names:
            mod.exports = list(names)
