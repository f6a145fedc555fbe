"""The `[Inbox]` bundle: queued messages as a daemon's model sees them in one turn.

A daemon runs every attach turn as ``Run("")`` (`wakeloop.go`), so
``prependInboxMessages`` frames the drained messages as the bundle *is* the
turn: a header, one ``- message`` line each, a blank line, then the
daemon's handling guidance, whether one message drained or several. The
host frames its turns so (`Turn.model_prompt`), a `ModelAgent` gives its
model exactly that, and a `ScriptedModel` reads the messages back out of
it, so its rules match what was asked rather than the guidance.
"""

from __future__ import annotations

__all__ = ["INBOX_GUIDANCE", "INBOX_HEADER", "inbox_block", "inbox_ask"]

INBOX_HEADER = "[Inbox]"
"""The bundle's first line (`formatInboxBundle("[Inbox]", ...)`)."""

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
    return INBOX_HEADER + "\n" + "".join(f"- {m}\n" for m in messages) + "\n" + INBOX_GUIDANCE


_TAIL = "\n" + INBOX_GUIDANCE


def inbox_ask(text: str) -> str:
    """What a bundle asks: its one message, or its `- message` lines without the guidance.

    Text that is not a bundle is its own ask. One message is told from several
    by its lines: a single message whose text holds a ``"\\n- "`` line reads as
    the several-message form, which still holds every word that was asked.
    """
    if not (text.startswith(INBOX_HEADER + "\n- ") and text.endswith(_TAIL)):
        return text
    body = text[len(INBOX_HEADER) + 1 : -len(_TAIL)].removesuffix("\n")
    if "\n- " not in body:
        return body[2:]
    return f"{INBOX_HEADER}\n{body}"
