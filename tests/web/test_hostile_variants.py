"""Hostile variant wheels (PEP 825) against a real ``opmarket serve``: the release's
``variants.json`` is built once per change of its project and bounded in size, and a label
keeps the meaning it was published with (issue 20, findings 3 and 11)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from opmarket.cli._demo import upload_wheel
from opmarket.web.catalog._models import File
from opmarket.web.routes import _variant_files as _variant_index
from opmarket.web.routes._variant_files import _published_order, release_variants
from opmarket.web.wheels._variants import (
    MAX_PROPERTIES,
    MAX_VARIANT_WHEELS,
    VariantError,
    check_consistent,
)

from .conftest import Market, start_market
from .gpu_wheels import gpu_plugin_wheel, nvidia_variant

pytestmark = pytest.mark.slow

DIST = "opm-var"
ANY = "opm_var-1.0.0-py3-none-any-cu13.whl"
LINUX = "opm_var-1.0.0-py3-none-manylinux_2_17_x86_64-cu13.whl"
VARIANTS = "/simple/opm-var/opm_var-1.0.0-variants.json"


def _arches(label: str, *arches: str) -> dict[str, object]:
    data = nvidia_variant(label)
    data["variants"] = {label: {"nvidia": {"sm_arch": list(arches)}}}
    return data


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    yield from start_market(
        tmp_path_factory.mktemp("variants"),
        validation_workers=1,
        flags=("--upload-wait", "120"),
    )


def _wheel(tmp: Path, filename: str, variant: dict[str, object], *requires: str) -> Path:
    return gpu_plugin_wheel(
        tmp / filename,
        DIST,
        filename.split("-")[1],
        library=None,
        gpu_kernel=False,
        requires=requires,
        filename=filename,
        variant=variant,
    )


def test_a_rejected_variant_wheel_uploaded_again_meets_the_release_of_now(
    market: Market, tmp_path: Path
) -> None:
    """Finding 11: cu13 meant sm 75 in a wheel rejected (a dependency missing then); a
    wheel saying cu13 means sm 90 was published; the first, uploaded again, was not checked
    against it, validated, and variants.json said 75_real from then on."""
    token = market.tokens["alice"]
    first = _wheel(tmp_path, ANY, _arches("cu13", "75_real"), "opm-not-yet-here>=1")
    status, body = upload_wheel(market.url, token, first)
    assert status == 400 and "rejected by validation" in body, body
    published = _wheel(tmp_path, LINUX, _arches("cu13", "90_real"))
    status, body = upload_wheel(market.url, token, published)
    assert status == 200 and '"validated"' in body, body
    status, _, before = market.get(VARIANTS)
    assert status == 200 and json.loads(before)["variants"]["cu13"]["nvidia"]["sm_arch"] == [
        "90_real"
    ]
    status, body = upload_wheel(market.url, token, first)
    assert status == 400 and "contradicts" in body, body
    assert market.get(VARIANTS)[2] == before


def test_variants_json_is_built_once_per_change_of_the_project(market: Market) -> None:
    """Finding 3: each GET merged every variant.json of the release again (9.3 s of server
    CPU for 8 wheels). It is kept until the project changes: a row changed behind the
    index's back (no change logged) does not show; once a change is logged, it does."""
    status, _, kept = market.get(VARIANTS)
    assert status == 200
    changed = json.dumps(_arches("cu13", "80_real"))
    with sqlite3.connect(market.data / "opmarket.sqlite3") as db:
        db.execute("UPDATE files SET variant = ? WHERE filename = ?", (changed, LINUX))
    for _ in range(5):
        assert market.get(VARIANTS)[2] == kept
    with sqlite3.connect(market.data / "opmarket.sqlite3") as db:
        db.execute("UPDATE projects SET serial = serial + 1 WHERE normalized = ?", (DIST,))
    deadline = time.monotonic() + 30
    while market.get(VARIANTS)[2] == kept:
        assert time.monotonic() < deadline, "the change never showed"
        time.sleep(0.2)
    assert "80_real" in market.get(VARIANTS)[2].decode()


