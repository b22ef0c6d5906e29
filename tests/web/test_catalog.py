"""The catalog: JSON API with filters, op pages' data, OpenAPI, escaping of what authors
wrote."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from .conftest import Market, Wheels, twine
from .plugins import handmade_wheel


@pytest.fixture(scope="module")
def catalog(uploaded: Market, wheels: Wheels) -> Market:
    assert twine(uploaded, uploaded.tokens["bob"], wheels.wrong).returncode == 1  # rejected
    uploaded.wait_for("opm-wrong", wheels.wrong.name)
    return uploaded


@pytest.mark.slow
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("q=Double", {"opm-double"}),
        ("q=test%3Ewrong", {"opm-wrong"}),  # by op name, any case
        ("q=double&device=CPU", {"opm-double"}),
        ("device=GPU", set()),
        ("q=opm-&dtype=int32", {"opm-double", "opm-wrong"}),
        ("dtype=half", set()),
        ("status=rejected&q=opm-wrong", {"opm-wrong"}),
        ("status=validated&q=opm-wrong", set()),
    ],
)
def test_search_filters(catalog: Market, query: str, expected: set[str]) -> None:
    result = catalog.json(f"/api/packages?{query}")
    found = {p["normalized"] for p in result["packages"]}
    assert found == expected and result["total"] == len(expected)


@pytest.mark.slow
def test_search_pages(catalog: Market) -> None:
    everything = catalog.json("/api/packages?q=opm-")
    assert everything["total"] >= 2
    names = [p["normalized"] for p in everything["packages"]]
    assert names == sorted(names)
    second = catalog.json("/api/packages?q=opm-&offset=1&limit=1")
    assert second["total"] == everything["total"]
    assert [p["normalized"] for p in second["packages"]] == names[1:2]
    assert catalog.get("/api/packages?limit=0")[0] == 422
    # Cursor paging walks the same names as offset paging, one page at a time.
    walked: list[str] = []
    after = ""
    while True:
        page = catalog.json(f"/api/packages?q=opm-&limit=1&after={after}")
        assert page["total"] == everything["total"]
        walked += [p["normalized"] for p in page["packages"]]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert walked == names
    # Past any SQL integer, or not a digit 0-9: a clear 400, not a server error.
    status, _, body = catalog.get(f"/api/packages?offset={10**30}")
    assert status == 400 and b"the listing ends at" in body, body
    status, _, body = catalog.get(f"/?page={10**30}")
    assert status == 400 and b"the listing ends at" in body, body
    status, _, body = catalog.get("/api/packages?cuda=%C2%B2")  # "²" is str.isdigit()
    assert status == 400 and b"CUDA major version" in body, body
    for path in ("/api/packages?after=a%00", "/api/packages/opm%00x", "/?status=%00"):
        status, _, body = catalog.get(path)  # PostgreSQL refuses NUL in a string: not a 500
        assert status == 400 and b"NUL" in body, (path, body)


@pytest.mark.slow
def test_op_page_data(catalog: Market) -> None:
    op = catalog.json(f"/api/ops/{quote('Test>Double', safe='')}")
    assert op["name"] == "Test>Double"
    provider = op["providers"][0]
    assert provider["normalized"] == "opm-double"
    assert provider["signature"].startswith("Test>Double(x: T) -> (y: T)")
    assert {(k["device"], k["dtypes"], k["status"]) for k in provider["kernels"]} >= {
        ("CPU", "T=float", "passed"),
        ("CPU", "T=int32", "passed"),
    }
    assert catalog.get("/api/ops/NoSuchOp")[0] == 404
    for _ in range(2):  # a package that is not there: its page says so, each time
        status, _, page = catalog.get("/project/OPM_No.Such/")
        assert status == 404 and b"No package OPM_No.Such here." in page


@pytest.mark.slow
def test_rejected_package_shows_its_failing_findings(catalog: Market) -> None:
    package = catalog.json("/api/packages/opm-wrong")
    assert package["status"] == "rejected"
    failed = [s for s in package["files"][0]["steps"] if s["status"] == "failed"]
    assert [s["name"] for s in failed] == ["conformance"]
    assert any("differs from the reference" in line for line in failed[0]["log"])


@pytest.mark.slow
def test_openapi_documents_the_json_api(catalog: Market) -> None:
    schema = catalog.json("/openapi.json")
    for path in (
        "/api/packages",
        "/api/packages/{name}",
        "/api/ops/{name}",
        "/legacy/",
        "/simple/{project}/",
    ):
        assert path in schema["paths"], path
    assert "PackageDetail" in schema["components"]["schemas"]


@pytest.mark.slow
def test_what_authors_write_is_escaped(catalog: Market, tmp_path: Path) -> None:
    evil = handmade_wheel(
        tmp_path,
        "opm-xss",
        "1.0.0",
        {},
        metadata=(
            "Metadata-Version: 2.1\nName: opm-xss\nVersion: 1.0.0\n"
            "Summary: <script>alert('x')</script>\n"
            "Description-Content-Type: text/markdown\n\n"
            "# Read me\n\n<script>alert('readme')</script>\n"
        ),
    )
    assert twine(catalog, catalog.tokens["bob"], evil).returncode == 1  # not a plugin
    catalog.wait_for("opm-xss", evil.name)
    for path in ("/?q=xss", "/project/opm-xss/"):
        page = catalog.get(path)[2].decode()
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
        assert "<script>" not in page
    readme = catalog.get("/project/opm-xss/")[2].decode().split('<div class="readme">')[1]
    assert ">Read me<" in readme and "<script" not in readme  # rendered, sanitized


def test_a_capped_count_reads_as_at_least_that_many() -> None:
    from opmarket.web.routes._pages import DEVICES, DTYPES, STATUSES, _env

    home = _env.get_template("home.html")
    common = {"packages": [], "devices": DEVICES, "dtypes": DTYPES, "statuses": STATUSES}
    capped = home.render(total=1000, capped=True, page=1, pages=2, query="q=conv", **common)
    assert "1,000+ packages · page 1 of 2+" in capped and 'rel="next"' in capped
    exact = home.render(total=1234, capped=False, page=1, pages=25, query="", **common)
    assert "1,234 packages · page 1 of 25<" in exact
