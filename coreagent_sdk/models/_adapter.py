"""What the vendor adapters share: the lazy import, the key, error mapping, hostile JSON.

Properties held by construction, for every adapter:

- The vendor package is imported when an adapter is built, never when
  `coreagent_sdk.models` is: a plain install has neither SDK.
- An API key is read from an environment variable (never taken as an
  argument, so it cannot end up in a notebook cell or a repr) and registered
  with the scrubber before the first request, so a server that echoes it in a
  body, a header or a reason phrase cannot put it into an error or a log line.
- A failure becomes a `ModelError` raised *outside* the vendor exception's
  `except` block: the vendor's exception (whose attributes hold the raw
  response, echoed key and all) is never chained to it as a cause or context.
- A 2xx answer is read as untrusted JSON, every field type-checked, so a
  server answering nonsense gives a `ModelError` naming the field, not an
  AttributeError deep in the loop; the body is scrubbed before it is
  decoded, so a key echoed into the model's text is redacted there too.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from .._attach._surrogates import replace_surrogates
from .._http._deadline import within
from .._scrub import register, scrub, server_text
from ._bounded import BodyTooLarge, BrokenOff, bounding, install, read_body, unbounding
from ._protocol import ModelError, ModelReply, ToolCall, token_count

__all__ = [
    "MAX_RESPONSE_BYTES",
    "Shape",
    "VendorClient",
    "arguments_call",
    "ask",
    "check_reply",
    "connection_failure",
    "call_arguments",
    "decode_answer",
    "given_timeout",
    "load_package",
    "read_key",
    "refuse_streaming",
    "status_failure",
]

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""The largest answer body an adapter reads into a reply (8 MiB), by default."""

# How much of a server's own error message goes into ours: enough to say what
# the vendor objected to, not a page of HTML from a proxy.
_SERVER_MESSAGE_LIMIT = 300


def load_package(package: str, *, component: str, extra: str) -> ModuleType:
    """Import the vendor SDK, or ImportError naming the extra that installs it."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise ImportError(
            f"{component}: needs the {package!r} package, which is not installed; "
            f"install it with: pip install 'coreagent-sdk[{extra}]'"
        ) from exc


def read_key(env: str, *, component: str) -> str:
    """The API key in environment variable `env`, registered with the scrubber."""
    key = os.environ.get(env, "")
    if not key.strip():
        raise ModelError(
            f"{component}: the environment variable {env!r} that should hold the API key is "
            f"unset or empty; set it (export {env}=...), name another with api_key_env=..., "
            "pass api_key_env=None for a local server that needs no key, or pass your own "
            "configured client=",
            kind="config_error",
            retryable=False,
        )
    register(key)
    return key


def _server_message(body: object, fallback: bytes | str) -> str:
    """The vendor's own words about a failure, scrubbed and cut short."""
    detail: object = None
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            detail = error.get("message")
        elif isinstance(error, str):
            detail = error
    text = detail if isinstance(detail, str) and detail else fallback
    shown, cut = server_text(text, _SERVER_MESSAGE_LIMIT)
    return repr(shown + ("..." if cut else ""))


def status_failure(
    component: str,
    *,
    status: int,
    body: object,
    raw: bytes | str,
    model: str,
    where: str,
    key_env: str | None,
) -> ModelError:
    """A non-2xx answer as a `ModelError` of the daemon's turn-error kinds.

    429 is `rate_limited` (retryable), 401/403 `auth_error`, 404
    `model_not_found`, 5xx `transient_network` (retryable), 400
    `config_error`, anything else `unknown`.
    """
    said = _server_message(body, raw)
    head = f"{component}: {where} answered HTTP {status} for model {model!r}: {said}"
    key = f"the key in ${key_env}" if key_env else "the client's key"
    if status == 429:
        return ModelError(
            f"{head}; rate limited: wait and try again, or lower the request rate",
            kind="rate_limited",
            retryable=True,
            status=status,
        )
    if status in (401, 403):
        return ModelError(
            f"{head}; the API refused {key}: check that it is valid and allowed to use this model",
            kind="auth_error",
            retryable=False,
            status=status,
        )
    if status == 404:
        return ModelError(
            f"{head}; the model is unknown there, or base_url is wrong: check the model "
            "name and the URL",
            kind="model_not_found",
            retryable=False,
            status=status,
        )
    if 500 <= status <= 599:
        return ModelError(
            f"{head}; a server error: try again later",
            kind="transient_network",
            retryable=True,
            status=status,
        )
    if status == 400:
        return ModelError(
            f"{head}; the API refused the request: check the adapter's options and the "
            "tools' JSON schemas",
            kind="config_error",
            retryable=False,
            status=status,
        )
    return ModelError(
        f"{head}; an answer the adapter does not know how to handle",
        kind="unknown",
        retryable=False,
        status=status,
    )


