"""The endpoint policy shared by the hub and the caller."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coreagent_sdk import endpoint_problem

HOSTILE = [
    "javascript:alert(1)",
    "file:///etc/passwd",
    "ftp://host/x",
    "/relative",
    "relative/path",
    "http://",
    "https://",
    "http:///path",
    "example.com:80",
    "  http://x",
    "http://x ",
    "http://exa mple.com",
    "http://x\n.evil",
    "",
    "//host/path",
    "gopher://host",
    "http://host:99999",
]


@pytest.mark.parametrize("url", HOSTILE)
def test_a_hostile_or_malformed_endpoint_is_refused_with_a_reason(url: str) -> None:
    reason = endpoint_problem(url)
    assert isinstance(reason, str) and reason


@pytest.mark.parametrize(
    "url",
    [
        "http://prod-1.sim",
        "https://agents.example.com:8443/base",
        "http://127.0.0.1:8844",
        "HTTP://UPPER.example",
        "http://[::1]:80",
    ],
)
def test_an_absolute_http_url_with_a_host_is_accepted(url: str) -> None:
    assert endpoint_problem(url) is None


def test_a_non_string_endpoint_is_refused() -> None:
    assert endpoint_problem(None) == "it is a NoneType, not a string"


# --- the plain endpoints one match accepts are exactly those the parsers accept ------------


def _parsed_problem(url: str) -> str | None:
    from coreagent_sdk._http._endpoint import _string_problem

    return _string_problem.__wrapped__(url)  # the parsers' way, past the cache


@given(
    st.from_regex(
        r"https?://[a-z0-9][a-z0-9.-]{0,70}(:[0-9]{1,6})?(/[A-Za-z0-9._~-]{0,12}){0,3}",
        fullmatch=True,
    )
)
@settings(max_examples=400, deadline=None)
def test_an_endpoint_of_plain_characters_is_judged_as_the_parsers_judge_it(url: str) -> None:
    from coreagent_sdk._http._endpoint import plain_endpoint

    assert (endpoint_problem(url) is None) is (_parsed_problem(url) is None), url
    if plain_endpoint(url):
        assert _parsed_problem(url) is None, url  # the match accepts only what both parsers do


def _split_base(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)  # the parsers' way of taking a base: scheme and host, no userinfo
    return f"{parts.scheme.lower()}://{parts.netloc.rpartition('@')[2]}"


@given(
    st.from_regex(
        r"https?://[a-z0-9][a-z0-9.-]{0,70}(:[0-9]{1,6})?(/[A-Za-z0-9._~-]{0,12}){0,3}/?",
        fullmatch=True,
    )
)
@settings(max_examples=400, deadline=None)
def test_the_base_a_client_dials_of_a_plain_endpoint_is_the_one_the_parsers_give(
    url: str,
) -> None:
    from coreagent_sdk._attach._client import dial_base
    from coreagent_sdk._http._endpoint import plain_endpoint

    if plain_endpoint(url):
        assert dial_base(url) == _split_base(url), url


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://p-1.sim", "http://p-1.sim"),
        ("http://p-1.sim/", "http://p-1.sim"),
        ("https://a.b-c.example:8443/prefix/x", "https://a.b-c.example:8443"),
        ("http://u:pw@p-1.sim/x", "http://p-1.sim"),  # not plain: userinfo never dialed
        ("HTTP://P-1.sim:80/x?q=1#f", "http://P-1.sim:80"),
    ],
)
def test_a_client_dials_only_the_scheme_and_host_of_an_endpoint(url: str, base: str) -> None:
    from coreagent_sdk._attach._client import dial_base

    assert dial_base(url) == base == _split_base(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://999.1.1.1",  # all digits: an IPv4 address httpx refuses, never the match's
        "http://p-1.sim:0",
        "http://p-1.sim:65536",
        "http://-p.sim",
        "http://p-.sim",
        "http://a..b",
        "http://" + "a" * 64 + ".sim",  # a label past 63 characters: left to the parsers
        "http://P-1.sim",  # upper case: left to the parsers (which accept it)
        "http://xn--zz.test",  # a punycode label httpx cannot decode: refused by the parsers
        "http://a.xn--zz",
        "http://p-1.sim/a b",
        "http://p-1.sim?x=1",
        "http://xn--zz.sim",  # an A-label whose punycode does not decode: httpx refuses it
        "http://xn--bcher-kva.sim",  # a well-formed A-label (bücher): httpx takes it
        "http://a--b.sim/x--y",
    ],
)
def test_edges_of_the_plain_shape_are_judged_as_the_parsers_judge_them(url: str) -> None:
    assert (endpoint_problem(url) is None) is (_parsed_problem(url) is None), url


def test_a_host_with_a_double_hyphen_is_left_to_the_parsers_whose_idna_codec_judges_it() -> None:
    from coreagent_sdk._http._endpoint import plain_endpoint

    # One match cannot tell a well-formed IDNA A-label from one httpx cannot encode.
    assert not plain_endpoint("http://xn--zz.sim")
    assert not plain_endpoint("http://a--b.sim")
    assert endpoint_problem("http://xn--zz.sim") is not None
    assert plain_endpoint("http://a-b.sim/x--y")  # in the path, a double hyphen is plain
