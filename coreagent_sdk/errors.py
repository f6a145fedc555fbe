"""The exceptions coreagent-sdk raises, all rooted at `CoreAgentError`.

Catch the narrowest class that fits; every message starts with the component
that raised it and says what to do about it::

    CoreAgentError
    ├── ProtocolError                 an answer that does not follow the wire protocol
    │   └── FrameTooLargeError        an SSE line over the 1 MiB bound
    ├── TransportFailure              the request never got an HTTP answer
    │   ├── RequestTimeoutError       (also TimeoutError) the whole-request deadline passed
    │   ├── ASGIAppError              (also httpx.TransportError) an in-process app raised
    │   └── NoRouteError              (also httpx.ConnectError) RoutingTransport has no route
    ├── APIStatusError                a non-2xx answer: .status_code, .body (bounded, scrubbed)
    │   ├── BadRequestError           400
    │   │   └── PayloadTooLargeError  400 "request body too large", or 413
    │   ├── AuthenticationError       401
    │   ├── ForbiddenError            403
    │   ├── NotFoundError             404
    │   ├── ConflictError             409
    │   ├── UnsupportedMediaTypeError 415
    │   ├── RateLimitedError          429 (.retry_after): the caller opens sessions too fast
    │   ├── NotImplementedByServerError 501
    │   └── ServerError               other 5xx
    ├── CallPeerError                 a delegation failed (nothing partial is returned)
    │   ├── InvalidArgumentError      (also ValueError) empty prompt
    │   ├── UnknownPeerError          (also LookupError) name not in the roster
    │   ├── InvalidEndpointError      the peer's endpoint is not absolute http(s) with a host
    │   ├── PermissionDeniedError     the gate refused tool:peer
    │   ├── TokenUnsetError           the token variable is named but unset or empty
    │   ├── InvalidTokenError         (also ValueError) the token cannot go into a header
    │   ├── DirectoryError            the directory could not list peers
    │   ├── PeerRequestError          the peer refused or could not be reached (.status_code)
    │   │   └── PeerRateLimitedError  429 on POST /sessions (.retry_after)
    │   ├── PeerTurnError             the peer's turn failed (.kind, .message, .retryable)
    │   ├── PeerTimeoutError          (also TimeoutError) the call's deadline passed
    │   ├── StreamEndedError          the event stream closed before the turn ended
    │   └── LoopBlockedError          (also RuntimeError) a sync call needs a server on
    │                                 the loop it blocks: await instead
    ├── RegistrationError             PeerRegistration could not join the hub
    ├── AsyncLibraryError             (also RuntimeError) an async call made under trio, not asyncio
    └── RuntimeCacheError
        └── CacheClosedError          the cache was closed while a build was in flight

Tokens never appear in any of these: every message, and every attribute that
holds server text, passes one scrubber as the error is made.
"""

from __future__ import annotations

import httpx

from ._scrub import scrub
from ._traceback import render_for_ipython
from ._unshown import shown_text

__all__ = [
    "APIStatusError",
    "ASGIAppError",
    "AsyncLibraryError",
    "AuthenticationError",
    "BadRequestError",
    "CacheClosedError",
    "CallPeerError",
    "ConflictError",
    "CoreAgentError",
    "DirectoryError",
    "ForbiddenError",
    "FrameTooLargeError",
    "InvalidArgumentError",
    "InvalidEndpointError",
    "InvalidTokenError",
    "LoopBlockedError",
    "NoRouteError",
    "NotFoundError",
    "NotImplementedByServerError",
    "PayloadTooLargeError",
    "PeerRateLimitedError",
    "PeerRequestError",
    "PeerTimeoutError",
    "PeerTurnError",
    "PermissionDeniedError",
    "ProtocolError",
    "RateLimitedError",
    "RegistrationError",
    "RequestTimeoutError",
    "RuntimeCacheError",
    "ServerError",
    "StreamEndedError",
    "TokenUnsetError",
    "TransportFailure",
    "UnknownPeerError",
    "UnsupportedMediaTypeError",
    "status_error_class",
]


