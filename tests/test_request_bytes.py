"""A small request written as one piece of bytes: the bytes h11 writes, or h11 writes them."""

from __future__ import annotations

import asyncio
import contextlib

import h11
import httpx
import pytest

from coreagent_sdk._http._network import NetworkTransport
from coreagent_sdk._http._request_bytes import request_bytes

from .no_content import answer_no_content, loopback_server

URL = "http://127.0.0.1:9/sessions/s-1/inject"  # never dialed: bytes are compared in memory


def _by_h11(request: httpx.Request) -> bytes:
    h = h11.Connection(h11.CLIENT)
    out = h.send(
        h11.Request(method=request.method, target=request.url.raw_path, headers=request.headers.raw)
    )
    for chunk in request.stream:  # type: ignore[union-attr]
        if chunk:
            out += h.send(h11.Data(data=chunk))
    return out + h.send(h11.EndOfMessage())


_CLIENT = httpx.Client()


@pytest.mark.parametrize(
    "request_",
    [
        _CLIENT.build_request("POST", URL, content=b'{"message": "hi"}', headers={"A": "b c"}),
        _CLIENT.build_request("POST", URL, content=b""),
        _CLIENT.build_request("GET", URL, headers={"Accept": "text/event-stream"}),
        _CLIENT.build_request("DELETE", URL, content=b""),
        _CLIENT.build_request("HEAD", URL),
        _CLIENT.build_request("GET", URL, headers={b"X": b"obs-text \xe9 \x01"}),
    ],
    ids=["post", "empty-post", "get", "delete", "head", "obs-text value"],
)
def test_a_small_request_is_the_bytes_h11_writes_and_h11_reads_its_answer_alike(
    request_: httpx.Request,
) -> None:
    mine = h11.Connection(h11.CLIENT)
    assert request_bytes(mine, request_) == _by_h11(request_)
    assert mine.our_state is h11.DONE
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    mine.receive_data(answer)
    first = mine.next_event()
    assert isinstance(first, h11.Response)
    if request_.method == "HEAD":  # the method reached h11: a HEAD's answer has no body
        assert isinstance(mine.next_event(), h11.EndOfMessage)
    else:
        assert isinstance(mine.next_event(), h11.Data)


@pytest.mark.parametrize(
    "headers",
    [
        {"X": "a\r\nInjected: 1"},
        {"X": "a\nb"},
        {"X": "nul\x00"},
        {"X": " edge"},
        {"Bad Name": "v"},
        {"Transfer-Encoding": "chunked"},
        {"Content-Length": "3"},
    ],
)
def test_a_request_h11_would_refuse_or_frame_itself_is_left_to_h11(headers: dict[str, str]) -> None:
    request = _CLIENT.build_request("POST", URL, content=b"{}", headers=headers)
    h = h11.Connection(h11.CLIENT)
    assert request_bytes(h, request) is None
    assert h.our_state is h11.IDLE  # told nothing: h11 writes (or refuses) it from the start


async def test_a_header_carrying_a_line_break_is_refused_and_nothing_is_sent() -> None:
    received: list[bytes] = []

    async def listen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            received.append(await reader.read(65536))
        writer.close()

    async with (
        loopback_server(listen) as base,
        httpx.AsyncClient(transport=NetworkTransport(), trust_env=False) as http,
    ):
        with pytest.raises(httpx.LocalProtocolError):
            await http.post(f"{base}/x", content=b"{}", headers={"X": "a\r\nInjected: yes"})
    assert b"Injected" not in b"".join(received)


async def test_a_request_saying_connection_close_leaves_its_connection_unpooled() -> None:
    transport = NetworkTransport()
    async with (
        loopback_server(answer_no_content) as base,
        httpx.AsyncClient(transport=transport, trust_env=False) as http,
    ):
        url = f"{base}/x"
        assert (await http.get(url, headers={"Connection": "close"})).status_code == 204
        assert (await http.get(url)).status_code == 204
        assert (await http.get(url)).status_code == 204
    assert transport.dialed == 2  # the first closed after its answer; the next two share one
