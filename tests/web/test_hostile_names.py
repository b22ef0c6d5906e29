"""Hostile uploads, second campaign: names that belong to others. An upload that claims the
name of a project the index's own software depends on (numpy, packaging) is refused; a
plugin wheel that ships another distribution's import names or a ``.pth`` file is rejected;
and a dependency from the index that ships ``packaging/`` cannot stand in for the harness's
own (it forged its dependent's verdict)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from opmarket.cli._demo import upload_wheel
from opmarket.web import Limits, validate_wheel
from opmarket.web.sandbox._run import sandbox_problem
from opmarket.web.validation._deps import IndexWheel

from .conftest import Market, start_market
from .plugins import build_plugin, handmade_wheel

OP = "Test>Names"

# Imported by the harness before the fix (the dependencies folder came first on sys.path).
_FAKE_PACKAGING = b"""
import sys
print("FORGED packaging imported", file=sys.stderr)
"""


class Folder:
    """Wheels in a folder as the index's validated files: the dependency source."""

    def __init__(self, *wheels: Path) -> None:
        self.wheels = wheels

    def find(self, req: Requirement) -> IndexWheel | None:
        for wheel in self.wheels:
            name, version = wheel.name.split("-")[:2]
            if canonicalize_name(name) == canonicalize_name(req.name):
                meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
                return IndexWheel(wheel.name, digest, version, meta.encode())
        return None

    def projects(self, names: set[str]) -> set[str]:
        return names & {str(canonicalize_name(w.name.split("-")[0])) for w in self.wheels}

    def fetch(self, candidate: IndexWheel, folder: Path) -> Path:
        (wheel,) = [w for w in self.wheels if w.name == candidate.filename]
        return Path(shutil.copy(wheel, folder / wheel.name))


needs_sandbox = pytest.mark.skipif(bool(sandbox_problem(Limits())), reason="no sandbox here")


@pytest.mark.slow
@needs_sandbox
def test_a_dependency_cannot_stand_in_for_the_harnesss_packaging(tmp_path: Path) -> None:
    dep = handmade_wheel(
        tmp_path,
        "opm-names-dep",
        "1.0.0",
        {"packaging/__init__.py": _FAKE_PACKAGING, "packaging/utils.py": _FAKE_PACKAGING},
    )
    wrong = build_plugin(  # its kernel doubles where the reference triples: must fail
        tmp_path,
        "opm-names-user",
        "1.0.0",
        op_name=OP,
        factor=3,
        kernel_factor=2,
        dependencies=("opmarket", "opm-names-dep"),
    )
    verdict = validate_wheel(wrong, limits=Limits(timeout_s=120), dependencies=Folder(dep))
    log = verdict.log_text()
    assert f"from this index: {dep.name}" in log
    assert "FORGED" not in log, log
    assert verdict.status == "rejected" and [s.name for s in verdict.failures] == ["conformance"], (
        log
    )
    # And such a dependency is not validated in the first place.
    own = validate_wheel(dep, limits=Limits(timeout_s=120))
    (failed,) = own.failures
    assert failed.name == "inspect"
    assert failed.log[0].startswith("packaging: an import name that packaging installs"), own


@pytest.mark.slow
def test_a_plugin_may_not_ship_a_pth_file_or_numpy(tmp_path: Path) -> None:
    wheel = handmade_wheel(
        tmp_path,
        "opm-names-pth",
        "1.0.0",
        {
            "opm_names_pth.pth": b"import os; os.system('id')\n",
            "opm_names_pth-1.0.0.data/purelib/numpy/__init__.py": b"",
        },
    )
    verdict = validate_wheel(wheel, limits=Limits(timeout_s=60))
    (failed,) = verdict.failures
    assert failed.name == "inspect" and len(failed.log) == 2, failed
    assert failed.log[0].startswith("numpy: an import name that numpy installs")
    assert failed.log[1].startswith("opm_names_pth.pth: a .pth file runs code")


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    yield from start_market(
        tmp_path_factory.mktemp("names"),
        validation_workers=0,
        flags=("--upload-wait", "0"),
        env={"OPMARKET_ALLOWED_NAMES": "six"},
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["numpy", "packaging", "opmarket", "pluggy", "torch"])
def test_the_names_the_index_depends_on_are_refused(
    market: Market, tmp_path: Path, name: str
) -> None:
    wheel = handmade_wheel(tmp_path, name, "99.0", {f"{name}-99.0.pth": b"import os\n"})
    status, body = upload_wheel(market.url, market.tokens["alice"], wheel)
    assert status == 403, body
    error = json.loads(body)
    assert error["error"]["code"] == "reserved-name", body
    assert f"project {name!r} is a name this index's own software depends on" in body
    assert name not in market.get("/simple/")[2].decode().split()


@pytest.mark.slow
def test_the_operator_may_allow_a_reserved_name(market: Market, tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "six", "99.0", {})
    status, body = upload_wheel(market.url, market.tokens["alice"], wheel)
    assert status == 200, body


@pytest.mark.slow
def test_a_plugin_may_not_ship_another_projects_package(tmp_path: Path) -> None:
    data = tmp_path / "market"
    data.mkdir()
    with contextlib.closing(start_market(data, validation_workers=1)) as running:
        market = next(running)
        victim = handmade_wheel(tmp_path, "opm-victim", "1.0", {})
        thief = handmade_wheel(tmp_path, "opm-thief", "1.0", {"opm_victim/__init__.py": b"x"})
        upload_wheel(market.url, market.tokens["alice"], victim)
        upload_wheel(market.url, market.tokens["bob"], thief)
        entry = market.wait_for("opm-thief", thief.name)
    assert entry["status"] == "rejected"
    assert "opm_victim: the package of project 'opm-victim' on this index" in entry["log"]
