"""PEP 691 content negotiation, as a table."""

from __future__ import annotations

import pytest

from opmarket.web.routes._negotiate import HTML, HTML_V1, JSON_V1, negotiate

CASES = [
    (None, None, HTML),
    ("", None, HTML),
    ("*/*", None, HTML),
    (f"{JSON_V1}, {HTML_V1}; q=0.1, text/html; q=0.01", None, JSON_V1),  # pip
    (f"{JSON_V1}, {HTML_V1};q=0.2, text/html;q=0.01", None, JSON_V1),  # uv
    (f"{JSON_V1};q=0.5, text/html", None, HTML),
    (f"{JSON_V1};q=0.5, text/*;q=0.4", None, JSON_V1),
    ("application/*", None, HTML_V1),  # most specific range wins: none; ties break to v1 html
    ("application/vnd.pypi.simple.latest+json", None, JSON_V1),
    (f"{JSON_V1};q=0, */*;q=0.1", None, HTML),
    ("image/png", None, None),
    (f"{JSON_V1};q=0", None, None),
    (f"{JSON_V1};q=abc", None, None),
    ("text/html", JSON_V1, JSON_V1),  # ?format= wins
    (None, "application/x-nope", None),
]


@pytest.mark.parametrize(("accept", "fmt", "expected"), CASES)
def test_negotiate(accept: str | None, fmt: str | None, expected: str | None) -> None:
    assert negotiate(accept, fmt) == expected
