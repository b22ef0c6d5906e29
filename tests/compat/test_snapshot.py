"""Snapshots of a release from a module, a wheel or a distribution."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from opmarket.compat import take_snapshot
from opmarket.sdk import DocumentError, DType, OpSet

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


def test_wheel_and_distribution(
    release: Release, wheel: Callable[[OpSet], Path], installed: Callable[[OpSet], Path]
) -> None:
    assert take_snapshot(str(wheel(release("1.5.0")))).version == "1.5.0"
    installed(release("1.6.0"))
    assert take_snapshot("opm-zero").version == "1.6.0"


def test_module_without_ops(module_dir: Path) -> None:
    (module_dir / "snapmod_empty.py").write_text("X = 1\n", encoding="utf-8")
    with pytest.raises(DocumentError, match=r"registers no ops and ships no opmarket\.opset"):
        take_snapshot("snapmod_empty")
    with pytest.raises(DocumentError, match="not a wheel, an importable module or an installed"):
        take_snapshot("snapmod_missing")


def test_module_with_a_register_hook_is_seen_as_the_registry_sees_it(module_dir: Path) -> None:
    (module_dir / "snapmod_hook.py").write_text(
        "import numpy as np\n"
        "from opmarket.sdk import hookimpl, kernel, op\n"
        "TWICE = op('Snap>Twice').input('x: T').output('y: T').attr('T: {float, int32}')"
        ".build()\n"
        "@kernel('Snap>Twice', constraints={'T': ['float']})\n"
        "def twice(x):\n"
        "    return 2 * x\n"
        "NOT_REGISTERED = op('Snap>Other').build()\n"
        "@hookimpl\n"
        "def register(register):\n"
        "    register(TWICE, twice)\n",
        encoding="utf-8",
    )
    opset = take_snapshot("snapmod_hook")
    assert [o.name for o in opset] == ["Snap>Twice"]
    (k,) = opset.kernels
    assert (k.op, k.device, k.constraint("T")) == ("Snap>Twice", "CPU", (DType.FLOAT,))


def test_a_kernel_for_a_type_the_op_forbids_is_refused(module_dir: Path) -> None:
    (module_dir / "snapmod_bad.py").write_text(
        "from opmarket.sdk import hookimpl, kernel, op\n"
        "OP = op('Snap>Bad').input('x: T').output('y: T').attr('T: {float}').build()\n"
        "@kernel('Snap>Bad', constraints={'T': ['int32']})\n"
        "def k(x):\n"
        "    return x\n"
        "@hookimpl\n"
        "def register(register):\n"
        "    register(OP, k)\n",
        encoding="utf-8",
    )
    with pytest.raises(DocumentError, match="snapmod_bad"):
        take_snapshot("snapmod_bad")
