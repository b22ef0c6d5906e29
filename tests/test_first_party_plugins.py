"""The first-party plugins in plugins/, installed by scripts/setup as a user installs them:
discovered through their entry points, loaded, and every kernel against its reference."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from opmarket.registry import check_conformance, isolated_registry, load_plugins
from tests.first_party import FIRST_PARTY, is_gpu_companion, needs_first_party

REPO = Path(__file__).resolve().parents[1]
pytestmark = needs_first_party


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OPMARKET_PLUGINS", raising=False)
    monkeypatch.delenv("OPMARKET_DISABLE_PLUGINS", raising=False)
    monkeypatch.setenv("OPMARKET_CACHE_DIR", str(tmp_path / "cache"))


def test_every_first_party_plugin_is_discovered_and_loads() -> None:
    assert {"atan", "custom_call"} <= set(FIRST_PARTY)
    with isolated_registry(plugins=True):
        infos = {p.name: p for p in load_plugins()}
    for name in FIRST_PARTY:
        companion = is_gpu_companion(name)
        if companion and name not in infos:
            continue  # a GPU companion: scripts/setup skips it where there is no nvcc
        info = infos[name]
        assert (info.status, info.error) == ("loaded", ""), name
        assert info.distribution == f"opmarket-{name.replace('_', '-')}"
        # A module, or a C-ABI library in the plugin's package (opmarket_bitcast:lib...so).
        assert info.module.partition(":")[0] == f"opmarket_{name}"
        if companion:  # GPU kernels for its base plugin's ops, no op of its own
            assert info.ops == (), info.ops
            continue
        assert info.ops and all(op.startswith("Opm>") for op in info.ops), info.ops


def test_every_kernel_of_every_first_party_plugin_matches_its_reference() -> None:
    with isolated_registry(plugins=FIRST_PARTY) as reg:
        infos = load_plugins()
        ops = sorted(op for info in infos for op in info.ops)
        for op in ops:
            assert reg.reference(op) is not None, f"{op} has no reference"
            assert reg.input_generator(op) is not None, f"{op} has no input generator"
            assert reg.kernels(op), f"{op} has no kernel"
        report = check_conformance(ops, trials=3)
    report.raise_for_failures()
    assert report.results and all(r.status == "passed" for r in report.results), str(report)
    assert {r.op for r in report.results} == set(ops)


def test_the_environment_variables_limit_and_disable_discovery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPMARKET_PLUGINS", "atan")
    with isolated_registry(plugins=True) as reg:
        assert [p.name for p in load_plugins()] == ["atan"]
        assert "Opm>Atan" in reg and "Opm>DoCustomCall" not in reg
    monkeypatch.setenv("OPMARKET_DISABLE_PLUGINS", "1")
    with isolated_registry(plugins=True) as reg:
        assert load_plugins() == []
        assert "Opm>Atan" not in reg


def test_first_party_plugins_import_only_the_sdk() -> None:
    # What a third-party plugin may rely on: opmarket.sdk is the plugin API; the run time
    # (opmarket.registry) and the rest may change under it.
    found = []
    for path in sorted((REPO / "plugins").glob("*/src/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            found += [
                f"{path.relative_to(REPO)}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] == "opmarket" and not name.startswith("opmarket.sdk")
            ]
    assert found == []
