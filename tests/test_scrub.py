"""The one scrubber: registered secrets, in every spelling, never pass it."""

from __future__ import annotations

import logging

from coreagent_sdk._scrub import REDACTED, register, scrub, server_text
from coreagent_sdk.errors import APIStatusError, CoreAgentError, PeerTurnError

from .conftest import CANARY


def test_a_registered_secret_is_redacted_in_its_plain_escaped_and_encoded_spellings() -> None:
    secret = 'tok"en\\with/odd+chars'
    register(secret)
    for spelling in (secret, 'tok\\"en\\\\with/odd+chars', "tok%22en%5Cwith%2Fodd%2Bchars"):
        assert scrub(f"a {spelling} b") == f"a {REDACTED} b"


def test_every_error_scrubs_its_message_and_the_server_text_it_keeps() -> None:
    register(CANARY)
    assert CANARY not in str(CoreAgentError(f"x {CANARY}"))
    status = APIStatusError(f"m {CANARY}", status_code=500, body=f"b {CANARY}")
    assert status.body == f"b {REDACTED}"
    turn = PeerTurnError("m", kind="unknown", peer_message=CANARY, retryable=False, hint=CANARY)
    assert turn.message == REDACTED and turn.hint == REDACTED


def test_server_text_scrubs_before_it_cuts() -> None:
    register(CANARY)
    text, cut = server_text(("x" * 95 + CANARY).encode(), 100)
    assert cut and text == "x" * 95 + REDACTED[:5]


def test_a_short_secret_is_redacted_where_it_stands_as_a_word_of_its_own() -> None:
    # DESIGN.md's own example token; shorter than any length rule would guess.
    register("t0k")
    for shown in ("Bad t0k", "Bearer t0k.", "b'Bearer t0k'", '"t0k"', "Bearer%20t0k", "x=t0k&y"):
        assert "t0k" not in scrub(shown), shown
    assert scrub("500 Bad t0k") == f"500 Bad {REDACTED}"


def test_a_short_secret_inside_a_longer_word_is_left_alone() -> None:
    # Replacing letters inside every word would ruin every message (and every answer)
    # for as long as the process runs; letters inside another word are not the token.
    register("ab")
    assert scrub("abc tab cab ab") == f"abc tab cab {REDACTED}"


def test_httpx_log_records_are_scrubbed(caplog) -> None:
    register(CANARY)
    caplog.set_level(logging.INFO)
    logging.getLogger("httpx").info("HTTP Request: GET %s", f"http://h/{CANARY}")
    assert caplog.records[-1].getMessage() == f"HTTP Request: GET http://h/{REDACTED}"


def test_a_secret_registered_inside_a_scope_is_not_scrubbed_after_it() -> None:
    from coreagent_sdk import _scrub

    with _scrub.scoped():
        register("outer-secret-1")
        with _scrub.scoped():
            register("inner-secret-2")
            assert scrub("outer-secret-1 inner-secret-2") == f"{REDACTED} {REDACTED}"
        # The scope's own secret is gone; the one from before it stays.
        assert scrub("outer-secret-1 inner-secret-2") == f"{REDACTED} inner-secret-2"
    assert scrub("gpt-4o-mini-outer-secret-1") == "gpt-4o-mini-outer-secret-1"


def test_a_scope_brings_back_what_it_dropped_and_says_the_set_changed() -> None:
    from coreagent_sdk import _scrub

    with _scrub.scoped():
        register("kept-secret-3")
        before = _scrub.generation()
        with _scrub.scoped():
            _scrub.forget_all()  # as a test of the registry may
            for i in range(300):  # past the bound: the oldest are dropped
                register(f"rotated-{i:04d}")
            assert scrub("kept-secret-3") == "kept-secret-3"
        assert scrub("kept-secret-3 rotated-0299") == f"{REDACTED} rotated-0299"
        assert _scrub.generation() != before  # whoever cached a check checks again
        unchanged = _scrub.generation()
        with _scrub.scoped():
            register("kept-secret-3")  # already there: nothing to undo
        assert _scrub.generation() == unchanged
