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
import re
from collections.abc import Mapping

from .._scrub import register
from ..errors import InvalidTokenError, TokenUnsetError

__all__ = [
    "checked_token",
    "credential_variable",
    "credential_variables",
    "read_token",
    "shown_variable",
    "variable_unset",
    "variable_where",
]

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


# A variable's name as messages may show it: the POSIX convention for environment names
# (upper-case letters, digits, `_`). What a user passed where a name belongs may be the
# token itself (`--attach-token-env sk-...`): anything else is never repeated. A short
# name, or one with `_`, is a name; a long run of upper-case letters and digits with no
# `_` reads like a base32 secret, so it is not shown either.
_SHOWN_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
_EXAMPLE = "FLEET_TOKEN"


def shown_variable(name: object) -> str | None:
    """`name` when a message may show it (an upper-case variable name); None otherwise."""
    if not isinstance(name, str) or not _SHOWN_NAME.fullmatch(name):
        return None
    return name if "_" in name or len(name) <= 12 else None


def variable_where(name: str) -> str:
    """Where a token came from, for a message: ``$NAME``, or a phrase that hides the name."""
    shown = shown_variable(name)
    return f"${shown}" if shown else "the variable named (its name is not shown)"


def variable_unset(component: str, name: str, said: str) -> TokenUnsetError:
    """The error for an unset variable: `said` (naming ``$NAME``) when the name may be shown.

    `said` is the message to give with the name shown, written with ``{name}``. Given what
    does not look like a variable's name, the error says what one looks like and the fix
    instead, and repeats nothing of what it was given: it may be the token itself.
    """
    shown = shown_variable(name)
    if shown is not None:
        return TokenUnsetError(said.replace("{name}", shown))
    return TokenUnsetError(
        f"{component}: the token's variable is unset or empty, and what was given as its "
        "name is not repeated here: it is no upper-case name and may be the token itself; "
        f"a variable's name is upper-case letters, digits and _, such as {_EXAMPLE}: export "
        f"{_EXAMPLE}=<token> and pass the name {_EXAMPLE}, never the token"
    )


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
    token = checked_token(value, variable_where(token_env), component)
    if token is None:
        raise variable_unset(
            component,
            token_env,
            f"{component}: the token variable ${{name}} is unset or empty; "
            "export {name}=<token>, or drop token_env for anonymous peers",
        )
    return token
