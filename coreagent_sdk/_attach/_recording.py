"""Recording daemon sessions: every event-stream frame with its time, and the session answers.

The invariant: a recording holds what the daemon said and when, never a
credential, and never more memory than it was allowed. How each rule holds it:

- Recording is a transport wrapper (`SessionRecorder.wrap`), so it works
  under anything that talks HTTP through a transport: `AttachClient`,
  `CallPeer`, a `HubDirectory`, against any daemon, in-process or on the
  network. It changes no request and no byte of any answer, and nothing a
  server sends makes it raise into the caller's read.
- Request headers are never recorded. The bearer token of every request and
  each configured secret are registered with the SDK's one scrubber
  (`_scrub`), and every string kept (the header's host, peer and session id,
  every entry's data, JSON keys included, its event name and message) passes
  `scrub` before it is kept in memory: the same spellings, the same
  `[redacted]` marker as every error, result and event of the SDK.
- What is kept is bounded in memory, not in wire bytes: each entry is charged
  an upper bound of what its decoded JSON takes (see `charge`) *before* it is
  decoded, and an entry whose charge would take a session past `max_bytes` is
  not decoded nor kept (the recording then says `truncated`), so the held
  memory stays under the bound and one frame's decoding under what it had
  left. `max_frames` bounds the frames; `clear()` drops what was recorded.
- JSON nested deeper than `MAX_DEPTH` is kept as its text, so every later
  step (saving, loading, replaying) handles what was kept without recursing.
- The file is small, versioned and human-readable: JSON lines, a header
  first (`format`, `version`, where it came from), then one entry a line
  with its time in seconds since the session was opened (or first seen).
  Loading refuses anything else with a `ValueError` that starts
  `recording:`, names the line and says what to do.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import re
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import attrs
import httpx

from .._scrub import REDACTED, register, scrub
from ..errors import FrameTooLargeError
from ._sse import MAX_EVENT_BYTES, MAX_LINE_BYTES, EventDecoder
from ._wire import event_kind

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "RECORDING_FORMAT",
    "RECORDING_VERSION",
    "REDACTED",
    "Recording",
    "RecordingEntry",
    "SessionRecorder",
    "charge",
    "recording_peer",
]

RECORDING_FORMAT = "coreagent-sdk/session-recording"
RECORDING_VERSION = 1
"""The format version written in a recording's header line."""
MAX_BODY_BYTES = 64 * 1024
MAX_DEPTH = 256
"""JSON nested deeper than this is kept as its text (and refused in a file)."""
DEFAULT_MAX_FRAMES = 10_000
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
_KINDS = frozenset({"session", "inject", "frame"})
# What one kept entry costs beside its data: the entry object, its time, its strings.
_ENTRY_BYTES = 256
# An upper bound of what one JSON value costs decoded, beyond its characters: each
# `{ [ , :` starts at most one object, list slot, key or value, none over this much
# (measured: an empty dict in a list is 72 bytes, a one-key dict about 190 for 3).
_PER_TOKEN = 96
_HEADER_KEYS = ("host", "peer", "session_id", "recorded_at")

# /sessions (create), /sessions/{app}/{sid}/{inject|events} or /sessions/{sid}/{inject|events}
_SESSION_PATH = re.compile(r"^/sessions(?:/([^/]+))?/([^/]+)/(inject|events)$")
# Brackets outside strings, for the nesting depth of a JSON text.
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')

_peer: contextvars.ContextVar[str] = contextvars.ContextVar("coreagent_recording_peer", default="")


@contextlib.contextmanager
def recording_peer(name: str) -> Iterator[None]:
    """Name the peer the enclosed requests go to, for the recordings they make."""
    token = _peer.set(name)
    try:
        yield
    finally:
        _peer.reset(token)


def charge(text: str) -> int:
    """The memory one kept entry of JSON (or plain) `text` is charged: an upper bound.

    Its UTF-8 length (four times that when it holds a character past ASCII or a
    `\\u` escape: one such character makes Python store every character of
    its string in four bytes), plus `_PER_TOKEN` for each `{`, `[`, `,` and
    `:`, plus `_ENTRY_BYTES` for the entry itself. Computed from the text
    alone, before anything is decoded.
    """
    raw = text.encode("utf-8", "surrogatepass")
    factor = 1 if raw.isascii() and b"\\u" not in raw else 4
    tokens = raw.count(b"{") + raw.count(b"[") + raw.count(b",") + raw.count(b":")
    return _ENTRY_BYTES + factor * len(raw) + _PER_TOKEN * (tokens + 1)


