"""A wheel's declared dependencies: the warm environment's, or this index's wheels
unpacked beside it in the sandbox (no installer, no network in the sandbox)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from opmarket.web.validation._deps import requirements_of

from .conftest import Market, start_market, twine
from .plugins import build_plugin, plugin_source

# The dependent plugin's kernel uses a helper of its base plugin's package.
_NEEDS_BASE = "import opm_base\n\n" + plugin_source("Test>Needs", 2).replace(
    "return x * 2\n", "return x * opm_base.FACTOR\n", 1
)
_BASE = plugin_source("Test>Base", 3) + "\nFACTOR = 2\n"


def test_requirements_apply_markers_and_leave_extras_out() -> None:
    metadata = (
        b"Metadata-Version: 2.1\nName: a\nVersion: 1\n"
        b"Requires-Dist: opmarket\n"
        b"Requires-Dist: nvidia-cuda-runtime<14,>=13; extra == 'cuda13'\n"
        b"Requires-Dist: never-here; python_version < '3'\n"
        b"Requires-Dist: not a requirement !\n"
    )
    reqs, bad = requirements_of(metadata)
    assert [str(r) for r in reqs] == ["opmarket"]
    assert bad == ["not a requirement !"]


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Market]:
    yield from start_market(tmp_path / "market", validation_workers=1)


@pytest.mark.slow
def test_a_dependency_on_this_index_is_unpacked_beside_the_wheel(
    fresh: Market, tmp_path: Path
) -> None:
    market, token = fresh, fresh.tokens["alice"]
    needs = {
        v: build_plugin(
            tmp_path,
            "opm-needs",
            v,
            op_name="Test>Needs",
            source=_NEEDS_BASE,
            manifest_source=plugin_source("Test>Needs", 2),
            dependencies=("opmarket", "opm-base>=1"),
        )
        for v in ("1.0.0", "1.0.1")
    }
    base = build_plugin(tmp_path, "opm-base", "1.0.0", op_name="Test>Base", source=_BASE)
    # Before its dependency is on the index: rejected, naming what is missing.
    assert twine(market, token, needs["1.0.0"]).returncode == 1  # the upload's answer
    entry = market.wait_for("opm-needs", needs["1.0.0"].name)
    assert entry["status"] == "rejected"
    assert "missing: opm-base>=1 (not installed; not on this index)" in entry["log"]
    # Once it is validated there, the next release loads with it and passes.
    assert twine(market, token, base).returncode == 0
    assert market.wait_for("opm-base", base.name)["status"] == "validated"
    assert twine(market, token, needs["1.0.1"]).returncode == 0
    entry = market.wait_for("opm-needs", needs["1.0.1"].name)
    assert entry["status"] == "validated", entry["log"]
    assert f"from this index: {base.name}" in entry["log"]
    assert "from the validation environment: opmarket" in entry["log"]
