"""A session's inbox as core-agent `pkg/agent/inbox.go` has it: its cap and its bundle."""

from __future__ import annotations

# The bundle itself lives in the SDK's core, where a ScriptedModel reads it back too.
from .._attach._inbox import INBOX_GUIDANCE, inbox_block

__all__ = ["INBOX_CAP", "INBOX_GUIDANCE", "inbox_block"]

INBOX_CAP = 256  # core-agent pkg/agent/inbox.go defaultInboxCap
"""The most messages a session's inbox holds; one more drops the oldest, as `inbox.push` does."""
