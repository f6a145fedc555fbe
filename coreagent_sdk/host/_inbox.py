"""A session's inbox as core-agent `pkg/agent/inbox.go` has it: its cap and its bundle."""

from __future__ import annotations

__all__ = ["INBOX_CAP", "INBOX_GUIDANCE", "inbox_block"]

INBOX_CAP = 256  # core-agent pkg/agent/inbox.go defaultInboxCap
"""The most messages a session's inbox holds; one more drops the oldest, as `inbox.push` does."""


INBOX_GUIDANCE = (
    "How to handle the bundle:\n"
    "- Variants of the same ask or signal \u2192 treat as ONE; don't re-do work per message.\n"
    "- Corroborating detail on something you already handled \u2192 acknowledge it and move "
    "on; do not re-open the work.\n"
    "- Mid-task adjustments \u2192 adapt your next step.\n"
    "- Separate asks during an active task \u2192 capture with `todo`, continue what you were "
    "doing.\n"
    "- After a completed task (the latest message is a checkpoint summary) \u2192 treat the "
    "bundle as the next request and respond once."
)
"""The daemon's guidance under a bundle of queued messages (`pkg/agent/inbox.go`)."""


def inbox_block(messages: list[str]) -> str:
    """Several queued messages as the model sees them in one turn.

    Pins core-agent `pkg/agent/inbox.go` `formatInboxBundle("[Inbox]", ...)`:
    a header, one `- message` line each, a blank line, then the guidance.
    """
    return "[Inbox]\n" + "".join(f"- {m}\n" for m in messages) + "\n" + INBOX_GUIDANCE
