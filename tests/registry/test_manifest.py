"""Manifests: found beside the entry point module without importing it, and every
first-party plugin's committed manifest is what its code registers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from opmarket.registry._discovery import EntryPointRecord, scan
from opmarket.registry._manifest import manifest_path, opset_from_code, read_manifest
from opmarket.sdk import DocumentError, OpSet, opset_from_json, opset_to_json
from tests.first_party import FIRST_PARTY, is_installed, needs_first_party, skip_unless_installed

REPO = Path(__file__).resolve().parents[2]


def committed(name: str) -> OpSet:
    path = REPO / "plugins" / name / "src" / f"opmarket_{name}" / "opmarket.opset.json"
    if not path.is_file():
        pytest.fail(f"plugins/{name} has no manifest; run opmarket manifest plugins/{name}")
    return opset_from_json(path.read_text(encoding="utf-8"), source=str(path))


def installed(name: str) -> EntryPointRecord:
    """The plugin's entry point; the test skips, saying so, when it is not installed."""
    skip_unless_installed(name)
    (entry,) = [e for e in scan().entries if e.name == name]
    return entry


@pytest.mark.parametrize("name", FIRST_PARTY)
def test_each_first_party_manifest_is_what_the_code_registers(name: str) -> None:
    manifest = committed(name)
    # The entry point's value: a module, or a C-ABI library in its package (pkg:lib.so).
    code = opset_from_code(installed(name).value)
    assert [o.name for o in manifest.ops] == [o.name for o in code.ops], (
        f"plugins/{name}: the manifest is stale; run opmarket manifest plugins/{name}"
    )
    assert manifest.ops == code.ops, f"run opmarket manifest plugins/{name}"
    # Every kernel the code registers is listed; the manifest may list more only for
    # devices this machine lacks (a GPU kernel registers only where a GPU is).
    assert set(code.kernels) <= set(manifest.kernels), f"run opmarket manifest plugins/{name}"
    extra = set(manifest.kernels) - set(code.kernels)
    assert all(k.device != "CPU" for k in extra), extra


@pytest.mark.parametrize("name", FIRST_PARTY)
def test_the_installed_wheel_ships_the_committed_manifest(name: str) -> None:
    entry = installed(name)
    assert entry.distribution == f"opmarket-{name.replace('_', '-')}"
    assert entry.module == f"opmarket_{name}"
    found = read_manifest(entry)
    assert opset_to_json(OpSet(found.ops, found.kernels)) == opset_to_json(committed(name))
    assert (found.name, found.version) == (entry.distribution, entry.version)


@needs_first_party
def test_reading_manifests_imports_no_plugin() -> None:
    for name in filter(is_installed, FIRST_PARTY):  # the GPU companions where they are
        sys.modules.pop(f"opmarket_{name}", None)
        read_manifest(installed(name))
        assert f"opmarket_{name}" not in sys.modules


def test_a_plugin_without_a_manifest_is_a_document_error(tmp_path: Path) -> None:
    (tmp_path / "bare_plugin").mkdir()
    (tmp_path / "bare_plugin" / "__init__.py").write_text("")
    info = tmp_path / "bare_plugin-1.0.dist-info"
    info.mkdir()
    entry = EntryPointRecord("bare", "bare_plugin", "bare-plugin", "1.0", str(info))
    assert manifest_path(entry) is None
    with pytest.raises(DocumentError, match=r"ships no opmarket\.opset\.json"):
        read_manifest(entry)
    (tmp_path / "bare_plugin" / "opmarket.opset.json").write_text('{"format": "x"}')
    with pytest.raises(DocumentError):
        read_manifest(entry)


def test_a_module_entry_point_finds_its_packages_manifest(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "hooks.py").write_text("")
    (pkg / "opmarket.opset.json").write_text(opset_to_json(OpSet()))
    entry = EntryPointRecord(
        "pkg", "pkg_plugin.hooks", "pkg-plugin", "1.0", str(tmp_path / "pkg_plugin-1.0.dist-info")
    )
    assert manifest_path(entry) == pkg / "opmarket.opset.json"