def _depth(text: str) -> int:
    """How deep the JSON `text` nests (brackets inside strings do not count)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0  # cannot nest deeper than the bound: the common case, in C
    depth = deepest = 0
    for char in _STRINGS.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _scrubbed(value: Any) -> Any:
    """`value` with every string (keys included) passed through the scrubber; no recursion."""
    if isinstance(value, str):
        return scrub(value)
    if not isinstance(value, (dict, list)):
        return value
    root: list[Any] = [value]
    todo: list[tuple[Any, Any]] = [(root, 0)]
    while todo:
        parent, key = todo.pop()
        item = parent[key]
        if isinstance(item, str):
            parent[key] = scrub(item)
        elif isinstance(item, list):
            todo += [(item, i) for i in range(len(item))]
        elif isinstance(item, dict):
            if any(isinstance(k, str) and scrub(k) != k for k in item):
                fresh = {scrub(k): v for k, v in item.items()}
                item.clear()
                item.update(fresh)
            todo += [(item, k) for k in item]
    return root[0]


def _decoded(text: str) -> tuple[Any, bool]:
    """(the scrubbed JSON value of `text`, True), or (`text` scrubbed, False) if it is not JSON.

    Not JSON: what `json.loads` refuses (a RecursionError included) and what
    nests deeper than `MAX_DEPTH`. The value is decoded here, and scrubbed in
    place, only when a secret may be in it: the text scrubbed as written
    (escapes normalised) must differ, or hold a backslash escape.
    """
    if _depth(text) > MAX_DEPTH:
        return scrub(text), False
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return scrub(text), False
    if "\\" not in text:
        if scrub(text) == text:
            return value, True  # no escapes: every string is in the text as written
    else:
        try:
            # Escapes normalised, every string as the scrubber's JSON spelling has it.
            written = json.dumps(value)
        except (ValueError, RecursionError):
            return scrub(text), False
        if scrub(written) == written:
            return value, True
    return _scrubbed(value), True


@attrs.frozen
class RecordingEntry:
    """One recorded thing: `session` (POST /sessions answer), `inject` or `frame`.

    ``t`` is seconds since the recording started; ``data`` the decoded JSON
    (or the raw text of a frame that was not JSON); ``event`` the frame's
    event type; ``message`` an inject's prompt.

    Attributes:
        t: Seconds since the recording started.
        kind: session, inject or frame.
        data: The decoded JSON (or a frame's raw text when it was not JSON).
        event: A frame's event type.
        message: An inject's prompt.
    """

    t: float
    kind: str
    data: Any = None
    event: str | None = None
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The entry as one line of a recording file (JSON-ready)."""
        out: dict[str, Any] = {"t": round(self.t, 6), "kind": self.kind}
        if self.event is not None:
            out["event"] = self.event
        if self.message is not None:
            out["message"] = self.message
        out["data"] = self.data
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RecordingEntry:
        """An entry from its JSON object; ValueError (starting `recording:`) if it is not one."""
        if not isinstance(d, Mapping):
            raise ValueError(
                f"recording: an entry is a JSON object, got {type(d).__name__}; "
                "each line after the header holds one entry"
            )
        kind, t = d.get("kind"), d.get("t")
        if not isinstance(kind, str) or kind not in _KINDS:
            raise ValueError(
                f"recording: an entry's kind must be one of {', '.join(sorted(_KINDS))}, "
                f"got {_shown(kind)}"
            )
        seconds = _seconds(t)
        if seconds is None:
            raise ValueError(
                f"recording: an entry's time t must be a finite number of seconds >= 0, "
                f"got {_shown(t)}"
            )
        event, message = d.get("event"), d.get("message")
        for name, value in (("event", event), ("message", message)):
            if value is not None and not isinstance(value, str):
                raise ValueError(
                    f"recording: an entry's {name} must be a string, got {_shown(value)}"
                )
        return cls(t=seconds, kind=kind, data=d.get("data"), event=event, message=message)


def _shown(value: Any) -> str:
    """`value` for a message: its type and a bounded repr (never a whole hostile value)."""
    text = repr(value) if isinstance(value, (str, int, float, bool, type(None))) else ""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**20:
        text = f"an int of {len(str(abs(value)))} digits"
    elif len(text) > 80:
        text = text[:77] + "..."
    return text or type(value).__name__


def _seconds(t: Any) -> float | None:
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return None
    try:
        seconds = float(t)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _line(number: int, line: str) -> Any:
    """Line `number` of a recording, decoded; ValueError naming it if it is not JSON."""
    if _depth(line) > MAX_DEPTH + 2:  # the entry and its data add two levels
        raise ValueError(
            f"recording: line {number} nests deeper than {MAX_DEPTH + 2} levels, which no "
            "recording holds; the file was not written by SessionRecorder: record it again"
        )
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ValueError(
            f"recording: line {number} is not JSON ({str(exc)[:120]}); the file is damaged "
            "or not a recording: record the session again"
        ) from None


@attrs.frozen
class Recording:
    """One session as a daemon served it: its entries in order, and where it came from.

    ``host`` is the daemon's address as dialed; ``peer`` the name the call
    used for it (`CallPeer` says it; empty for a direct `AttachClient`).

    Attributes:
        host: The daemon's address as dialed.
        session_id: The recorded session's id.
        entries: What was recorded, in order.
        recorded_at: When the recording started (ISO 8601, UTC).
        truncated: True when a bound (frames, bytes, one event's size) cut it short.
        peer: The name the call used for the daemon ("" for a direct `AttachClient`).
    """

    host: str
    session_id: str
    entries: tuple[RecordingEntry, ...] = ()
    recorded_at: str = ""
    truncated: bool = False
    peer: str = attrs.field(default="", kw_only=True)

    def header(self) -> dict[str, Any]:
        """The first line of a recording file: format, version and where it came from."""
        out: dict[str, Any] = {
            "format": RECORDING_FORMAT,
            "version": RECORDING_VERSION,
            "peer": self.peer,
            "host": self.host,
            "session_id": self.session_id,
            "recorded_at": self.recorded_at,
        }
        if self.truncated:
            out["truncated"] = True
        return out

    def frames(self) -> list[RecordingEntry]:
        """The event-stream frames, in the order they arrived."""
        return [e for e in self.entries if e.kind == "frame"]

    def dumps(self) -> str:
        """The JSON-lines text: the header, then one entry a line."""
        return "".join(self._lines())

    def _lines(self) -> Iterator[str]:
        # ensure_ascii=False writes U+2028 and friends raw: lines split on "\n" only.
        for line in (self.header(), *(e.to_dict() for e in self.entries)):
            yield json.dumps(line, ensure_ascii=False) + "\n"

    def save(self, path: str | Path) -> Path:
        """Write the JSON-lines file (conventionally `*.jsonl`) line by line; returns its path."""
        target = Path(path)
        with target.open("w", encoding="utf-8", newline="\n") as out:
            out.writelines(self._lines())
        return target

    @classmethod
    def loads(cls, text: str) -> Recording:
        """Parse JSON-lines text written by `dumps`; anything else is a `ValueError`.

        Its message starts `recording:`, names the line and says what to do.
        """
        numbered = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
        if not numbered:
            raise ValueError("recording: the text is empty; expected a header line first")
        number, first = numbered[0]
        header = _line(number, first)
        if not isinstance(header, dict) or header.get("format") != RECORDING_FORMAT:
            found = header.get("format") if isinstance(header, dict) else None
            raise ValueError(
                f"recording: line {number} is not a session recording's header (format "
                f"{_shown(found)}, expected {RECORDING_FORMAT!r}); record one with "
                "SessionRecorder"
            )
        version = header.get("version")
        if version != RECORDING_VERSION or isinstance(version, bool):
            raise ValueError(
                f"recording: version {_shown(version)} is not supported (this SDK reads "
                f"version {RECORDING_VERSION}); record it again or upgrade coreagent-sdk"
            )
        for key in _HEADER_KEYS:
            if not isinstance(header.get(key, ""), str):
                raise ValueError(
                    f"recording: line {number}, the header's {key} must be a string, got "
                    f"{_shown(header[key])}; the file is damaged: record the session again"
                )
        entries = []
        for number, line in numbered[1:]:
            try:
                entries.append(RecordingEntry.from_dict(_line(number, line)))
            except ValueError as exc:
                said = str(exc).removeprefix("recording: ")
                if said.startswith(f"line {number} "):
                    raise
                raise ValueError(
                    f"recording: line {number} is not an entry: {said}; the file is damaged: "
                    "record the session again"
                ) from None
        return cls(
            host=header.get("host", ""),
            session_id=header.get("session_id", ""),
            entries=tuple(entries),
            recorded_at=header.get("recorded_at", ""),
            truncated=header.get("truncated", False) is True,
            peer=header.get("peer", ""),
        )

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        """Read a recording file; a file that is not one is a `ValueError` that says why."""
        raw = Path(path).read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            compressed = raw[:2] == b"\x1f\x8b"
            line = raw[: exc.start].count(b"\n") + 1
            raise ValueError(
                f"recording: {Path(path).name} is not UTF-8 text (line {line}, byte "
                f"{exc.start})"
                + (
                    "; it is gzip-compressed: decompress it first (gunzip)"
                    if compressed
                    else "; a recording is JSON lines written by Recording.save: record it again"
                )
            ) from None
        return cls.loads(text)


def _token_of(request: httpx.Request) -> str | None:
    token: str = request.headers.get("x-attach-token", "")
    if token:
        return token.strip() or None
    auth: str = request.headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


class _Session:
    """What the recorder knows of one session so far."""

    def __init__(self, host: str, session_id: str, peer: str, started: float) -> None:
        self.host = host
        self.session_id = session_id
        self.peer = peer
        self.started = started
        self.recorded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.entries: list[RecordingEntry] = []
        self.frames = 0
        self.held = 0  # bytes charged for the entries kept (see `charge`)
        self.truncated = False

    def snapshot(self) -> Recording:
        return Recording(
            host=self.host,
            session_id=self.session_id,
            entries=tuple(self.entries),
            recorded_at=self.recorded_at.replace("+00:00", "Z"),
            truncated=self.truncated,
            peer=self.peer,
        )


class _Tee(httpx.AsyncByteStream):
    """The response body, passed through unchanged, shown to `feed` chunk by chunk."""

    def __init__(self, inner: Any, feed: Any, done: Any = None) -> None:
        self._inner = inner
        self._feed = feed
        self._done = done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._feed(chunk)
            yield chunk
        if self._done is not None:
            self._done()
            self._done = None

    async def aclose(self) -> None:
        await self._inner.aclose()


class SessionRecorder:
    """Records the sessions that requests through `wrap(transport)` open, inject and read.

    ``secrets`` are strings to scrub beside the bearer tokens the requests
    carry (registered with the SDK's scrubber, so they are scrubbed from its
    errors, events and results too). ``max_frames`` bounds each session's
    frames, ``max_bytes`` the memory its kept entries take (each charged an
    upper bound of its decoded size before it is decoded; see `held_bytes`).
    `recordings` lists one `Recording` per session, in the order first seen.

    Attributes:
        max_frames: The most frames kept per session.
        max_bytes: The most memory one session's kept entries may take.
        recordings: One `Recording` per session, in the order first seen.
    """

    def __init__(
        self,
        *,
        secrets: Iterable[str] = (),
        max_frames: int = DEFAULT_MAX_FRAMES,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        for name, value in (("max_frames", max_frames), ("max_bytes", max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"recording: {name} must be a positive int, got {value!r}")
        self.max_bytes = max_bytes
        self.max_frames = max_frames
        self._secrets = 0
        for secret in secrets:
            if isinstance(secret, str) and secret:
                register(secret)
                self._secrets += 1
        self._learned: set[str] = set()
        self._sessions: dict[tuple[str, str], _Session] = {}

    def __repr__(self) -> str:
        return (
            f"SessionRecorder(sessions={len(self._sessions)}, "
            f"secrets={self._secrets + len(self._learned)}, held_bytes={self.held_bytes})"
        )

    @property
    def recordings(self) -> list[Recording]:
        return [s.snapshot() for s in self._sessions.values()]

    @property
    def held_bytes(self) -> int:
        """The memory charged for every entry kept now, of all sessions (see `charge`)."""
        return sum(s.held for s in self._sessions.values())

    def wrap(self, transport: httpx.AsyncBaseTransport | None = None) -> RecordingTransport:
        """A transport that records through this recorder (None wraps the real network)."""
        return RecordingTransport(transport, self)

    # ------------------------------------------------------------------ intake

    def _learn(self, request: httpx.Request) -> None:
        token = _token_of(request)
        if token and token not in self._learned:
            self._learned.add(token)
            register(token)

    def _session(self, host: str, session_id: str) -> _Session:
        host, session_id = scrub(host), scrub(session_id)
        key = (host, session_id)
        found = self._sessions.get(key)
        if found is None:
            found = _Session(host, session_id, scrub(_peer.get()), time.perf_counter())
            self._sessions[key] = found
        return found

    def clear(self) -> None:
        """Forget every recording so far (a long-lived recorder's memory is its own to bound)."""
        self._sessions.clear()

    def _add(
        self,
        session: _Session,
        kind: str,
        text: str | None,
        *,
        event: str | None = None,
        message: str | None = None,
    ) -> None:
        """Keep one entry of JSON (or plain) `text`, if it fits the session's bounds."""
        if session.truncated:
            return  # over a bound: nothing after it is kept either
        if kind == "frame" and session.frames >= self.max_frames:
            session.truncated = True
            return
        cost = charge((text or "") + (message or "") + (event or ""))
        # The bound holds after this entry is added: it is kept only if all still fits.
        if session.held + cost > self.max_bytes:
            session.truncated = True
            return
        data, _ = _decoded(text) if text is not None else (None, False)
        session.held += cost
        if kind == "frame":
            session.frames += 1
        session.entries.append(
            RecordingEntry(
                t=round(time.perf_counter() - session.started, 6),  # as saved: microseconds
                kind=kind,
                data=data,
                event=None if event is None else scrub(event),  # a server names events too
                message=None if message is None else scrub(message),
            )
        )


def _text(body: bytes) -> str:
    return body.decode("utf-8", "replace")


class RecordingTransport(httpx.AsyncBaseTransport):
    """Passes every request to `inner`; tees the session answers and event streams it sees.

    Attributes:
        inner: The transport requests go through (the real network when none was given).
        recorder: The `SessionRecorder` that keeps what it sees.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport | None, recorder: SessionRecorder) -> None:
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()
        self._owns_inner = inner is None
        self.recorder = recorder

    def __repr__(self) -> str:
        return f"RecordingTransport({self.inner!r})"

    async def aclose(self) -> None:
        """Close the inner transport when this one made it."""
        if self._owns_inner:
            await self.inner.aclose()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through `inner`, recording session answers and event streams."""
        path = request.url.path
        creating = request.method == "POST" and path.rstrip("/") == "/sessions"
        match = _SESSION_PATH.match(path)
        if not creating and match is None:
            return await self.inner.handle_async_request(request)
        recorder = self.recorder
        recorder._learn(request)
        host = request.url.netloc.decode("ascii", "replace")
        message: str | None = None
        if match is not None and match.group(3) == "inject" and request.method == "POST":
            sent, _ = _decoded(_text(await request.aread()))
            message = sent.get("message") if isinstance(sent, dict) else None
            message = message if isinstance(message, str) else None
        response = await self.inner.handle_async_request(request)
        if response.status_code >= 300 or (
            match is not None and request.method not in ("GET", "POST")
        ):
            return response
        if match is not None and match.group(3) == "events":
            if "content-encoding" in response.headers:
                return response  # a compressed stream is passed on, not decoded here
            session = recorder._session(host, match.group(2))
            return self._rewrap(response, request, _FrameFeed(recorder, session).feed, None)
        body: list[bytes] = []
        size = [0]

        def feed(chunk: bytes) -> None:
            if size[0] <= MAX_BODY_BYTES:
                body.append(chunk)
                size[0] += len(chunk)

        def done() -> None:
            if size[0] > MAX_BODY_BYTES:
                text = None
            else:
                text = _text(b"".join(body))
                body.clear()
            if creating:
                data, _ = _decoded(text) if text is not None else (None, False)
                sid = data.get("sessionID") if isinstance(data, dict) else None
                if isinstance(sid, str) and sid:
                    recorder._add(recorder._session(host, sid), "session", text)
            elif match is not None:
                recorder._add(
                    recorder._session(host, match.group(2)), "inject", text, message=message
                )

        return self._rewrap(response, request, feed, done)

    @staticmethod
    def _rewrap(
        response: httpx.Response, request: httpx.Request, feed: Any, done: Any
    ) -> httpx.Response:
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, feed, done),
            extensions=response.extensions,
            request=request,
        )


class _FrameFeed:
    """Decodes a teed event stream into frames with the SDK's own bounded decoder."""

    def __init__(self, recorder: SessionRecorder, session: _Session) -> None:
        self.recorder = recorder
        self.session = session
        self.events = EventDecoder(MAX_EVENT_BYTES, MAX_LINE_BYTES, session.host)

    def feed(self, chunk: bytes) -> None:
        if self.session.truncated:
            return  # over a bound: the rest passes through unread
        try:
            decoded = self.events.feed(chunk)
        except FrameTooLargeError:
            # A frame past the reader's own bound is not buffered to be recorded either.
            self.session.truncated = True
            return
        for item in decoded:
            if not isinstance(item, tuple):
                continue  # a cut oversized event: only asked for with cut_oversized
            event, text = item
            self.recorder._add(self.session, "frame", text, event=event_kind(event))
