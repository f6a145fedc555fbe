"""An optional allow-list of the hosts a caller may dial.

Invariant: with an allow-list, no request goes to a host that is not on it,
whatever a hub lists or a directory returns. A hub lists whatever
registered; on a fleet shared with other teams, that can be any address. The
list is checked before anything is dialed (`CallPeer` refuses the call with
`InvalidEndpointError`; `HubDirectory` leaves such peers out of its roster).

Patterns: an exact host (`api.prod.internal`, `127.0.0.1`, `[::1]`), a suffix
wildcard (`*.prod.internal`: any name ending in `.prod.internal`, not the name
itself), either optionally with `:port` (then only that port matches; the
scheme's default counts when the URL gives none). Case and a trailing dot do
not matter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

__all__ = ["HostAllowList"]

_LABEL = r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?"
_NAME = re.compile(rf"({_LABEL}\.)*{_LABEL}|\[[0-9a-f:.]+\]|[0-9.]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _norm(host: str) -> str:
    return host.lower().rstrip(".").strip("[]")


class HostAllowList:
    """Hosts a caller may dial: exact names or `*.suffix`, each optionally with `:port`.

    Attributes:
        patterns: The patterns, in the order given.
    """

    def __init__(self, patterns: Iterable[str]) -> None:
        if isinstance(patterns, str):
            patterns = [patterns]
        self.patterns = tuple(patterns)
        self._rules: list[tuple[bool, str, int | None]] = []
        for pattern in self.patterns:
            self._rules.append(self._parse(pattern))

    @staticmethod
    def _parse(pattern: str) -> tuple[bool, str, int | None]:
        text = pattern.strip().lower() if isinstance(pattern, str) else ""
        host, port = text, None
        match = re.fullmatch(r"(.*?):(\d{1,5})", text)
        if match and not text.endswith("]"):
            host, port = match.group(1), int(match.group(2))
        wildcard = host.startswith("*.")
        name = host[2:] if wildcard else host
        if not _NAME.fullmatch(name.rstrip(".")) or (port is not None and not 0 < port < 65536):
            raise ValueError(
                f"hosts: host pattern {pattern!r} is not usable; write a host such as "
                "'api.prod.internal', '127.0.0.1' or '[::1]', a suffix such as "
                "'*.prod.internal', either optionally with ':port'"
            )
        return wildcard, _norm(name), port

    def __repr__(self) -> str:
        return f"HostAllowList({list(self.patterns)!r})"

    def allows(self, url: str) -> bool:
        """Whether `url`'s host (and port) matches a pattern."""
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            return False
        if not host:
            return False
        host = _norm(host)
        port = port if port is not None else _DEFAULT_PORTS.get(parts.scheme.lower())
        for wildcard, name, want_port in self._rules:
            if want_port is not None and want_port != port:
                continue
            if host.endswith("." + name) if wildcard else host == name:
                return True
        return False

    def host_of(self, url: str) -> str:
        """The host part of `url`, for messages."""
        try:
            return urlsplit(url).hostname or ""
        except ValueError:
            return ""
