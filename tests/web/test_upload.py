"""Uploads through /legacy/ with real twine: tokens, ownership, Warehouse's checks, and
that a refused upload leaves nothing behind."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from opmarket.cli._demo import upload_wheel

from .conftest import BIN, Market, Wheels, clean_env, twine


@pytest.mark.slow
def test_twine_upload_with_a_token_is_validated_and_listed(
    uploaded: Market, wheels: Wheels
) -> None:
    status, _headers, body = uploaded.get("/simple/opm-double/")
    assert status == 200
    assert wheels.double_1_0.name in body.decode()
    package = uploaded.json("/api/packages/opm-double")
    assert package["owner"] == "alice"
    assert package["ops"] == ["Test>Double"]
    steps = {s["name"]: s["status"] for s in package["files"][0]["steps"]}
    assert steps["conformance"] == "passed" and steps["install"] == "passed"


@pytest.mark.slow
def test_identical_reupload_answers_200(uploaded: Market, wheels: Wheels) -> None:
    done = twine(uploaded, uploaded.tokens["alice"], wheels.double_1_0)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_other_contents_under_an_existing_filename_is_400(
    uploaded: Market, wheels: Wheels, tmp_path: Path
) -> None:
    changed = tmp_path / wheels.double_1_0.name
    shutil.copyfile(wheels.double_1_0, changed)
    with zipfile.ZipFile(changed, "a") as zf:
        zf.writestr("opm_double/extra.txt", "different bytes")
    before = uploaded.blobs()
    done = twine(uploaded, uploaded.tokens["alice"], changed)
    assert done.returncode != 0
    assert "400" in done.stdout + done.stderr
    # twine shows the status line only; the body says why (what --skip-existing reads).
    status, body = upload_wheel(uploaded.url, uploaded.tokens["alice"], changed)
    assert status == 400 and "File already exists" in body
    assert uploaded.blobs() == before


@pytest.mark.slow
def test_a_wrong_token_is_refused_and_nothing_is_stored(market: Market, wheels: Wheels) -> None:
    before = market.blobs()
    done = twine(market, "opm-not-a-real-token", wheels.double_1_1)
    assert done.returncode != 0 and "403" in done.stdout + done.stderr
    assert market.blobs() == before
    status, _, _ = market.get("/api/packages/opm-double")
    files = (
        [f["filename"] for f in market.json("/api/packages/opm-double")["files"]]
        if status == 200
        else []
    )
    assert wheels.double_1_1.name not in files


@pytest.mark.slow
def test_another_users_project_is_403_and_nothing_is_stored(
    uploaded: Market, wheels: Wheels
) -> None:
    before = uploaded.blobs()
    done = twine(uploaded, uploaded.tokens["bob"], wheels.double_for_bob)
    assert done.returncode != 0 and "403" in done.stdout + done.stderr
    assert "belongs to another user" in done.stdout + done.stderr
    assert uploaded.blobs() == before
    files = [f["filename"] for f in uploaded.json("/api/packages/opm-double")["files"]]
    assert wheels.double_for_bob.name not in files


@pytest.mark.slow
@pytest.mark.parametrize(
    ("which", "why"),
    [
        ("bomb", "zip bomb"),
        ("traversal", "path traversal"),
        ("symlink", "symbolic link"),
    ],
)
def test_unsafe_archives_are_refused_and_nothing_is_stored(
    market: Market, wheels: Wheels, which: str, why: str
) -> None:
    wheel = getattr(wheels, which)
    before = market.blobs()
    done = twine(market, market.tokens["bob"], wheel)
    assert done.returncode != 0 and "400" in done.stdout + done.stderr
    assert why in done.stdout + done.stderr
    assert market.blobs() == before
    name = wheel.name.split("-")[0].replace("_", "-")
    status, _, _ = market.get(f"/api/packages/{name}")
    assert status == 404


@pytest.mark.slow
def test_a_kernel_that_disagrees_with_its_reference_is_rejected(
    market: Market, wheels: Wheels
) -> None:
    done = twine(market, market.tokens["bob"], wheels.wrong)
    # The upload answers with the verdict: 400, and twine --verbose prints the reason.
    assert done.returncode == 1, done.stdout + done.stderr
    assert "400 Bad Request" in done.stdout + done.stderr
    assert "differs from the reference" in done.stdout + done.stderr
    entry = market.wait_for("opm-wrong", wheels.wrong.name)
    assert entry["status"] == "rejected"
    assert "differs from the reference" in entry["log"]
    assert market.get("/simple/opm-wrong/")[0] == 404
    assert market.get(entry["url"])[0] == 404  # a rejected wheel is never served
    assert "opm-wrong" not in market.get("/simple/")[2].decode()


@pytest.mark.slow
def test_compat_and_version_policy_against_the_previous_release(
    uploaded: Market, wheels: Wheels
) -> None:
    for wheel, exit_code in ((wheels.double_1_1, 0), (wheels.double_breaking, 1)):
        done = twine(uploaded, uploaded.tokens["alice"], wheel)
        assert done.returncode == exit_code, done.stdout + done.stderr
    ok = uploaded.wait_for("opm-double", wheels.double_1_1.name)
    assert ok["status"] == "validated", ok["log"]
    assert ok["compat"]["compatible"] is True
    breaking = uploaded.wait_for("opm-double", wheels.double_breaking.name)
    assert breaking["status"] == "rejected"
    assert breaking["compat"]["compatible"] is False
    assert "[failed] version policy" in breaking["log"]
    assert "2.0.0" in breaking["log"]  # the smallest honest version


@pytest.mark.slow
def test_uv_publish_with_a_token(uploaded: Market, wheels: Wheels) -> None:
    uv = BIN / "uv"
    done = subprocess.run(
        [
            str(uv),
            "publish",
            "--publish-url",
            f"{uploaded.url}/legacy/",
            "--token",
            uploaded.tokens["alice"],
            "--trusted-publishing",
            "never",
            str(wheels.double_uv),
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    entry = uploaded.wait_for("opm-double", wheels.double_uv.name)
    assert entry["status"] == "validated", entry["log"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ({}, b"", 401),  # no credentials
        ({"Authorization": "Bearer x"}, b"", 401),
        ({"Authorization": "Basic !!!"}, b"", 401),
        ({"Authorization": "Basic X190b2tlbl9f"}, b"", 401),  # "__token__" without a colon
        ({"Content-Type": "multipart/form-data; boundary=zz"}, b"--zz\r\ngarbage", 400),
        ({"Content-Type": "text/plain"}, b"hello", 400),
        (
            {"Content-Type": "multipart/form-data; boundary=zz"},
            b'--zz\r\nContent-Disposition: form-data; name=":action"\r\n\r\n'
            b"file_upload\r\n--zz--\r\n",
            400,
        ),  # no file
    ],
)
def test_bad_requests_get_an_error_not_a_crash(
    market: Market, headers: dict[str, str], body: bytes, status: int
) -> None:
    if "Authorization" not in headers and status != 401:
        token = base64.b64encode(f"__token__:{market.tokens['bob']}".encode()).decode()
        headers = {**headers, "Authorization": f"Basic {token}"}
    request = urllib.request.Request(
        f"{market.url}/legacy/", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            got, text = r.status, r.read()
    except urllib.error.HTTPError as exc:
        got, text = exc.code, exc.read()
    assert got == status, text
    assert set(json.loads(text)["error"]) == {"status", "code", "message"}
    assert market.get("/simple/")[0] == 200  # still serving


@pytest.mark.slow
def test_uploads_of_unknown_length_are_refused(market: Market) -> None:
    import http.client

    host, port = market.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    token = base64.b64encode(f"__token__:{market.tokens['bob']}".encode()).decode()
    conn.request(
        "POST",
        "/legacy/",
        body=iter([b"--zz\r\n", b"x" * 1000]),
        headers={
            "Authorization": f"Basic {token}",
            "Content-Type": "multipart/form-data; boundary=zz",
        },
        encode_chunked=True,
    )
    response = conn.getresponse()
    assert response.status == 411
    conn.close()


def _last_used(market: Market, token: str) -> object:
    from sqlalchemy import select

    from opmarket.web._app import open_state
    from opmarket.web._auth import token_digest
    from opmarket.web._settings import Settings
    from opmarket.web.catalog._models import Token

    url = market.env.get("OPMARKET_DATABASE_URL", "")
    state = open_state(Settings(data_dir=market.data, database_url=url, validation_workers=0))
    try:
        with state.db.session() as session:
            return session.scalar(
                select(Token.last_used).where(Token.digest == token_digest(token))
            )
    finally:
        state.db.dispose()


@pytest.mark.slow
def test_a_token_is_marked_used_at_most_once_a_minute(uploaded: Market, wheels: Wheels) -> None:
    # Writing last_used on every upload took the database's write lock for each upload.
    token = uploaded.tokens["alice"]
    status, body = upload_wheel(uploaded.url, token, wheels.double_1_0)  # identical: 200
    assert status == 200, body
    first = _last_used(uploaded, token)
    assert first is not None
    status, body = upload_wheel(uploaded.url, token, wheels.double_1_0)
    assert status == 200, body
    assert _last_used(uploaded, token) == first
