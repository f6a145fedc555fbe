"""What a bearer token may be, checked where it is read.

Invariant: a token either goes into `Authorization: Bearer <token>` as it is,
or is refused with a typed error that names where it came from and never
shows it. httpx refuses a header value with a control character or a
non-ASCII character, and its message quotes the value; that message would
then travel into errors, logs and events. So the check happens first, here.

Surrounding whitespace is stripped: a token read from a mounted secret file
ends in a newline, and no token is meant to begin or end with a blank.
Inside, only visible ASCII is accepted (no blank either: a token is one word).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .._scrub import register
from ..errors import InvalidTokenError, TokenUnsetError

__all__ = ["checked_token", "credential_variable", "credential_variables", "read_token"]

# The variables that hold the fleet's own credentials: every token_env a caller, a
# registration or a host was given. A third-party process (an MCP server) is started
# without them. Names only, never values; bounded like the scrubber's registry.
_CREDENTIAL_VARIABLES: dict[str, None] = {}
_MAX_VARIABLES = 256


def credential_variable(name: str | None) -> None:
    """Record `name` as a variable that holds a fleet credential (a ``token_env``)."""
    if not name or not isinstance(name, str):
        return
    _CREDENTIAL_VARIABLES.pop(name, None)
    _CREDENTIAL_VARIABLES[name] = None
    while len(_CREDENTIAL_VARIABLES) > _MAX_VARIABLES:
        del _CREDENTIAL_VARIABLES[next(iter(_CREDENTIAL_VARIABLES))]


def credential_variables() -> frozenset[str]:
    """The variables `credential_variable` recorded (every `read_token` records its own)."""
    return frozenset(_CREDENTIAL_VARIABLES)


def _problem(token: str) -> str | None:
    if token.isascii() and token.isprintable() and " " not in token:
        return None
    if not token.isascii():
        return "a non-ASCII character"
    if " " in token:
        return "a blank inside it"
    return "a control character"


def checked_token(value: str | None, where: str, component: str) -> str | None:
    """`value` stripped, or None when empty; InvalidTokenError naming `where` if unusable.

    `where` says where the token came from (`$FLEET_TOKEN`, `token=`), for the
    message: the value itself is never shown.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidTokenError(
            f"{component}: the token in {where} is a {type(value).__name__}, not a string; "
            "pass the token as text"
        )
    token = value.strip()
    if not token:
        return None
    register(token)
    problem = _problem(token)
    if problem is not None:
        raise InvalidTokenError(
            f"{component}: the token in {where} has {problem}, which no HTTP header may "
            "carry (the value is not shown); fix the secret: a token is one word of "
            "visible ASCII characters"
        )
    return token


def read_token(
    token_env: str | None, environ: Mapping[str, str] | None, component: str
) -> str | None:
    """The token named by `token_env`, read now and checked; None when no variable is named."""
    if token_env is None:
        return None
    credential_variable(token_env)
    value = (os.environ if environ is None else environ).get(token_env, "")
    token = checked_token(value, f"${token_env}", component)
    if token is None:
        raise TokenUnsetError(
            f"{component}: the token variable ${token_env} is unset or empty; "
            f"export {token_env}=<token>, or drop token_env for anonymous peers"
        )
    return token