class CoreAgentError(Exception):
    """Root of every error this package raises on purpose.

    Every message passes the scrubber on its way in (see `_scrub`): a secret a
    server echoed into it is `[redacted]` whichever layer built the message. Then the
    characters no output carries raw (`_unshown`: terminal controls such as ``ESC[2J``,
    bidi overrides) are shown as escapes: a message quotes what servers said, and it is
    printed to terminals and notebooks. Attributes holding a peer's own words
    (`PeerTurnError.message`) stay as they were sent, scrubbed.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(shown_text(scrub(a)) if isinstance(a, str) else a for a in args))

    def _render_traceback_(self) -> list[str]:
        # IPython's hook: the cell's frames and the message, not the SDK's (see _traceback).
        return render_for_ipython(self)


class ProtocolError(CoreAgentError):
    """The other side answered, but not in the attach protocol's shape."""


class FrameTooLargeError(ProtocolError):
    """An SSE line grew past the bound without a newline (a hostile or broken peer)."""


class TransportFailure(CoreAgentError):
    """The request did not get an HTTP answer at all."""


class RequestTimeoutError(TransportFailure, TimeoutError):
    """The whole request did not finish within its deadline (`timeout=`)."""


class ASGIAppError(TransportFailure, httpx.TransportError):
    """An in-process ASGI app raised instead of answering (see the chained cause)."""

    def __init__(self, message: str) -> None:
        httpx.TransportError.__init__(self, scrub(message))


class NoRouteError(TransportFailure, httpx.ConnectError):
    """`RoutingTransport` has no transport for the request's host."""

    def __init__(self, message: str) -> None:
        httpx.ConnectError.__init__(self, scrub(message))


class APIStatusError(CoreAgentError):
    """A non-2xx answer. `body` is a bounded excerpt with any token scrubbed.

    Attributes:
        status_code: The HTTP status the server answered.
        body: A bounded excerpt of the answer's body, any token scrubbed.
    """

    def __init__(self, message: str, *, status_code: int, body: str = "") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = scrub(body)


class BadRequestError(APIStatusError):
    """400: the request was malformed (empty message, bad endpoint, bad version header)."""


class AuthenticationError(APIStatusError):
    """401: the token is missing or not accepted."""


class ForbiddenError(APIStatusError):
    """403: the caller is known but may not do this (not the owner, not admin)."""


class NotFoundError(APIStatusError):
    """404: unknown session, unknown registration, or no registry on this daemon."""


class ConflictError(APIStatusError):
    """409: for example a protocol major version the daemon does not speak."""


class PayloadTooLargeError(BadRequestError):
    """The body is over the daemon's cap (8 KiB inject, 16 KiB register).

    A core-agent daemon says so with 400 `request body too large (max N bytes)`
    (Go's `http.MaxBytesReader`), so this is a `BadRequestError`; a 413 from a
    proxy in front of it is one too.
    """


class UnsupportedMediaTypeError(APIStatusError):
    """415: a write without `Content-Type: application/json`."""


class RateLimitedError(APIStatusError):
    """429: the daemon limits how fast one caller opens sessions.

    `retry_after` is the server's `Retry-After` in seconds (None when it sent
    none that parses).

    Attributes:
        retry_after: Seconds the server asked to wait (None when it sent none that parses).
    """

    def __init__(
        self, message: str, *, status_code: int, body: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message, status_code=status_code, body=body)
        self.retry_after = retry_after


class NotImplementedByServerError(APIStatusError):
    """501: the daemon lacks the feature (e.g. multi-session is off)."""


class ServerError(APIStatusError):
    """Any other 5xx."""


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    415: UnsupportedMediaTypeError,
    429: RateLimitedError,
    501: NotImplementedByServerError,
}


def status_error_class(status_code: int) -> type[APIStatusError]:
    """The most specific `APIStatusError` subclass for an HTTP status."""
    found = _BY_STATUS.get(status_code)
    if found is not None:
        return found
    return ServerError if status_code >= 500 else APIStatusError


class CallPeerError(CoreAgentError):
    """A delegation through `CallPeer` failed; no partial answer is returned.

    `retry_safe` says whether calling again cannot run the task twice: True
    when the prompt never reached the peer (refused before any request, no
    session, a 429, a timeout before the inject), False when the peer may have
    started the turn (the inject was sent, whatever came back). It says
    nothing about whether a retry would succeed: see the web-service guide.

    Attributes:
        retry_safe: True when the prompt cannot have reached the peer.
    """

    retry_safe: bool = True


class InvalidArgumentError(CallPeerError, ValueError):
    """An argument is unusable (for example an empty prompt); nothing was sent."""


