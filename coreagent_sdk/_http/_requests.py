"""`Requests`: one base URL's requests, built from its parsed form.

httpx's `build_request` parses the whole URL string, merges the client's
headers into a new `Headers` and encodes the body for every request: about a
tenth of a delegation's CPU on the caller (three requests each). An attach
client sends to one base URL, with a few fixed sets of headers, so this parses
the base once, merges each header set once, and per request only joins a
plain path onto the parsed base and adds the body's length. What it builds is
what `build_request` builds (the same URL, headers in the same order, the same
body): `tests/test_requests.py` holds them side by side.

Only for the SDK's own clients (their default headers never change after
they are made) and only for plain paths (letters, digits and ``._~:+-``
segments, no query): anything else takes `build_request`.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Mapping
from typing import Any

import httpx

from ._endpoint import plain_endpoint

__all__ = ["Requests", "parsed_base"]

# A path needing no percent-encoding and no parsing: what checked segments make.
_PLAIN_PATH = re.compile(r"(?:/[A-Za-z0-9._~:+\-]*)+")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})  # httpx gives these a length when empty


def _url_joiner() -> Any:
    """A function (base, path) -> URL that does not parse again, or None where it cannot.

    httpx keeps a URL's parsed parts as a named tuple; replacing the path of a
    parsed base is then a tuple copy. That tuple is httpx's own, so the joiner
    is checked against the parsing way once, here, and not used if they differ.
    """

    def join(base: httpx.URL, path: str) -> httpx.URL:
        url = httpx.URL.__new__(httpx.URL)
        url._uri_reference = base._uri_reference._replace(path=path)
        return url

    try:
        probe = httpx.URL("http://127.0.0.1:8080")
        joined = join(probe, "/sessions/a.b~c:d+e-f/events")
        same = httpx.URL("http://127.0.0.1:8080/sessions/a.b~c:d+e-f/events")
        if joined == same and joined.raw_path == same.raw_path and str(joined) == str(same):
            return join
    except Exception:  # another httpx: the parsing way only
        pass
    return None


_join = _url_joiner()

# A plain base (`_endpoint._plain`: a lower-case host name, an optional port, no path), as
# a fleet's or a hub's endpoints are: parsed by putting its host into a parsed template of
# its scheme and port, not by parsing it whole. A tool calling 10,000 peers at random made a
# client (and parsed a base) on nearly every call; the parse was most of that client's cost.
_BASE = re.compile(r"(https?)://([a-z0-9.-]+)(?::([0-9]{1,5}))?")


@functools.lru_cache(maxsize=64)
def _template(scheme: str, port: str | None) -> httpx.URL:
    return httpx.URL(f"{scheme}://template.invalid{':' + port if port else ''}")


def _put_host(base: str) -> httpx.URL | None:
    match = _BASE.fullmatch(base)
    if match is None or not plain_endpoint(base):
        return None
    scheme, host, port = match.groups()
    url = httpx.URL.__new__(httpx.URL)
    url._uri_reference = _template(scheme, port)._uri_reference._replace(host=host)
    return url


def _host_putter() -> Any:
    """`_put_host`, if it builds what parsing builds for this httpx (checked once, here)."""
    try:
        for probe in ("http://p-1.sim", "https://a.b-c.example:8443", "http://x.y:80"):
            put, parsed = _put_host(probe), httpx.URL(probe)
            if put is None or (put, put.raw_path, str(put), put.netloc, put.port) != (
                parsed,
                parsed.raw_path,
                str(parsed),
                parsed.netloc,
                parsed.port,
            ):
                return None
    except Exception:  # another httpx: the parsing way only
        return None
    return _put_host


_put = _host_putter()


def parsed_base(base_url: str) -> httpx.URL:
    """`httpx.URL(base_url)`, without parsing it whole where it is a plain base."""
    put = _put(base_url) if _put is not None else None
    return put if put is not None else httpx.URL(base_url)


# Merged default and fixed headers (Host aside) by pool and by the fixed dict's items.
_MERGED: weakref.WeakKeyDictionary[httpx.AsyncClient, dict[tuple[tuple[str, str], ...], Any]] = (
    weakref.WeakKeyDictionary()
)
_MERGED_KEPT = 64


class Requests:
    """Requests to `base_url` through `client`, whose default headers are fixed.

    `build` answers None when it cannot build a request the fast way (a path
    that is not plain, query parameters): the caller then uses
    `client.build_request`.
    """

    def __init__(self, client: httpx.AsyncClient, base_url: str) -> None:
        self._base = parsed_base(base_url)
        self._client = client
        self._defaults = client.headers
        self._host = (b"Host", self._base.netloc)
        # Merged header lists, by the identity of the caller's fixed header dicts.
        self._merged: dict[int, tuple[Mapping[str, str], list[tuple[bytes, bytes]]]] = {}

    def build(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str],
        content: bytes | None,
        timeout: httpx.Timeout,
    ) -> httpx.Request | None:
        if _join is None or not _PLAIN_PATH.fullmatch(path):
            return None
        raw = self._headers(headers)
        if content:  # httpx adds the length of a body after the other headers
            raw = [*raw, (b"Content-Length", str(len(content)).encode())]
        elif method in _BODY_METHODS:  # and of an empty one, right after Host
            raw = [raw[0], (b"Content-Length", b"0"), *raw[1:]]
        request = httpx.Request(
            method,
            _join(self._base, path),
            headers=raw,
            stream=httpx.ByteStream(content or b""),
            extensions={"timeout": timeout.as_dict()},
        )
        request.read()  # as build_request's request: its content readable at once
        return request

    def _headers(self, headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
        """The client's default headers with `headers` over them, Host first."""
        kept = self._merged.get(id(headers))
        if kept is not None and kept[0] is headers:
            return kept[1]
        # Every client of one pool merges the same few dicts (a tool's clients differ by
        # peer, not by headers): merged once per pool, not once per client, which a tool
        # making a client for nearly every call of a 10,000-peer fleet paid three times.
        pool = _MERGED.get(self._client)
        if pool is None:
            pool = _MERGED[self._client] = {}
        key = tuple(headers.items())
        rest = pool.get(key)
        if rest is None:
            merged = httpx.Headers(self._defaults)
            merged.update(headers)
            rest = merged.raw
            if len(pool) >= _MERGED_KEPT:
                pool.clear()  # bounded: headers that vary per request are merged each time
            pool[key] = rest
        raw = [self._host, *rest]
        if len(self._merged) < 8:  # a client's few fixed dicts; others are merged each time
            self._merged[id(headers)] = (headers, raw)
        return raw
