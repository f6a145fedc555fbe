"""The endpoint policy: what a peer URL must look like before anyone dials it.

The hub checks it at registration and the caller checks it again before it
dials, so a record that slipped past one side (an old hub, a hand-edited
directory) still cannot send a request to `javascript:`, `file:` or a
host-less URL.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

import httpx

from .._scrub import register

__all__ = ["checked_base_url", "endpoint_problem", "shown_url"]

_ALLOWED_SCHEMES = ("http", "https")


def endpoint_problem(url: object) -> str | None:
    """Why `url` is not an absolute http(s) URL with a host, or None when it is."""
    if not isinstance(url, str):
        return f"it is a {type(url).__name__}, not a string"
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