class UnknownPeerError(CallPeerError, LookupError):
    """The name is not in the directory's roster; the message lists the roster.

    `names` holds the roster's names (sorted; only those the gate allows; all
    of them, where the message lists the first 50), so an app can show its own
    text instead of `str(error)`, which names every peer.

    Attributes:
        names: The roster's names the gate allows, sorted.
    """

    def __init__(self, message: str, *, names: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.names = tuple(names)


class InvalidEndpointError(CallPeerError):
    """The peer's endpoint is not an absolute http(s) URL with a host; not dialed."""


class PermissionDeniedError(CallPeerError):
    """The gate refused `<tool name>:<peer name>`; raised by gates such as `AllowList`."""


class TokenUnsetError(CallPeerError):
    """The token environment variable is named but unset or empty."""


class InvalidTokenError(CallPeerError, ValueError):
    """The token holds a character no HTTP header may carry; the value is never shown."""


class LoopBlockedError(CallPeerError, RuntimeError):
    """A sync call would need a server that runs on the very loop the call blocks.

    A sync call made inside a running loop (a notebook cell) waits on that loop
    (see `coreagent_sdk.jupyter.run_sync`), so a server on that loop, such as
    a fleet the same notebook serves, cannot answer it. Nothing was sent.
    ``await`` the async form there, or opt in to re-entering the loop with
    `coreagent_sdk.jupyter.enable_nested_sync()`.
    """


class DirectoryError(CallPeerError):
    """The directory could not produce its roster (hub down, bad answer).

    `status_code` is the hub's HTTP status when it answered one, else None.

    Attributes:
        status_code: The hub's HTTP status when it answered one, else None.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class PeerRequestError(CallPeerError):
    """The peer refused a request (`status_code`) or could not be reached (None).

    Attributes:
        status_code: The peer's HTTP status, or None when it could not be reached.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class PeerRateLimitedError(PeerRequestError):
    """The peer answered 429 to `POST /sessions`: too many delegations to it too fast.

    `retry_after` is the peer's `Retry-After` in seconds (None when absent).

    Attributes:
        retry_after: Seconds the peer asked to wait (None when absent).
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, status_code=429)
        self.retry_after = retry_after


class PeerTurnError(CallPeerError):
    """The peer's turn ended with a `turn-error` event (`retry_safe` is False: it ran).

    `kind` is one of `coreagent_sdk.TURN_ERROR_KINDS` (`config_error`,
    `auth_error`, `model_not_found`, `rate_limited`, `transient_network`,
    `cost_ceiling`, `watchdog`, `canceled`, `unknown`): a kind the SDK does not
    know (a newer daemon's, or a misspelt one) becomes `"unknown"`, so code can
    match on the set without a default case. `retryable` is the peer's own verdict
    on whether the failure is passing.

    Attributes:
        kind: One of `TURN_ERROR_KINDS`; "unknown" for a kind the SDK does not know.
        message: The peer's own words (scrubbed); `str(error)` adds the peer and session.
        retryable: Whether the peer says trying again may work.
        code: The peer's error code, when it sent one.
        hint: The peer's hint on what to do, when it sent one.
        session_id: The peer's session the turn ran in.
        retry_safe: False: the turn ran, so a retry may run the task twice.
    """

    retry_safe = False

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        peer_message: str,
        retryable: bool,
        code: str | None = None,
        hint: str | None = None,
        session_id: str = "",
    ) -> None:
        super().__init__(message)
        self.kind = kind
        # `message` is the peer's own words; str(error) adds the peer and session.
        self.message = scrub(peer_message)
        self.retryable = retryable
        self.code = code if code is None else scrub(code)
        self.hint = hint if hint is None else scrub(hint)
        self.session_id = session_id


class PeerTimeoutError(CallPeerError, TimeoutError):
    """The call's single wall-clock deadline passed before the turn ended."""


class StreamEndedError(CallPeerError):
    """The peer closed the event stream before its turn ended (the turn may have run).

    Attributes:
        retry_safe: False: the prompt was sent, so a retry may run the task twice.
    """

    retry_safe = False


class AsyncLibraryError(CoreAgentError, RuntimeError):
    """An async call ran under another async library (trio): coreagent-sdk needs asyncio.

    The message names the library that runs and the fix (with anyio's pytest
    plugin: an ``anyio_backend`` fixture returning ``"asyncio"``).
    """


class RegistrationError(CoreAgentError):
    """`PeerRegistration` could not register with the hub."""


class RuntimeCacheError(CoreAgentError):
    """Base of the runtime cache's own errors (builder errors propagate unchanged)."""


class CacheClosedError(RuntimeCacheError):
    """`aclose()` ran while this build was in flight; the instance built was closed."""
