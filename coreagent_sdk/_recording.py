"""Recording daemon sessions: every event-stream frame with its time, and the session answers.

The invariant: a recording holds what the daemon said and when, and never a
credential. How each rule holds it:

- Recording is a transport wrapper (`SessionRecorder.wrap`), so it works
  under anything that talks HTTP through a transport: `AttachClient`,
  `CallPeer`, a `HubDirectory`, against any daemon, in-process or on the
  network. It changes no request and no byte of any answer.
- Request headers are never recorded. The bearer token (`Authorization` or
  `X-Attach-Token`) of every request, and each configured secret, is replaced
  by `[REDACTED]` wherever it occurs in a recorded string, before the
  recording is stored in memory, so a saved file cannot contain one.
- What is recorded is bounded: JSON answers up to `MAX_BODY_BYTES`, at most
  `max_frames` frames and `max_bytes` of frame data a session (the
  recording then says `truncated`); `clear()` drops what was recorded.
- The file is small, versioned and human-readable: JSON lines, a header
  first (`format`, `version`), then one entry a line with its time in
  seconds since the session was opened (or first seen).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import attrs
import httpx

from ._sse import MAX_EVENT_BYTES, MAX_LINE_BYTES, EventDecoder
from ._wire import event_kind
from .errors import FrameTooLargeError

__all__ = [
    "MAX_BODY_BYTES",
    "RECORDING_FORMAT",
    "RECORDING_VERSION",
    "REDACTED",
    "Recording",
    "RecordingEntry",
    "SessionRecorder",
]

RECORDING_FORMAT = "coreagent-sdk/session-recording"
RECORDING_VERSION = 1
"""The format version written in a recording's header line."""
REDACTED = "[REDACTED]"
MAX_BODY_BYTES = 64 * 1024
DEFAULT_MAX_FRAMES = 10_000
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
_KINDS = frozenset({"session", "inject", "frame"})

# /sessions (create), /sessions/{app}/{sid}/{inject|events} or /sessions/{sid}/{inject|events}
_SESSION_PATH = re.compile(r"^/sessions(?:/([^/]+))?/([^/]+)/(inject|events)$")


@attrs.frozen
class RecordingEntry:
    """One recorded thing: `session` (POST /sessions answer), `inject` or `frame`.

    ``t`` is seconds since the recording started; ``data`` the decoded JSON
    (or the raw text of a frame that was not JSON); ``event`` the frame's
    event type; ``message`` an inject's prompt.
    """

    t: float
    kind: str
    data: Any = None
    event: str | None = None
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": round(self.t, 6), "kind": self.kind}
        if self.event is not None:
            out["event"] = self.event
        if self.message is not None:
            out["message"] = self.message
        out["data"] = self.data
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RecordingEntry:
        kind = d.get("kind")
        t = d.get("t")
        if kind not in _KINDS or isinstance(t, bool) or not isinstance(t, (int, float)):
            raise ValueError(
                f"recording: an entry needs a kind ({', '.join(sorted(_KINDS))}) and a time t, "
                f"got {dict(d)!r:.200}"
            )
        event = d.get("event")
        message = d.get("message")
        return cls(
            t=float(t),
            kind=kind,
            data=d.get("data"),
            event=event if isinstance(event, str) else None,
            message=message if isinstance(message, str) else None,
        )


@attrs.frozen
class Recording:
    """One session as a daemon served it: its entries in order, and where it came from."""

    host: str
    session_id: str
    entries: tuple[RecordingEntry, ...] = ()
    recorded_at: str = ""
    truncated: bool = False

    def header(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": RECORDING_FORMAT,
            "version": RECORDING_VERSION,
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
        lines = [self.header(), *(e.to_dict() for e in self.entries)]
        return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)

    def save(self, path: str | Path) -> Path:
        """Write the JSON-lines file (conventionally `*.jsonl`); returns its path."""
        target = Path(path)
        target.write_text(self.dumps(), encoding="utf-8")
        return target

    @classmethod
    def loads(cls, text: str) -> Recording:
        """Parse JSON-lines text written by `dumps`; an unknown format or version is refused."""
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            raise ValueError("recording: the text is empty; expected a header line first")
        try:
            header = json.loads(lines[0])
        except ValueError as exc:
            raise ValueError(f"recording: the header line is not JSON ({exc})") from None
        if not isinstance(header, dict) or header.get("format") != RECORDING_FORMAT:
            raise ValueError(
                f"recording: not a session recording (format "
                f"{header.get('format') if isinstance(header, dict) else None!r}, expected "
                f"{RECORDING_FORMAT!r}); record one with SessionRecorder"
            )
        if header.get("version") != RECORDING_VERSION:
            raise ValueError(
                f"recording: version {header.get('version')!r} is not supported (this SDK reads "
                f"version {RECORDING_VERSION}); record it again or upgrade coreagent-sdk"
            )
        entries = []
        for number, line in enumerate(lines[1:], start=2):
            try:
                entries.append(RecordingEntry.from_dict(json.loads(line)))
            except (ValueError, AttributeError) as exc:
                raise ValueError(f"recording: line {number} is not an entry: {exc}") from None
        return cls(
            host=str(header.get("host", "")),
            session_id=str(header.get("session_id", "")),
            entries=tuple(entries),
            recorded_at=str(header.get("recorded_at", "")),
            truncated=bool(header.get("truncated", False)),
        )

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        return cls.loads(Path(path).read_text(encoding="utf-8"))


