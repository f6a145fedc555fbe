"""The simulator under a second name, for projects whose own package is called `simulator`.

    from coreagent_sdk.simulator import Fleet, behaviors

The same classes and functions as the top-level `simulator` package that
coreagent-sdk installs. Where the name `simulator` is coreagent-sdk's, every
name here *is* the top-level one (one module each, so `isinstance` and
identity agree whichever path you import). Where a project's own `simulator`
comes first on `sys.path`, the bundled package is loaded from its files once,
as `coreagent_sdk.simulator._bundled`, without touching the project's.

Invariant: `import coreagent_sdk` never imports this module or the simulator;
the `fleet` fixture uses it on first use.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

# Installed side by side with coreagent_sdk (one wheel, two top-level packages).
_OURS = Path(__file__).resolve().parent.parent.parent / "simulator"
_BUNDLED = f"{__name__}._bundled"


def _is_ours(where: str | None) -> bool:
    return where is not None and Path(where).resolve().parent == _OURS


def _package() -> ModuleType:
    """coreagent-sdk's simulator package: the top-level one when that name is ours.

    Finding the top-level package does not import it, so a project's own
    `simulator` is never imported from here.
    """
    found = sys.modules.get("simulator")
    if found is None:
        try:
            spec = importlib.util.find_spec("simulator")
        except (ImportError, ValueError):
            spec = None
        if spec is not None and _is_ours(spec.origin):
            found = importlib.import_module("simulator")
    if found is not None and _is_ours(getattr(found, "__file__", None)):
        return found
    return _bundled()


def _bundled() -> ModuleType:
    loaded = sys.modules.get(_BUNDLED)
    if loaded is not None:
        return loaded
    init = _OURS / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        _BUNDLED, init, submodule_search_locations=[str(_OURS)]
    )
    if spec is None or spec.loader is None or not init.is_file():
        raise ImportError(
            f"coreagent_sdk.simulator: coreagent-sdk's simulator package is missing at "
            f"{_OURS}; reinstall with: pip install 'coreagent-sdk[simulator]'"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[_BUNDLED] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_BUNDLED]
        raise
    return module


def __getattr__(name: str) -> Any:
    if name.startswith("__") and name != "__all__":
        raise AttributeError(name)
    real = _package()
    if name != "__all__" and name not in real.__all__:
        raise AttributeError(f"module 'coreagent_sdk.simulator' has no attribute {name!r}")
    value = getattr(real, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_package().__all__})
