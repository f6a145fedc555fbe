"""An error's message shows what a terminal must not read raw; the peer's own words stay."""

from __future__ import annotations

import pytest

from coreagent_sdk.errors import PeerTurnError
from simulator import Fleet, behaviors

# ESC[2J clears a terminal that prints the message; U+202E turns the rest of its line
# around; DEL, a C1 control and U+2028 (a line break to some readers) round the set out.
HOSTILE = "quota\x1b[2J gone\u202e deliaf\x7f\x85\u2028end"


async def test_a_peers_turn_error_shows_its_controls_as_escapes_and_keeps_its_words() -> None:
    fleet = Fleet()
    fleet.add_peer("p", behaviors.fail(kind="rate_limited", message=HOSTILE))
    with pytest.raises(PeerTurnError) as info:
        await fleet.call_peer(timeout=10).acall(peer="p", prompt="work")
    await fleet.aclose()
    shown = str(info.value)
    assert "quota\\x1b[2J gone\\u202e deliaf\\x7f\\x85\\u2028end" in shown
    assert not any(c in shown for c in "\x1b\u202e\x7f\x85\u2028")
    assert info.value.message == HOSTILE  # the attribute is the peer's words, as sent


@pytest.mark.parametrize("kept", ["line one\nline two", "a\tb", "a\r\nb", "plain ascii", "é → ✓"])
def test_line_breaks_tabs_and_printable_text_reach_the_message_unchanged(kept: str) -> None:
    error = PeerTurnError(f"call_peer: {kept}", kind="unknown", peer_message=kept, retryable=False)
    assert str(error) == f"call_peer: {kept}"