def _scrub(value: Any, secrets: Sequence[str]) -> Any:
    """`value` with every secret replaced in every string (keys included)."""
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {_scrub(k, secrets): _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    return value


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

    def __init__(self, host: str, session_id: str, started: float) -> None:
        self.host = host
        self.session_id = session_id
        self.started = started
        self.recorded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.entries: list[RecordingEntry] = []
        self.frames = 0
        self.bytes = 0
        self.truncated = False

    def snapshot(self) -> Recording:
        return Recording(
            host=self.host,
            session_id=self.session_id,
            entries=tuple(self.entries),
            recorded_at=self.recorded_at.replace("+00:00", "Z"),
            truncated=self.truncated,
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
    carry; ``max_frames`` and ``max_bytes`` (of frame data) bound each
    session's recording. `recordings`
    lists one `Recording` per session, in the order they were first seen.
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
        self._secrets: list[str] = [s for s in secrets if isinstance(s, str) and s]
        self.max_frames = max_frames
        self._sessions: dict[tuple[str, str], _Session] = {}

    def __repr__(self) -> str:
        return f"SessionRecorder(sessions={len(self._sessions)}, secrets={len(self._secrets)})"

    @property
    def recordings(self) -> list[Recording]:
        return [s.snapshot() for s in self._sessions.values()]

    def wrap(self, transport: httpx.AsyncBaseTransport | None = None) -> RecordingTransport:
        """A transport that records through this recorder (None wraps the real network)."""
        return RecordingTransport(transport, self)

    # ------------------------------------------------------------------ intake

    def _learn(self, request: httpx.Request) -> None:
        token = _token_of(request)
        if token and token not in self._secrets:
            self._secrets.append(token)
            self._secrets.sort(key=len, reverse=True)  # a longer secret first: no half-scrubs

    def _session(self, host: str, session_id: str) -> _Session:
        key = (host, session_id)
        found = self._sessions.get(key)
        if found is None:
            found = _Session(host, session_id, time.perf_counter())
            self._sessions[key] = found
        return found

    def clear(self) -> None:
        """Forget every recording so far (a long-lived recorder's memory is its own to bound)."""
        self._sessions.clear()

    def _add(self, session: _Session, entry: RecordingEntry, size: int = 0) -> None:
        if entry.kind == "frame":
            if session.frames >= self.max_frames or session.bytes + size > self.max_bytes:
                session.truncated = True
                return
            session.frames += 1
            session.bytes += size
        session.entries.append(
            attrs.evolve(
                entry,
                t=round(time.perf_counter() - session.started, 6),  # as saved: microseconds
                data=_scrub(entry.data, self._secrets),
                message=_scrub(entry.message, self._secrets),
                event=_scrub(entry.event, self._secrets),  # a server names events too
            )
        )


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


class RecordingTransport(httpx.AsyncBaseTransport):
    """Passes every request to `inner`; tees the session answers and event streams it sees."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None, recorder: SessionRecorder) -> None:
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()
        self._owns_inner = inner is None
        self.recorder = recorder

    def __repr__(self) -> str:
        return f"RecordingTransport({self.inner!r})"

    async def aclose(self) -> None:
        if self._owns_inner:
            await self.inner.aclose()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
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
            sent = _json_or_none(await request.aread())
            message = sent.get("message") if isinstance(sent, dict) else None
        response = await self.inner.handle_async_request(request)
        if response.status_code >= 300 or (
            match is not None
            and request.method
            not in (
                "GET",
                "POST",
            )
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
            data = _json_or_none(b"".join(body)) if size[0] <= MAX_BODY_BYTES else None
            if creating:
                sid = data.get("sessionID") if isinstance(data, dict) else None
                if isinstance(sid, str) and sid:
                    recorder._add(
                        recorder._session(host, sid), RecordingEntry(t=0, kind="session", data=data)
                    )
            elif match is not None:
                recorder._add(
                    recorder._session(host, match.group(2)),
                    RecordingEntry(t=0, kind="inject", data=data, message=message),
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
            raw = text.encode()
            data = _json_or_none(raw)
            self.recorder._add(
                self.session,
                RecordingEntry(
                    t=0,
                    kind="frame",
                    event=event_kind(event),
                    data=data if data is not None else text,
                ),
                size=len(raw),
            )
