"""What a host's uvicorn server logs: no access line, and no logger of the process configured.

uvicorn's defaults are made for a process that is only a server: `uvicorn.Config` runs its
own `logging.config.dictConfig` (handlers and levels on the `uvicorn*` loggers of the whole
process), sets the level `log_level` names, and logs every request line, query string and
all, at INFO; its own `access_log=False` turns the access log off by emptying the
process's `uvicorn.access` logger, for every server in it. A host runs inside someone
else's process (a notebook, a web service, tests), so each of its servers instead leaves
logging as the user set it, and writes no access line at any level: its protocol instances
are told so one by one, which no other server in the process notices.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["quiet_server_options"]


@functools.cache
def _quiet(protocol: type) -> type:
    """`protocol` (a uvicorn HTTP protocol class) with its access log off, for one server."""

    class Quiet(protocol):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.access_log = False  # read per request; uvicorn set it from the logger's handlers

    Quiet.__name__ = Quiet.__qualname__ = f"Quiet{protocol.__name__}"
    return Quiet


def quiet_server_options(options: dict[str, Any]) -> dict[str, Any]:
    """`uvicorn.Config` keywords (`uvicorn_options()`'s) for a server that logs no request
    and configures no logger: uvicorn's own errors still reach the `uvicorn.error` logger,
    at whatever level and with whatever handlers the process gave it."""
    return {**options, "http": _quiet(options["http"]), "log_config": None, "log_level": None}
