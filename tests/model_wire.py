"""Wire-test plumbing for the vendor adapters: recorded shapes, respx routes, no network.

Every adapter test sends through `Wire`, an in-process transport that
records each request and refuses (without dialing: a mock transport has no
socket) any request whose host is not 127.0.0.1, failing the test at
teardown. `guard_sockets` goes further for the whole test: a DNS lookup or a
connect to anything but loopback raises before it leaves the process, so a
client that somehow bypassed the transport still cannot reach a vendor.

The openai package accepts an `httpx.AsyncClient`; the anthropic package
wants an `httpx2.AsyncClient`, which respx does not patch. `Wire` serves
both: it converts an httpx2 request to an httpx one for the respx router and
the router's response back.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"
LOOPBACK = "127.0.0.1"
BASE = "http://127.0.0.1:9"  # nothing listens: only in-process transports serve it


def shape(name: str) -> Any:
    """A recorded-shape body from tests/fixtures/models."""
    return json.loads((FIXTURES / name).read_text())


def _loopback(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def guard_sockets(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Refuse DNS and connects to anything but loopback; returns the refused targets."""
    refused: list[str] = []
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _loopback(host):
            refused.append(f"getaddrinfo {host!r}")
            raise OSError(f"test guard: DNS lookup of {host!r} refused (loopback only)")
        return real_getaddrinfo(host, *args, **kwargs)

    def check(address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(address, tuple) and not _loopback(host):
            refused.append(f"connect {host!r}")
            raise OSError(f"test guard: connect to {host!r} refused (loopback only)")

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    return refused


class Wire:
    """A recording, loopback-only transport in front of a respx router.

    `requests` holds every request seen (loopback or not); `refused` the URLs
    of those that would have left the machine, answered with a connect error
    and never dialed.
    """

    def __init__(self) -> None:
        self.router = respx.MockRouter(base_url=BASE, assert_all_called=False)
        self.requests: list[httpx.Request] = []
        self.refused: list[str] = []

    def _route(self, request: httpx.Request) -> httpx.Response | None:
        self.requests.append(request)
        if not _loopback(request.url.host):
            self.refused.append(str(request.url))
            return None
        return self.router.handler(request)

    def sent(self) -> list[Any]:
        """The JSON bodies of the requests, in order."""
        return [json.loads(r.content) for r in self.requests]

    # ------------------------------------------------------------- clients

    def httpx_client(self) -> httpx.AsyncClient:
        """An `httpx.AsyncClient` (what the openai package accepts) over this wire."""

        def handler(request: httpx.Request) -> httpx.Response:
            response = self._route(request)
            if response is None:
                raise httpx.ConnectError("test wire: refused, not loopback", request=request)
            return response

        return httpx.AsyncClient(transport=httpx.MockTransport(handler))

    def httpx2_client(self) -> Any:
        """An `httpx2.AsyncClient` (what the anthropic package wants) over this wire."""
        import httpx2

        def handler(request: Any) -> Any:
            converted = httpx.Request(
                request.method,
                str(request.url),
                headers=list(request.headers.raw),
                content=request.read(),
            )
            response = self._route(converted)
            if response is None:
                raise httpx2.ConnectError("test wire: refused, not loopback", request=request)
            return httpx2.Response(
                response.status_code,
                headers=list(response.headers.raw),
                content=response.read(),
            )

        return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Refuse any DNS lookup or connect off loopback for the whole test (import it, autouse)."""
    refused = guard_sockets(monkeypatch)
    yield refused
    assert refused == [], f"a test tried to leave loopback: {refused}"
