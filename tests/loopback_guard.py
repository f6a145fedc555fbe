"""An audit hook that refuses every address but loopback, before the socket is touched.

Installed in processes that run code written for readers (a notebook's kernel, a guide's
blocks): whatever that code dials is recorded, and anything but loopback is refused with
an `OSError` naming it. Imported by path, so it depends on nothing but the standard library.
"""

from __future__ import annotations

import sys
from typing import Any

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def install(who: str) -> list[str]:
    """Refuse non-loopback addresses from now on; returns the list of hosts dialed."""
    dialed: list[str] = []

    def loopback_only(event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.connect":
            address = args[1]
            host = address[0] if isinstance(address, tuple) else None
        elif event == "socket.getaddrinfo":
            host = args[0]
        else:
            return
        if host is None:
            return  # a local (AF_UNIX) socket or a wildcard lookup
        host = host.decode() if isinstance(host, bytes) else str(host)
        dialed.append(host)
        if host not in LOOPBACK:
            raise OSError(f"{who}: refused to reach {host!r}: loopback only")

    sys.addaudithook(loopback_only)
    return dialed
