"""Snapshots of a release from a module, a wheel or a distribution."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opmarket.compat import take_snapshot
from opmarket.sdk import DocumentError, OpSet

Release = Callable[..., OpSet]


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("snapmod")]:
        del sys.modules[name]


def test_module_objects(module_dir: Path) -> None:
    (module_dir / "snapmod_objects.py").write_text(
        "from opmarket.sdk import DType, KernelDef, OpSet, op\n"
        "B = op('Snap>B').output('y: float')\n"
        "A = op('Snap>A').input('x: T').output('y: T').attr('T: type').build()\n"
        "K = KernelDef('Snap>A', 'CPU', (('T', (DType.FLOAT,)),))\n"
        "MORE = OpSet.of([op('Snap>C').build()])\n",
        encoding="utf-8",
    )
    opset = take_snapshot("snapmod_objects", version="0.2.0")
    assert [o.name for o in opset] == ["Snap>A", "Snap>B", "Snap>C"]
    assert [k.op for k in opset.kernels] == ["Snap>A"]
    assert opset.version == "0.2.0"


def test_package_manifest_wins(module_dir: Path, release: Release) -> None:
    from opmarket.sdk import opset_to_json

    pkg = module_dir / "snapmod_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "opmarket.opset.json").write_text(opset_to_json(release("3.0.0")), encoding="utf-8")
    opset = take_snapshot("snapmod_pkg")
    assert opset.version == "3.0.0" and len(opset.kernels) == 1


def test_wheel_and_distribution(release: Release, wheel: Callable[[OpSet], Path],
                                installed: Callable[[OpSet], Path]) -> None:  # fmt: skip
    assert take_snapshot(str(wheel(release("1.5.0")))).version == "1.5.0"
    installed(release("1.6.0"))
    assert take_snapshot("opm-zero").version == "1.6.0"


def test_module_without_ops(module_dir: Path) -> None:
    (module_dir / "snapmod_empty.py").write_text("X = 1\n", encoding="utf-8")
    with pytest.raises(DocumentError, match="defines no ops"):
        take_snapshot("snapmod_empty")
    with pytest.raises(DocumentError, match="not an installed distribution, wheel or importable"):
        take_snapshot("snapmod_missing")
