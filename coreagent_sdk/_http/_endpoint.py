"""The endpoint policy: what a peer URL must look like before anyone dials it.

The hub checks it at registration and the caller checks it again before it
dials, so a record that slipped past one side (an old hub, a hand-edited
directory) still cannot send a request to `javascript:`, `file:` or a
host-less URL.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import urlsplit

import httpx

from .._scrub import register

__all__ = ["checked_base_url", "endpoint_problem", "plain_endpoint", "shown_url"]

_ALLOWED_SCHEMES = ("http", "https")


# An endpoint as fleets and hubs hand them out: http(s), a lower-case host name with a letter
# in it (an all-numeric one may be an IPv4 address, which httpx checks), an optional port and
# a path of unreserved characters. Every rule of `_string_problem` holds for such a string by
# its shape (the port's range aside), so one match checks it instead of two URL parsers: a
# tool calling 10,000 peers at random missed the cache below on nearly every call, and the
# two parsers were a sixth of its delegation's CPU. tests/test_endpoint.py holds the two ways
# side by side.
# No "--" in the host: a label with one may be an IDNA A-label (`xn--...`), which only httpx's
# IDNA codec can say is well formed, so such a host takes the parsers.
_PLAIN = re.compile(
    r"https?://(?![^/]*--)(?=[a-z0-9.-]*[a-z])[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
    r"(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
    r"(?::(?P<port>[0-9]{1,5}))?(?:/[A-Za-z0-9._~-]*)*"
)
_PLAIN_MAX = 2048  # longer endpoints take the parsers (the match stays linear and short)


def plain_endpoint(url: str) -> bool:
    """Whether `url` is a plain endpoint (see `_PLAIN`) with its port in range."""
    if len(url) > _PLAIN_MAX:
        return False
    match = _PLAIN.fullmatch(url)
    if match is None:
        return False
    port = match["port"]
    return port is None or 0 < int(port) < 65536


def endpoint_problem(url: object) -> str | None:
    """Why `url` is not an absolute http(s) URL with a host, or None when it is."""
    if not isinstance(url, str):
        return f"it is a {type(url).__name__}, not a string"
    if plain_endpoint(url):
        return None  # no userinfo, so no password to register either
    password = _password(url)
    if password:
        register(password)  # the scrubber keeps it out of any message a server echoes
    return _string_problem(url)


@functools.lru_cache(maxsize=1024)
def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def shown_url(url: str) -> str:
    """`url` for messages and reprs: a userinfo password is masked as `***`."""
    if not isinstance(url, str) or "@" not in url:
        return url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if password is None:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return parts._replace(netloc=f"{user}:***@{hostport}").geturl()


# A pure function of the string, checked on every dial: the cache makes the
# second check of the same endpoint free without skipping it.
@functools.lru_cache(maxsize=1024)
def _string_problem(url: str) -> str | None:
    if not url:
        return "it is empty"
    # Leading blanks or embedded control characters are how parsers get fooled
    # into disagreeing about the host; refuse rather than normalise. Every
    # whitespace and control character except the plain space is non-printable.
    if " " in url or not url.isprintable():
        return "it contains whitespace or control characters"
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError as exc:
        return f"it does not parse as a URL ({exc})"
    if parts.scheme.lower() not in _ALLOWED_SCHEMES:
        shown = parts.scheme or "none"
        return f"its scheme is {shown!r}; only http and https are allowed"
    if not parts.hostname:
        return "it has no host"
    if not port_ok:
        return "its port is out of range"
    try:
        # A request, not just a URL: httpx derives the Host header only then.
        httpx.Request("GET", url)
    except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
        return f"httpx cannot encode it ({type(exc).__name__})"
    return None


def checked_base_url(url: str, component: str) -> str:
    """`url` without its trailing slash, or ValueError naming the problem and the fix."""
    problem = endpoint_problem(url)
    if problem is not None:
        raise ValueError(
            f"{component}: URL {shown_url(url)!r} is refused: {problem}; pass an absolute "
            "http(s) URL "
            "with a host, such as 'http://127.0.0.1:8844'"
        )
    return url.rstrip("/")
