"""Reading event streams: a line is bounded, bad frames are skipped."""

from __future__ import annotations

import httpx
import pytest

from coreagent_sdk._attach._sse import iter_frames
from coreagent_sdk._attach._wire import Wake
from coreagent_sdk.errors import FrameTooLargeError


def stream_of(*chunks: bytes) -> httpx.Response:
    async def body():
        for chunk in chunks:
            yield chunk

    return httpx.Response(
        200,
        headers={"content-type": "text/event-stream"},
        content=body(),
        request=httpx.Request("GET", "http://d.test/events"),
    )


async def test_a_line_over_the_bound_stops_the_stream_before_it_is_buffered() -> None:
    endless = [b'event: agent\ndata: {"x": "'] + [b"a" * 1024] * 64  # 64 KiB, no newline
    with pytest.raises(FrameTooLargeError, match="grew past 16384 bytes"):
        async for _ in iter_frames(stream_of(*endless), max_line_bytes=16 * 1024):
            pass


async def test_long_lines_under_the_bound_still_decode() -> None:
    at = "t" * 10_000
    body = b'event: wake\ndata: {"at": "' + at.encode() + b'"}\n\n'
    chunks = [body[i : i + 333] for i in range(0, len(body), 333)]
    frames = [f async for f in iter_frames(stream_of(*chunks), max_line_bytes=16 * 1024)]
    assert frames == [Wake(at=at)]


async def test_frames_split_across_chunks_and_crlf_endings_decode() -> None:
    body = b'event: wake\r\ndata: {"at": "1"}\r\n\r\nevent: wake\ndata: {"at": "2"}\n\n'
    frames = [f async for f in iter_frames(stream_of(*(bytes([b]) for b in body)))]
    assert frames == [Wake(at="1"), Wake(at="2")]


async def test_comments_unknown_events_and_bad_json_are_skipped() -> None:
    body = (
        b": keep-alive\n\nevent: future-thing\ndata: {}\n\n"
        b'event: wake\ndata: not json\n\nevent: wake\ndata: {"at": "ok"}\n\n'
    )
    frames = [f async for f in iter_frames(stream_of(body))]
    assert frames == [Wake(at="ok")]


async def test_an_event_cut_off_by_the_end_of_the_stream_is_discarded() -> None:
    body = b'event: wake\ndata: {"at": "1"}\n\nevent: wake\ndata: {"at": "2"}\n'
    assert [f async for f in iter_frames(stream_of(body))] == [Wake(at="1")]


async def test_a_multibyte_character_split_across_chunks_survives() -> None:
    body = 'event: wake\ndata: {"at": "é€"}\n\n'.encode()
    frames = [f async for f in iter_frames(stream_of(*(bytes([b]) for b in body)))]
    assert frames == [Wake(at="é€")]


# --- the decoder against arbitrary bytes (hypothesis) ------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from coreagent_sdk._attach._sse import EventDecoder  # noqa: E402

_SSE_BYTES = st.lists(
    st.sampled_from(
        [
            b"data: ",
            b"event: agent",
            b"event:x",
            b":c",
            b"\n",
            b"\r",
            b"\r\n",
            b"\n\n",
            b"id: 1",
            b"{}",
            b'{"at":"1"}',
            b"\xef\xbb\xbf",
            b"\xc3\xa9",
            b"\xff",
            b"data",
            b" ",
        ]
    )
    | st.binary(max_size=12),
    max_size=40,
).map(b"".join)


def _decode_all(chunks: list[bytes], limit: int = 1 << 20) -> list[tuple[str, str]]:
    decoder = EventDecoder(limit, limit)
    return [pair for chunk in chunks for pair in decoder.feed(chunk)]


@settings(max_examples=150, deadline=None)
@given(body=_SSE_BYTES, cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=8))
def test_any_bytes_split_anywhere_decode_to_the_same_events(body: bytes, cuts: list[int]) -> None:
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    assert _decode_all(pieces) == _decode_all([body])


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=400), size=st.integers(min_value=1, max_value=50))
def test_any_bytes_decode_or_fail_typed_only_past_the_bound(body: bytes, size: int) -> None:
    decoder = EventDecoder(64, 64)
    fed = 0
    try:
        for i in range(0, len(body), size):
            fed += len(body[i : i + size])
            for _, data in decoder.feed(body[i : i + size]):
                assert len(data.encode()) <= 64
    except FrameTooLargeError:
        assert fed > 64


def _decode_cut(chunks: list[bytes], limit: int) -> list[object]:
    decoder = EventDecoder(limit, limit, cut_oversized=True)
    out: list[object] = []
    try:
        for chunk in chunks:
            out += decoder.feed(chunk)
    except FrameTooLargeError:
        out.append("too large")  # an oversized event whose first bytes are not agent JSON
    return out


@settings(max_examples=150, deadline=None)
@given(
    body=_SSE_BYTES,
    cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=8),
    limit=st.integers(min_value=4, max_value=40),
)
def test_cut_reading_gives_the_same_events_however_the_bytes_are_split(
    body: bytes, cuts: list[int], limit: int
) -> None:
    # With the oversized-event reading on, an event past the bound keeps its two ends;
    # where the chunks split the stream must not change what comes out.
    body += b'event: agent\ndata: {"seq":1,"event":{"Content":{"parts":[{"text":"' + b"q" * 60
    body += b'"}]},"Author":"m"}}\n\n'
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    whole, split = _decode_cut([body], limit), _decode_cut(pieces, limit)
    # An error drops what its chunk had completed, so only the verdict must agree then.
    assert ("too large" in split) == ("too large" in whole)
    if "too large" not in whole:
        assert split == whole
