"""The endpoint policy shared by the hub and the caller."""

from __future__ import annotations

import pytest

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
