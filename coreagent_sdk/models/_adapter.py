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

import importlib
import inspect
import json
import logging
import os
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from .._scrub import LOG_FILTER, register, scrub, server_text
from ._protocol import ModelError

__all__ = [
    "MAX_RESPONSE_BYTES",
    "Shape",
    "ask",
    "connection_failure",
    "call_arguments",
    "decode_answer",
    "load_package",
    "read_key",
    "scrub_vendor_logs",
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


def scrub_vendor_logs(*prefixes: str) -> None:
    """Put the scrubbing filter on every logger of the vendor's packages.

    A logger filter applies only to records made on that logger, not on its
    children, so each existing logger under the prefixes gets it. The vendor
    SDKs log response headers such as `x-request-id`, which a hostile server
    can fill with the key it was sent.
    """
    names = set(prefixes)
    names.update(
        name for name in list(logging.root.manager.loggerDict) if name.split(".", 1)[0] in prefixes
    )
    for name in names:
        logger = logging.getLogger(name)
        if LOG_FILTER not in logger.filters:
            logger.addFilter(LOG_FILTER)


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
) -> bytes:
    """One `create` call's raw answer body, or the `ModelError` its failure maps to.

    Both vendor SDKs name their errors alike (`APIStatusError`,
    `APIConnectionError`, `APITimeoutError`, under one base class), so one
    ladder serves both; `on_status` reads the vendor's status error.
    """
    failure: ModelError | None = None
    content = b""
    try:
        raw = await create(**call_arguments(create, body))
        content = raw.http_response.content
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
    # Raised here, not in the except blocks: the vendor's exception holds the raw
    # response (an echoed key and all) and must not become the ModelError's __context__.
    if failure is not None:
        raise failure
    return bytes(content)


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


def decode_answer(content: bytes, *, component: str, limit: int) -> dict[str, Any]:
    """A 2xx answer's body as a JSON object, or a `ModelError` saying what it is instead."""
    if len(content) > limit:
        raise ModelError(
            f"{component}: the answer is {len(content)} bytes, over max_response_bytes="
            f"{limit}; raise the bound if the model really writes this much",
            kind="unknown",
            retryable=False,
        )
    # Scrubbed as text before it is decoded: a key the server echoes into the
    # model's text or a tool's arguments is [redacted] wherever it lands.
    try:
        data = json.loads(scrub(content.decode("utf-8")))
    except ValueError:
        data = None
    if not isinstance(data, dict):
        shown, _ = server_text(content[:200], 120)
        raise ModelError(
            f"{component}: the answer is not a JSON object: {shown!r}; check that base_url "
            "points at the API itself, not a web page or a proxy",
            kind="unknown",
            retryable=False,
        )
    return data


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
        """A token count: a non-negative integer, 0 when absent."""
        value: int = self.get(
            data, key, path, int, "a non-negative integer", required=False, default=0
        )
        if value < 0:
            raise self.fail(path, "a non-negative integer", value)
        return value


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