@pytest.mark.parametrize(
    ("variant", "said"),
    [
        (
            _arches("cu13", *(f"{n}_real" for n in range(MAX_PROPERTIES + 1))),
            f"at most {MAX_PROPERTIES}",
        ),
        (
            {**_arches("cu13", "90_real"), "providers": {"nvidia": {"requires": ["x" * 70_000]}}},
            "larger than",
        ),
    ],
    ids=["properties", "bytes"],
)
def test_a_variant_json_past_the_caps_is_refused_at_upload(
    market: Market, tmp_path: Path, variant: dict[str, object], said: str
) -> None:
    wheel = _wheel(tmp_path, "opm_var-2.0.0-py3-none-any-cu13.whl", variant)
    status, body = upload_wheel(market.url, market.tokens["alice"], wheel)
    assert status == 400 and said in body, body


def test_a_release_takes_a_bounded_number_of_variant_wheels() -> None:
    one = _arches("cu13", "90_real")
    released = [
        (f"opm_var-1.0.0-py3-none-linux_{i}-cu13.whl", one) for i in range(MAX_VARIANT_WHEELS)
    ]
    with pytest.raises(VariantError, match="variant wheels already"):
        check_consistent(released, "opm_var-1.0.0-py3-none-any-cu13.whl", one)


def test_variants_json_keeps_what_a_label_was_published_with() -> None:
    """Two validated wheels that contradict each other (a race, or a row from before the
    check): the one published first decides, whatever the file names' order."""
    later = File(
        id=1, filename=ANY, variant=_arches("cu13", "75_real"), validated=datetime(2026, 2, 1)
    )
    first = File(
        id=2, filename=LINUX, variant=_arches("cu13", "90_real"), validated=datetime(2026, 1, 1)
    )
    made = release_variants(DIST, [(later, "1.0.0"), (first, "1.0.0")])["1.0.0"]
    assert json.loads(made.content)["variants"]["cu13"]["nvidia"]["sm_arch"] == ["90_real"]


def test_a_file_not_yet_validated_comes_after_the_validated_ones() -> None:
    """The simple page's merge (in Python), the variants.json route's and the upload check's
    (SQL) put a NULL validation date in one place: last, as the upload check did."""
    pending = File(id=1, filename=ANY, variant=_arches("cu13", "75_real"), validated=None)
    first = File(
        id=2, filename=LINUX, variant=_arches("cu13", "90_real"), validated=datetime(2026, 1, 1)
    )
    made = release_variants(DIST, [(pending, "1.0.0"), (first, "1.0.0")])["1.0.0"]
    assert json.loads(made.content)["variants"]["cu13"]["nvidia"]["sm_arch"] == ["90_real"]
    sql = str(select(File.id).order_by(*_published_order()))
    assert sql.endswith("ORDER BY files.validated ASC NULLS LAST, files.id ASC"), sql


def test_a_release_is_merged_once_however_many_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 4: the simple page's render and the variants.json route merged the same
    wheels each, and requests that found neither kept each merged again. Eight at once
    (behind a barrier), then the route's and the page's again: one merge."""
    calls: list[str] = []
    real = _variant_index.variants_file

    def counted(name: str, version: str, items: Any) -> Any:
        calls.append(version)
        return real(name, version, items)

    monkeypatch.setattr(_variant_index, "variants_file", counted)
    one = File(id=1, filename=ANY.replace("1.0.0", "4.0.0"), variant=_arches("cu13", "90_real"))
    two = File(id=2, filename=LINUX.replace("1.0.0", "4.0.0"), variant=_arches("cu12", "80_real"))
    rows = [(one, "4.0.0"), (two, "4.0.0")]
    barrier = threading.Barrier(8)

    def ask(_: int) -> str:
        barrier.wait()
        return release_variants(DIST, rows)["4.0.0"].sha256

    with ThreadPoolExecutor(8) as pool:
        digests = set(pool.map(ask, range(8)))
    items = [(f.filename, f.variant) for f, _ in rows]
    again = _variant_index.merged(DIST, "4.0.0", items)  # what the route asks
    assert again is not None and digests == {again.sha256}
    assert calls == ["4.0.0"]
