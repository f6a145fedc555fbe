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

from .._attach._token import checked_token, credential_variable
from ..errors import TokenUnsetError
from ._replies import _text

__all__ = ["attach_refusal", "presented_token", "read_attach_token"]

_BEARER = "Bearer "


def presented_token(request: Request) -> str:
    """The token a request presents (`extractToken`): "" when it presents none."""
    side = request.headers.get("x-attach-token", "")
    if side:
        return side
    header = request.headers.get("authorization", "")
    return header[len(_BEARER) :].strip() if header.startswith(_BEARER) else ""


def attach_refusal(request: Request, want: str) -> Response | None:
    """`checkAttachToken`: None when the request carries `want`, else the daemon's 401."""
    got = presented_token(request)
    if got and hmac.compare_digest(got.encode(), want.encode()):
        return None
    return _text(401, "unauthorized", {"WWW-Authenticate": 'Bearer realm="attach"'})


def read_attach_token(env: str) -> str:
    """The shared token in the variable `env` (registered with the scrubber), read now.

    Like the daemon's `--attach-token=<ENVVAR>`, the token is only ever named by
    its variable: it never travels on a command line, and no message shows it.
    """
    credential_variable(env)  # never handed to an MCP server
    token = checked_token(os.environ.get(env, ""), f"${env}", "AgentHost")
    if token is None:
        raise TokenUnsetError(
            f"AgentHost: attach_token_env names ${env}, which is unset or empty; export "
            f"{env}=<token> before starting the host, or drop attach_token_env to serve "
            "without a shared token"
        )
    return token
