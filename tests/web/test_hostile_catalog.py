"""A plugin that lies about itself to the catalog, against a real ``opmarket serve`` with a
validation worker (issue 20, finding 4): its process writes the report the sandbox sends
back, so it can list any op and kernel it likes there. The catalog lists what its checked
manifest declares, and a bounded number of rows."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from opmarket.cli._demo import upload_wheel
from opmarket.web.validation._shown import MAX_KERNEL_ROWS

from .conftest import Market, start_market
from .plugins import build_plugin, plugin_source

pytestmark = pytest.mark.slow

# Appended to an honest plugin: once loaded by the sandbox's probe (its __main__), it
# rewrites the report on its way out, as any plugin code can.
_FORGE = """

import json as _json
import sys as _sys

_main = _sys.modules.get("__main__")


class _Forger:
    def __getattr__(self, name):
        return getattr(_json, name)

    def dump(self, result, out):
        result["ops"] = result.get("ops", []) + [
            {{"name": n, "signature": n + "(x: T) -> (y: T)", "summary": "forged"}}
            for n in ("Test>Double", "ZeroOut", "Fake>GpuOnly")
        ]
        result["kernels"] = result.get("kernels", []) + {rows}
        result["registered_kernels"] = result.get("registered_kernels", []) + [
            "Fake>GpuOnly\\tGPU"
        ]
        _json.dump(result, out)


if hasattr(_main, "probe") and hasattr(_main, "_plugin"):  # the sandbox's plugin process
    _main.json = _Forger()
"""
_OTHERS = """[
    {"op": o, "device": d, "dtypes": "T=float", "status": "passed", "message": ""}
    for o, d in (("Test>Double", "CPU"), ("ZeroOut", "CPU"), ("Fake>GpuOnly", "GPU"),
                 ("Test>Liar", "GPU"))
]"""
_FLOOD = f"""[
    {{"op": "Test>Flood", "device": "CPU", "dtypes": f"T=float{{i}}", "status": "passed",
      "message": ""}}
    for i in range({MAX_KERNEL_ROWS + 1})
]"""


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    yield from start_market(
        tmp_path_factory.mktemp("catalog"), validation_workers=1, flags=("--upload-wait", "120")
    )


def _liar(tmp_path: Path, dist: str, op: str, rows: str) -> Path:
    honest = plugin_source(op, 2)
    return build_plugin(
        tmp_path,
        dist,
        "1.0.0",
        op_name=op,
        source=honest + _FORGE.format(rows=rows),
        manifest_source=honest,
    )


def test_the_catalog_lists_the_manifests_ops_not_the_plugins_report(
    market: Market, tmp_path: Path
) -> None:
    wheel = _liar(tmp_path, "opm-liar", "Test>Liar", _OTHERS)
    status, body = upload_wheel(market.url, market.tokens["alice"], wheel)
    assert status == 200 and '"validated"' in body, body
    detail: dict[str, Any] = market.json("/api/packages/opm-liar")
    assert [o["name"] for o in detail["op_details"]] == ["Test>Liar"]
    assert {(k["op"], k["device"]) for k in detail["kernels"]} == {("Test>Liar", "CPU")}
    for other in ("Test%3EDouble", "ZeroOut", "Fake%3EGpuOnly"):
        status, _, page = market.get(f"/op/{other}/")
        assert b"opm-liar" not in page, other
    log = market.wait_for("opm-liar", wheel.name)["log"]
    assert "kernel result(s) for kernels it does not declare: not listed" in log


def test_more_kernel_rows_than_the_catalog_lists_reject_the_file(
    market: Market, tmp_path: Path
) -> None:
    """60,000 rows made an 8.3 MB project page that took 9.8 s to render."""
    wheel = _liar(tmp_path, "opm-flood", "Test>Flood", _FLOOD)
    status, body = upload_wheel(market.url, market.tokens["alice"], wheel)
    assert status == 400 and f"at most 1000 ops and {MAX_KERNEL_ROWS} kernel" in body, body
    detail = market.json("/api/packages/opm-flood")
    assert len(detail["kernels"]) <= MAX_KERNEL_ROWS


def test_a_project_page_is_rendered_once_per_change_of_the_project(market: Market) -> None:
    """A row changed behind the index's back (no change logged) does not show; once a
    change is logged, it does: the page is not rendered again for each GET."""
    status, _, kept = market.get("/project/opm-liar/")
    assert status == 200 and b"Test&gt;Liar" in kept
    db = market.data / "opmarket.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE op_entries SET signature = 'Changed behind its back.'")
    for _ in range(5):
        assert market.get("/project/opm-liar/")[2] == kept
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE projects SET serial = serial + 1 WHERE normalized = 'opm-liar'")
    deadline = time.monotonic() + 30
    while b"Changed behind its back." not in market.get("/project/opm-liar/")[2]:
        assert time.monotonic() < deadline, "the change never showed"
        time.sleep(0.2)
