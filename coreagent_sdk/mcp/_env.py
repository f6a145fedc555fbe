"""What an MCP server is given: ``${env:NAME}`` expanded, its skill's secrets, no fleet credential.

The daemon's rule (`pkg/agentenv`): ``${env:NAME}`` with NAME a shell
identifier, in env and header values only, an unset name expanding to the
empty string. The names resolve here from the secrets of the skill that
carries the server first, then this process's environment.

A stdio server's environment is this process's, less two things, plus its
own ``env`` and its skill's secrets (by name):

- the variables that hold the fleet's own credentials (`credential_variables`:
  every ``token_env`` a `CallPeer`, a registration or a host was given): a
  third-party server gets what its skill needs and nothing that joins the fleet;
- any variable whose value is a secret registered with the scrubber that is
  not one of this skill's (another agent's secret, read from the same
  environment): two agents' servers never see each other's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from .._attach._token import credential_variables
from .._scrub import is_registered

__all__ = ["expand", "server_environment", "server_headers"]

_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def expand(text: str, secrets: Mapping[str, str], environ: Mapping[str, str]) -> str:
    """`text` with each ``${env:NAME}`` replaced: the skill's secret, else the variable, else ""."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in secrets:
            return secrets[name]
        return environ.get(name, "")

    return _REFERENCE.sub(one, text)


def _visible(parent: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    """`parent` less the fleet's credential variables and other agents' secrets."""
    fleet = credential_variables()
    own = set(secrets.values())
    return {
        name: value
        for name, value in parent.items()
        if name not in fleet and (value in own or not is_registered(value))
    }


def server_environment(
    env: Mapping[str, str],
    secrets: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of a stdio server with `env` whose skill holds `secrets`."""
    out = _visible(os.environ if environ is None else environ, secrets)
    # A reference expands from what the server may see: `${env:FLEET_TOKEN}` is empty.
    visible = dict(out)
    out.update(secrets)
    out.update({name: expand(value, secrets, visible) for name, value in env.items()})
    return out


def server_headers(
    headers: Mapping[str, str],
    secrets: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """An HTTP server's headers, ``${env:NAME}`` expanded; one that expands empty is not sent."""
    visible = _visible(os.environ if environ is None else environ, secrets)
    expanded = {name: expand(value, secrets, visible) for name, value in headers.items()}
    return {name: value for name, value in expanded.items() if value}
