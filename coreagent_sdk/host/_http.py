"""The HTTP plumbing a host (and the simulator on it) shares with the SDK's clients."""

from __future__ import annotations

import httpx

from .._http._endpoint import checked_base_url
from .._http._plumbing import _LIMITS, _shared_ssl_context

__all__ = ["checked_base_url", "http_transport"]


def http_transport() -> httpx.AsyncHTTPTransport:
    """A real-network transport pooled as the SDK's own clients pool.

    Its limits are the ones delegations need (no connection cap, few idle
    connections kept), and it shares the process's one TLS context, so making
    many of them costs no CA-bundle loads.
    """
    return httpx.AsyncHTTPTransport(limits=_LIMITS, verify=_shared_ssl_context())
