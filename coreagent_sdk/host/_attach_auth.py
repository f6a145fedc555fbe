"""Reading a caller's token, and a daemon's shared attach token, as core-agent reads them.

Pins core-agent `pkg/attach/auth.go` (`checkAttachToken`, `extractBearer`,
`writeAttachUnauthorized`) and `pkg/auth/authenticator.go` (`extractToken`):

- A non-empty `X-Attach-Token` decides alone, right or wrong: a gateway may own
  the `Authorization` header, and a caller that sent the side header is told
  when it is wrong rather than judged by another header.
- Otherwise `Authorization` must start with `Bearer ` exactly as written (a
  lower-case `bearer` is no token on a daemon, so it is none here: code that
  passed against a host must pass against a daemon), and the rest is trimmed.
- A daemon started with `--attach-token` compares in constant time and refuses
  with `401 unauthorized`, `WWW-Authenticate: Bearer realm="attach"`, before
  any per-caller check (`Server.Bind` puts `AuthConfig.Middleware` outermost).
"""

from __future__ import annotations

import hmac
import os

from starlette.requests import Request
from starlette.responses import Response

from .._attach._token import checked_token, credential_variable, variable_unset, variable_where
from ._replies import _text

__all__ = ["attach_refusal", "presented_token", "read_attach_token", "token_matches"]

_BEARER = "Bearer "
# Go's unicode.IsSpace, which strings.TrimSpace trims: Python's str.strip() also takes the
# separators 0x1C-0x1F for spaces, and reads header bytes as latin-1, not UTF-8.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _go_trim_space(text: str) -> str:
    """`strings.TrimSpace` of the header's bytes (`text` is them as latin-1, as ASGI gives).

    Go reads the bytes as UTF-8: a byte that is not (a lone 0xA0) is no space and stays,
    and a space written in UTF-8 (NBSP as 0xC2 0xA0) is trimmed.
    """
    utf8 = text.encode("latin-1").decode("utf-8", "surrogateescape")
    return utf8.strip(_GO_SPACE).encode("utf-8", "surrogateescape").decode("latin-1")


def presented_token(request: Request) -> str:
    """The token a request presents (`extractToken`): "" when it presents none.

    Its bytes as latin-1 text, as the header arrived: compared with a token's bytes.
    """
    side = request.headers.get("x-attach-token", "")
    if side:
        return side
    header = request.headers.get("authorization", "")
    return _go_trim_space(header[len(_BEARER) :]) if header.startswith(_BEARER) else ""


def token_matches(got: str, want: bytes) -> bool:
    """Whether `got` (`presented_token`'s text) is the token `want` (its UTF-8 bytes).

    Compared on the header's own bytes, in constant time: the one comparison of every
    shared token the SDK serves behind (the attach wire's, the MCP server's). Tokens are
    visible ASCII (`checked_token`), so a header holding anything else never matches.
    """
    return bool(got) and hmac.compare_digest(got.encode("latin-1"), want)


def attach_refusal(request: Request, want: str) -> Response | None:
    """`checkAttachToken`: None when the request carries `want`, else the daemon's 401."""
    if token_matches(presented_token(request), want.encode()):
        return None
    return _text(401, "unauthorized", {"WWW-Authenticate": 'Bearer realm="attach"'})


def read_attach_token(env: str) -> str:
    """The shared token in the variable `env` (registered with the scrubber), read now.

    Like the daemon's `--attach-token=<ENVVAR>`, the token is only ever named by
    its variable: it never travels on a command line, and no message shows it.
    """
    credential_variable(env)  # never handed to an MCP server
    token = checked_token(os.environ.get(env, ""), variable_where(env), "AgentHost")
    if token is None:
        raise variable_unset(
            "AgentHost",
            env,
            "AgentHost: attach_token_env names ${name}, which is unset or empty; export "
            "{name}=<token> before starting the host, or drop attach_token_env to serve "
            "without a shared token",
        )
    return token