def connection_failure(component: str, *, error: BaseException, where: str) -> ModelError:
    """No HTTP answer at all (refused, reset, timed out) as a retryable `ModelError`."""
    what = "timed out" if "Timeout" in type(error).__name__ else "could not be reached"
    return ModelError(
        f"{component}: {where} {what} ({type(error).__name__}); check base_url and that the "
        "server runs, then try again",
        kind="transient_network",
        retryable=True,
    )


async def ask(
    create: Any,
    body: Mapping[str, Any],
    *,
    vendor: ModuleType,
    base_error: type[BaseException],
    component: str,
    where: str,
    on_status: Callable[[Any], ModelError],
    limit: int,
    timeout: float | None,
    expected: str,
) -> dict[str, Any]:
    """One streamed `create` call's answer as a JSON object (`decode_answer`, which holds
    `expected`), or the `ModelError` its failure maps to.

    `create` is the SDK's `with_streaming_response.create`: the body is read
    here, at most `limit` bytes plus one chunk (see `_bounded`), and the whole
    request (connection, waiting, every byte) ends by `timeout`. Both vendor
    SDKs name their errors alike (`APIStatusError`, `APIConnectionError`,
    `APITimeoutError`, under one base class), so one ladder serves both;
    `on_status` reads the vendor's status error.
    """
    failure: ModelError | None = None
    content = b""

    async def exchange() -> bytes:
        async with create(**call_arguments(create, body)) as response:
            return await read_body(response, limit)

    marked = bounding()
    try:
        content = await (within(timeout, exchange()) if timeout else exchange())
    except BodyTooLarge as exc:
        failure = ModelError(
            f"{component}: the answer from {where} passed max_response_bytes={exc.limit} "
            f"(refused after reading {exc.read} bytes); raise the bound if the model really "
            "writes this much",
            kind="unknown",
            retryable=False,
        )
    except BrokenOff as exc:
        shown, cut = server_text(exc.read[:400], 200)
        failure = ModelError(
            f"{component}: {where} broke off in the middle of its answer ({exc.error_type} "
            f"after {len(exc.read)} bytes: {shown + ('...' if cut else '')!r}); try again",
            kind="transient_network",
            retryable=True,
        )
    except asyncio.TimeoutError:
        failure = ModelError(
            f"{component}: {where} did not answer within timeout={timeout:g}s (one bound for "
            "the whole request: connecting, waiting and reading); raise timeout=, or check "
            "that the server is not stalled",
            kind="transient_network",
            retryable=True,
        )
    except vendor.APIStatusError as exc:
        failure = on_status(exc)
    except (vendor.APIConnectionError, vendor.APITimeoutError) as exc:
        failure = connection_failure(component, error=exc, where=where)
    except base_error as exc:
        failure = ModelError(
            f"{component}: the {vendor.__name__} package failed ({type(exc).__name__}) before "
            "an answer came; check the client's configuration",
            kind="unknown",
            retryable=False,
        )
    finally:
        unbounding(marked)
    # Raised here, not in the except blocks: the vendor's exception holds the raw
    # response (an echoed key and all) and must not become the ModelError's __context__.
    if failure is not None:
        raise failure
    return decode_answer(content, component=component, limit=limit, where=where, expected=expected)


def given_timeout(client: Any) -> float | None:
    """The whole-request bound for a client the user configured: its own timeout, if a number."""
    value = getattr(client, "timeout", None)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return float(value)


