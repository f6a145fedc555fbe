"""The declared protocol version, read as core-agent `pkg/attach/protocol.go` reads it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from .._attach._wire import PROTOCOL_VERSION
from ._replies import _q, _text

__all__ = ["negotiate_version", "protocol_major"]

_VERSION_HEADER = "x-attach-protocol-version"

# What Go's strings.TrimSpace trims (unicode.IsSpace). Python's str.strip() trims U+001C to
# U+001F as well, so a version a daemon refuses as malformed was read as a number here.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def protocol_major(version: str) -> int | None:
    """The leading integer of a declared version (`1`, `v1`, `1.4.0-rc.1`), None without one.

    Pins core-agent `pkg/attach/protocol.go` `protocolMajor`.
    """
    v = version.strip(_GO_SPACE)
    v = v[1:] if v.startswith("v") else v
    for i, c in enumerate(v):
        if c in ".-+":
            v = v[:i]
            break
    if not (v.isascii() and v.isdigit()):
        return None  # Atoi refuses it
    digits = v.lstrip("0") or "0"  # Atoi reads leading zeros: 00…01 is 1
    if len(digits) > 19:
        return None  # past int64 (and Python's int() refuses 4,300+ digits)
    major = int(digits)
    return major if major < 2**63 else None


def negotiate_version(request: Request) -> Response | None:
    """400 for a declared version without a leading integer, 409 for another major.

    The query (`?protocol=`) is read before the header. Pins core-agent
    `pkg/attach/protocol.go` `negotiateProtocolVersion` and `clientProtocolVersion`.
    """
    # URL.Query().Get is the first value; Starlette's query_params.get is the last.
    declared = next(iter(request.query_params.getlist("protocol")), "").strip(_GO_SPACE)
    if not declared:
        declared = request.headers.get(_VERSION_HEADER, "").strip(_GO_SPACE)
    if not declared:
        return None
    headers = {"X-Attach-Protocol-Version": PROTOCOL_VERSION}
    theirs, ours = protocol_major(declared), protocol_major(PROTOCOL_VERSION)
    if theirs is None:
        return _text(
            400,
            f"malformed protocol version {_q(declared)} (expected semver like "
            f"{_q(PROTOCOL_VERSION)})",
            headers,
        )
    if theirs != ours:
        return _text(
            409,
            f"protocol version mismatch: client speaks {_q(declared)} (major {theirs}), server "
            f"speaks {_q(PROTOCOL_VERSION)} (major {ours}); upgrade the client or connect to a "
            "compatible daemon",
            headers,
        )
    return None
