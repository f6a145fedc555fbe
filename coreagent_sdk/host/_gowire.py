"""What the daemon's Go HTTP stack does to bytes, reproduced for the host.

Invariant: every body and frame the host writes, and every request body it
reads, goes through here, so "as Go writes it" and "as Go reads it" are one
module to compare with the Go sources:

- JSON is written as `encoding/json` writes it: compact, UTF-8, with `<`,
  `>`, `&`, U+2028 and U+2029 escaped (Go's HTML-safe default), and a JSON
  body ends in a newline (`json.NewEncoder(w).Encode`, core-agent
  `pkg/attach/handlers.go` `writeJSON`).
- A request body is decoded as `json.Unmarshal` decodes it into the
  handler's struct: invalid UTF-8 and lone surrogates become U+FFFD (not an
  error), `null` leaves a field alone (a pointer field becomes nil), keys
  match field names case-insensitively, a value of the wrong JSON kind is an
  error in Go's words, and NaN/Infinity are not JSON.
- `since` is read as `strconv.ParseInt(strings.TrimSpace(s), 10, 64)`.
- Writes are guarded as `pkg/attach/csrf.go` guards them (Origin, then the
  JSON media type as `mime.ParseMediaType` reads it).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from starlette.responses import Response

from .._attach._surrogates import SURROGATE, replace_surrogates

__all__ = [
    "decode_into",
    "go_json",
    "is_json_media_type",
    "json_response",
    "origin_allowed",
    "parse_since",
    "read_json",
    "sse",
]

_HTML_UNSAFE = re.compile("[<>&\u2028\u2029]")
# unicode.IsSpace, which strings.TrimSpace trims (Python's str.strip also trims \x1c-\x1f).
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_DECIMAL = re.compile(r"[+-]?[0-9]+")  # ParseInt base 10: ASCII digits, one optional sign
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_MEDIA_TYPE = re.compile(rf"{_TOKEN}/{_TOKEN}")
_PARAM = re.compile(rf'\s*{_TOKEN}\s*=\s*(?:{_TOKEN}|"(?:[^"\\]|\\.)*")\s*')


# One encoder for every compact value: json.dumps builds a new one per call when given options.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def go_json(value: Any, *, indent: int | None = None) -> str:
    """`value` as Go's encoding/json writes it (compact unless `indent`, HTML-safe)."""
    if indent is None:
        text = _COMPACT.encode(value)
    else:
        text = json.dumps(value, separators=(",", ": "), ensure_ascii=False, indent=indent)
    return html_safe(text)