def call_arguments(create: Any, body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` as keyword arguments of the SDK's `create`, unnamed fields in `extra_body`.

    The SDKs' `create` takes each documented field as a keyword and refuses
    others, and the set changes between releases (a field a user puts in
    `options` may be gone from this version's signature, or newer than it);
    `extra_body` sends those unchanged, so the JSON on the wire is `body`.
    """
    try:
        named = set(inspect.signature(create).parameters)
    except (TypeError, ValueError):  # no signature to read: send everything as the body
        named = set()
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in body.items():
        if key in named and key not in ("extra_body", "extra_headers", "extra_query", "timeout"):
            kwargs[key] = value
        else:
            extra[key] = value
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def decode_answer(
    content: bytes, *, component: str, limit: int, where: str, expected: str
) -> dict[str, Any]:
    """A 2xx answer's body as a JSON object, or a `ModelError` saying what it is instead.

    Invalid UTF-8 and lone surrogates become U+FFFD, as Go's decoder reads
    them. What is not a JSON object is reported with the server's own first
    words (scrubbed), told apart: a web page, JSON cut short or malformed
    (retryable: a proxy or the server broke off), or other text. An object
    holding an `error` where the answer's `expected` field belongs is that
    error, in the server's words.
    """
    if len(content) > limit:
        raise ModelError(
            f"{component}: the answer is {len(content)} bytes, over max_response_bytes="
            f"{limit}; raise the bound if the model really writes this much",
            kind="unknown",
            retryable=False,
        )
    # Scrubbed as text before it is decoded: a key the server echoes into the
    # model's text or a tool's arguments is [redacted] wherever it lands.
    text = scrub(content.decode("utf-8", "replace"))
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        failure = answered_error(data, component=component, where=where, expected=expected)
        if failure is not None:
            raise failure
        # A lone surrogate can only come from an escape: most answers have none.
        decoded: dict[str, Any] = replace_surrogates(data) if "\\u" in text else data
        return decoded
    shown, cut = server_text(text[:400], 200)
    said = repr(shown + ("..." if cut else ""))
    head = text.lstrip()[:1]
    if not head:
        raise ModelError(
            f"{component}: the answer is empty ({len(content)} bytes); the server or a proxy "
            "broke off before it wrote one: try again",
            kind="transient_network",
            retryable=True,
        )
    if head == "<":
        raise ModelError(
            f"{component}: the answer is a web page, not JSON: {said}; check that base_url "
            "points at the API itself, not a web page or a proxy",
            kind="unknown",
            retryable=False,
        )
    if head in "{[" and data is None:
        raise ModelError(
            f"{component}: the answer is JSON cut short or malformed ({len(content)} bytes): "
            f"{said}; the server or a proxy broke off: try again",
            kind="transient_network",
            retryable=True,
        )
    raise ModelError(
        f"{component}: the answer is not a JSON object: {said}; the server at base_url "
        "does not speak this API, or answered in its own words",
        kind="unknown",
        retryable=False,
    )


# An error a server reports in a 2xx body, by its type's words: the kind and retryable.
_ERROR_TYPES: tuple[tuple[str, str, bool], ...] = (
    ("rate", "rate_limited", True),
    ("overload", "transient_network", True),
    ("server", "transient_network", True),
    ("unavailable", "transient_network", True),
    ("timeout", "transient_network", True),
    ("auth", "auth_error", False),
    ("permission", "auth_error", False),
    ("not_found", "model_not_found", False),
    ("invalid_request", "config_error", False),
)


def answered_error(
    data: Mapping[str, Any], *, component: str, where: str, expected: str
) -> ModelError | None:
    """A 2xx answer that holds an `error` instead of `expected`: the server's words as an error."""
    if expected in data or "error" not in data:
        return None
    error = data["error"]
    kind_words = ""
    if isinstance(error, Mapping):
        for key in ("type", "code", "status"):
            if isinstance(error.get(key), str):
                kind_words += error[key].lower() + " "
    kind, retryable = next(
        ((k, r) for word, k, r in _ERROR_TYPES if word in kind_words), ("unknown", False)
    )
    said = _server_message(data, json.dumps(error, default=str)[:400])
    shown_type, _ = server_text(kind_words.strip(), 60)
    return ModelError(
        f"{component}: {where} answered 200 with an error in place of an answer: {said}"
        + (f" (type {shown_type!r})" if shown_type else "")
        + ("; try again later" if retryable else ""),
        kind=kind,
        retryable=retryable,
    )


def refuse_streaming(options: Mapping[str, Any], component: str) -> None:
    """Refuse `options` asking for what the adapter cannot read: a streamed (SSE) answer."""
    if options.get("stream") not in (None, False):
        raise ValueError(
            f"{component}: options={{'stream': {options['stream']!r}}} asks for a streamed "
            "answer, which this adapter does not read (it reads one JSON answer per request); "
            "leave 'stream' out of options"
        )


def arguments_call(call_id: str, name: str, raw: object) -> ToolCall:
    """The tool call a model wrote, whatever its arguments: one rule for both adapters.

    A JSON object (or JSON text of one; empty text is ``{}``, as some servers
    send for a tool without parameters) is the arguments. Anything else is a
    call that cannot run: the loop answers it with `ToolCall.error`, never
    running the tool, and the model reads why and can call again (the
    daemon's spirit: its adapter runs the tool on ``{}`` and the model reads
    the tool's complaint). A reply cut at the output limit is refused by
    `check_reply` instead: asking again would be cut again.
    """
    decoded: object = raw
    if isinstance(raw, str):
        try:
            decoded = json.loads(raw) if raw.strip() else {}
        except ValueError:
            decoded = None
    if isinstance(decoded, dict):
        return ToolCall(call_id, name, replace_surrogates(decoded))
    shown, was_cut = server_text(raw if isinstance(raw, str) else json.dumps(raw), 120)
    return ToolCall(
        call_id,
        name,
        {},
        error=(
            f"{name[:80]}: the arguments are not a JSON object ({shown!r}"
            f"{'...' if was_cut else ''}); the tool did not run: call it again with its "
            "arguments as one JSON object"
        ),
    )


def check_reply(reply: ModelReply, *, component: str, limit_option: str) -> ModelReply:
    """Refuse a reply nobody could use: empty, or cut at the output limit inside a tool call."""
    if reply.cut and any(c.error for c in reply.tool_calls):
        broken = next(c for c in reply.tool_calls if c.error)
        raise ModelError(
            f"{component}: the model's reply was cut at its output limit (stop reason "
            f"{reply.stop_reason!r}) in the middle of the arguments of tool "
            f"{broken.name[:80]!r}; asking again would be cut again: raise {limit_option}, "
            "or ask for less in one reply",
            kind="config_error",
            retryable=False,
        )
    if not reply.text and not reply.tool_calls:
        shown, _ = server_text(reply.stop_reason, 40)
        why = (
            f"it was cut at its output limit before it wrote anything: raise {limit_option}"
            if reply.cut
            else "asking again usually gives one"
        )
        raise ModelError(
            f"{component}: the model answered with nothing (no text and no tool call; stop "
            f"reason {shown!r}); {why}",
            kind="config_error" if reply.cut else "unknown",
            retryable=not reply.cut,
        )
    return reply


class VendorClient:
    """The vendor SDK client an adapter sends through, and who closes it.

    One the adapter builds (`build`) is closed by `aclose` and built again if the
    adapter is used after (a fleet closes its models as it stops; a later fleet may
    reuse them). One the user gives is used as configured and never closed here.
    Either way the failure-body hook (`_bounded.install`) is on its HTTP client.
    """

    def __init__(self, given: Any, build: Callable[[], Any]) -> None:
        self._build = build if given is None else None
        self.client: Any = given if given is not None else build()
        self._closed = False
        install(self.client)

    def open(self) -> Any:
        """The client to send through now (a fresh one after `aclose`, if it was built here)."""
        if self._closed and self._build is not None:
            self._closed = False
            self.client = self._build()
            install(self.client)
        return self.client

    async def aclose(self) -> None:
        """Close the client the adapter built; a given one stays its owner's."""
        if self._build is not None and not self._closed:
            self._closed = True
            await self.client.close()


class Shape:
    """Type-checked reads of a decoded answer; a wrong type is a `ModelError` naming the path."""

    def __init__(self, component: str, what: str) -> None:
        self._component = component
        self._what = what

    def fail(self, path: str, expected: str, got: object) -> ModelError:
        """The error for field `path` holding `got` where `expected` belongs."""
        return ModelError(
            f"{self._component}: the answer is not {self._what}: {path} is "
            f"{_type_name(got)}, expected {expected}; the server at base_url does not "
            "speak this API",
            kind="unknown",
            retryable=False,
        )

    def get(
        self,
        data: Mapping[str, Any],
        key: str,
        path: str,
        kind: type | tuple[type, ...],
        expected: str,
        *,
        required: bool = True,
        default: Any = None,
    ) -> Any:
        """`data[key]` if it has type `kind`; absent is `default` unless `required`."""
        if key not in data or data[key] is None:
            if required:
                raise self.fail(path, expected, None)
            return default
        value = data[key]
        # bool is an int to isinstance, never to a JSON schema.
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
            raise self.fail(path, expected, value)
        return value

    def count(self, data: Mapping[str, Any], key: str, path: str) -> int:
        """A token count made fit for the wire (`token_count`): never a reason to fail a turn."""
        return token_count(data.get(key))


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _type_name(value: object) -> str:
    if value is None:
        return "missing or null"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        shown, cut = server_text(value, 40)
        return f"a string ({shown + ('...' if cut else '')!r})"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
