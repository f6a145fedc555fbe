"""A command line's parser that never repeats what it refuses: one may be a token.

argparse quotes what it cannot use: "unrecognized arguments: ...", "argument --port:
invalid int value: '...'", "argument command: invalid choice: '...'". A token typed
after a misspelt option (`--attach_token VALUE`, `--attach-tokenVALUE`) or into the
wrong one (`--port $TOKEN`) would then land in a terminal's scrollback and a CI log.
This parser says which option refused a value and where to look, never the value.
It also takes no abbreviations: `--attach-token X` must never be read as
`--attach-token-env X`, nor `--hub-token X` as `--hub-token-env X`.

Every command line of the project uses it: the host's, the MCP server's and the
simulator's (which imports it from `coreagent_sdk.host`, where it is a helper, not
part of the API).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["QuietParser"]

# argparse's own messages that carry a value, as every supported Python writes them: the
# text up to the value is kept, the value and what follows it are not.
_VALUED = re.compile(r"^(argument [^:]*: )(invalid (?:choice|[\w.<> ]+ value))")
_CHOICES = re.compile(r"\(choose from ([^()]*)\)$")
_HELP = "; see --help for the options"


class QuietParser(argparse.ArgumentParser):
    """argparse's parser, except that a refused value is never quoted (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> argparse.Namespace:
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            self.error(
                f"{len(unknown)} argument(s) not understood, not repeated here (one may be "
                f"a token){_HELP}"
            )
        return parsed

    def error(self, message: str) -> NoReturn:
        valued = _VALUED.match(message)
        if valued is not None:
            choices = _CHOICES.search(message)  # the choices are the parser's own words
            fix = f"; choose from {choices.group(1)}" if choices else _HELP
            message = (
                f"{valued.group(1)}{valued.group(2)}, not repeated here (it may be a token){fix}"
            )
        super().error(message)