def html_safe(text: str) -> str:
    """JSON `text` with Go's HTML escapes (`<`, `>`, `&`, U+2028, U+2029 as \\u escapes)."""
    # Most payloads have none of these: one C-speed scan first. Then five replaces in C,
    # where a translate table was looked up per character (31 us for 500 characters).
    if _HTML_UNSAFE.search(text) is None:
        return text
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def json_response(
    payload: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """A JSON answer as the daemon's `writeJSON` sends it: the encoder's trailing newline."""
    body = (go_json(payload) + "\n").encode()
    return Response(body, status_code=status_code, headers=headers, media_type="application/json")


def sse(event: str, payload: Any) -> bytes:
    """One SSE frame exactly as the daemon writes it: `event: X\\ndata: {json}\\n\\n`.

    A lone surrogate (a model's split pair) is written as U+FFFD, as Go's encoder
    writes invalid UTF-8, rather than failing the frame and the turn with it.
    """
    return utf8(f"event: {event}\ndata: {go_json(payload)}\n\n")


def utf8(text: str) -> bytes:
    """`text` as UTF-8, a lone surrogate as U+FFFD (as Go's encoder writes invalid UTF-8)."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return SURROGATE.sub("\ufffd", text).encode()


def parse_since(raw: str | None) -> int:
    """`?since=`: what `strconv.ParseInt` refuses (or a negative cursor) means 0, the whole log.

    Pins core-agent `pkg/attach/handlers.go` `parseSince`: surrounding
    Unicode space is trimmed; digit separators, non-ASCII digits and numbers
    outside int64 are errors.
    """
    if not raw:
        return 0
    text = raw.strip(_GO_SPACE)
    if _DECIMAL.fullmatch(text) is None:
        return 0
    since = int(text)
    return since if 0 <= since < 2**63 else 0


def _no_constants(name: str) -> Any:
    # NaN and Infinity are not JSON; Go's scanner says so at their first letter.
    if name.startswith("-"):
        raise ValueError(f"invalid character {name[1]!r} in numeric literal")
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def read_json(body: bytes) -> tuple[Any, str | None]:
    """(value, None) or (None, error text) for a body, as `json.Unmarshal` reads it."""
    try:
        value = json.loads(body.decode("utf-8", errors="replace"), parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        return None, str(exc)
    if b"\\u" not in body:
        return value, None  # a lone surrogate can only come from an escape
    return replace_surrogates(value), None


def _kind(value: Any) -> str:
    # The JSON kind as Go's UnmarshalTypeError names it.
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


_GO_TYPES = {str: "string", bool: "bool", list: "[]string"}


def decode_into(
    value: Any, struct: str, fields: Mapping[str, type], *, nullable: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], str | None]:
    """Decode `value` into a Go struct of `fields` (str, bool, or list meaning []string).

    Returns the fields the body set and None, or ({}, Go's error text).
    `nullable` fields are pointers: `null` unsets them; on any other field
    `null` has no effect, as in Go.
    """
    if value is None:
        return {}, None
    if not isinstance(value, dict):
        return {}, f"json: cannot unmarshal {_kind(value)} into Go value of type attach.{struct}"
    out: dict[str, Any] = {}
    lowered = {name.lower(): name for name in fields}
    for key, item in value.items():
        field = key if key in fields else lowered.get(key.lower())
        if field is None:
            continue  # unknown fields are ignored
        if item is None:
            if field in nullable:
                out.pop(field, None)
            continue
        want = fields[field]
        bad = item if not _is_kind(item, want) else None
        if want is list and bad is None:
            bad = next((v for v in item if not isinstance(v, str)), None)
            if bad is not None:
                return {}, (
                    f"json: cannot unmarshal {_kind(bad)} into Go struct field "
                    f"{struct}.{field} of type string"
                )
        if bad is not None:
            return {}, (
                f"json: cannot unmarshal {_kind(bad)} into Go struct field {struct}.{field} "
                f"of type {_GO_TYPES[want]}"
            )
        out[field] = item
    return out, None


def _is_kind(item: Any, want: type) -> bool:
    if want is bool:
        return isinstance(item, bool)
    return isinstance(item, want)


def is_json_media_type(content_type: str) -> bool:
    """True when `mime.ParseMediaType` reads `content_type` as application/json."""
    head, _, params = content_type.partition(";")
    if _MEDIA_TYPE.fullmatch(head.strip()) is None or head.strip().lower() != "application/json":
        return False
    for param in params.split(";") if params else ():
        # Go ignores a trailing ';' but refuses any parameter that is not key=value.
        if param.strip() and _PARAM.fullmatch(param) is None:
            return False
    return True


def origin_allowed(origin: str, request_host: str) -> bool:
    """A browser Origin the write guard lets through: loopback, or this very listener.

    Pins core-agent `pkg/attach/csrf.go` `originAllowed`: "null" and
    malformed origins are refused; the scheme is not compared.
    """
    try:
        parts = urlsplit(origin)
        host = parts.hostname or ""
    except ValueError:
        return False
    netloc = parts.netloc.rpartition("@")[2]
    if not parts.scheme or not netloc:
        return False
    if host.lower() == "localhost":
        return True
    try:
        if ipaddress.ip_address(host).is_loopback:
            return True
    except ValueError:
        pass
    return netloc.lower() == request_host.lower()
