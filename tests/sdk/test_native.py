"""The C++ SDK: get_include(), opmarket/kernel.h (Tensor, OPM_REQUIRES, shard, OPM_LIBRARY),
the intra-op threads setting, and load_library, on a tiny library compiled once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import opmarket
from opmarket.registry import LibraryError, Registry, isolated_registry, load_library
from opmarket.sdk import (
    InvalidArgumentError,
    InvalidOpDefError,
    get_include,
    intra_op_threads,
    library_declarations,
    set_intra_op_threads,
)

TINY = Path(__file__).parent / "data" / "native" / "tiny.cpp"


@pytest.fixture(scope="session")
def tiny_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/sdk/data/native/tiny.cpp built as an extension module, as a user would build it."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler (c++ or g++) on PATH")
    pybind11 = pytest.importorskip("pybind11")
    out = tmp_path_factory.mktemp("native") / f"_tiny{sysconfig.get_config_var('EXT_SUFFIX')}"
    cmd = [
        cxx,
        "-O1",
        "-std=c++17",
        "-shared",
        "-fPIC",
        "-fvisibility=hidden",
        f"-I{sysconfig.get_paths()['include']}",
        f"-I{pybind11.get_include()}",
        f"-I{get_include()}",
        str(TINY),
        "-o",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry() as reg:
        yield reg


@pytest.fixture
def threads() -> Iterator[None]:
    """Whatever a test sets, the setting comes back after it."""
    old = intra_op_threads()
    yield
    set_intra_op_threads(old)


def test_get_include_finds_the_header() -> None:
    header = Path(get_include()) / "opmarket" / "kernel.h"
    assert header.is_file()
    assert "OPM_REQUIRES" in header.read_text()


def test_load_library_registers_ops_and_kernels(tiny_library: Path, registry: Registry) -> None:
    lib = load_library(tiny_library)
    assert [o.name for o in lib.ops] == ["Opm>TinyScale"]
    assert "Opm>TinyScale" in registry
    assert registry.source("Opm>TinyScale") == f"library {tiny_library.resolve()}"
    kernels = registry.kernels("Opm>TinyScale")
    assert sorted(k.constraints[0][1][0].spec_name for k in kernels) == ["double", "float"]
    assert all(k.attr_names == ("factor",) for k in kernels)
    # The wrapper from the library and from opmarket.ops, attrs defaulted from the spec.
    x = np.arange(4, dtype=np.float32)
    assert lib.tiny_scale(x, factor=3.0).tolist() == [0, 3, 6, 9]
    assert opmarket.ops.tiny_scale(x.astype(np.float64)).dtype == np.float64
    assert opmarket.ops.tiny_scale(x.astype(np.float64)).tolist() == [0, 2, 4, 6]
    assert "tiny_scale" in dir(lib)
    with pytest.raises(AttributeError, match="has no op 'nope'"):
        _ = lib.nope
    # A second load registers nothing new.
    load_library(tiny_library)
    assert len(registry.kernels("Opm>TinyScale")) == 2


def test_a_kernel_for_an_op_declared_elsewhere(tiny_library: Path, registry: Registry) -> None:
    load_library(tiny_library)
    (k,) = [k for k in registry.kernels("Identity") if k.label == "tiny"]
    assert (k.attr_names, k.host_memory, k.priority, k.device) == ((), ("input",), 3, "CPU")
    assert k.name.endswith("_tiny.identity_float")
    x = np.ones(3, np.float32)
    out = registry.dispatcher("Identity").call([x], {}, label="tiny")
    assert out is x  # the C++ kernel hands back the very array: no copy on the way in or out


def test_a_kernel_takes_non_contiguous_inputs(tiny_library: Path, registry: Registry) -> None:
    lib = load_library(tiny_library)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    assert lib.tiny_scale(x, factor=1.0).tolist() == x.tolist()


def test_opm_requires_raises_invalid_argument(tiny_library: Path, registry: Registry) -> None:
    lib = load_library(tiny_library)
    with pytest.raises(InvalidArgumentError, match=r"Scale needs factor >= 0, got -1"):
        lib.tiny_scale(np.ones(3, np.float32), factor=-1.0)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_a_check_failing_in_a_shard_worker_reaches_python(
    tiny_library: Path, registry: Registry, threads: None, n: int
) -> None:
    set_intra_op_threads(n)
    lib = load_library(tiny_library)
    with pytest.raises(InvalidArgumentError, match="index 777 is bad"):
        lib.module.fail_in_shard(777)
    lib.module.fail_in_shard(-1)  # the pool still works after an error


@pytest.mark.parametrize(
    "case",
    [
        (1, 100_000, 100),
        (2, 100_000, 100),
        (4, 100_000, 100),
        (4, 3, 10**9),
        (4, 10, 1),
        (4, 1, 10**9),
    ],
)
def test_shard_visits_every_index_once(
    tiny_library: Path, registry: Registry, threads: None, case: tuple[int, int, int]
) -> None:
    n, total, cost = case
    set_intra_op_threads(n)
    lib = load_library(tiny_library)
    assert lib.module.intra_op_threads() == n
    seen, used = lib.module.visits(total, cost)
    assert seen == [1] * total
    assert 1 <= used <= n
    if n == 1 or total * cost < 20_000:
        assert used == 1  # too little work, or one thread: inline


def test_results_do_not_depend_on_threads(
    tiny_library: Path, registry: Registry, threads: None
) -> None:
    lib = load_library(tiny_library)
    x = np.random.default_rng(0).standard_normal(300_001).astype(np.float32)
    results = []
    for n in (1, 3):
        set_intra_op_threads(n)
        results.append(lib.tiny_scale(x, factor=0.5))
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], x * np.float32(0.5))


def test_threads_setting(threads: None) -> None:
    old = set_intra_op_threads(3)
    assert intra_op_threads() == 3
    assert set_intra_op_threads(old) == 3
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InvalidArgumentError, match="positive number of threads"):
            set_intra_op_threads(bad)  # type: ignore[arg-type]  # wrong on purpose
    assert intra_op_threads() == old


@pytest.mark.parametrize(
    ("value", "expected"), [("3", "3"), ("", "default"), ("x", "warning"), ("0", "warning")]
)
def test_threads_from_the_environment(value: str, expected: str) -> None:
    code = (
        "import os; from opmarket.sdk import intra_op_threads; "
        "print(intra_op_threads(), len(os.sched_getaffinity(0)))"
    )
    env = {**os.environ, "OPMARKET_INTRA_OP_THREADS": value}
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent,
    )
    assert done.returncode == 0, done.stderr
    got, cpus = done.stdout.split()
    assert got == (expected if expected.isdigit() else cpus)
    if expected == "warning":
        assert (
            f"RuntimeWarning: OPMARKET_INTRA_OP_THREADS={value!r} is not a positive number "
            f"of threads; using {cpus}"
        ) in done.stderr


def test_load_library_reports_failures_with_the_path(tmp_path: Path, registry: Registry) -> None:
    missing = tmp_path / "missing.so"
    with pytest.raises(LibraryError, match=f"cannot load library {missing}: no such file"):
        load_library(missing)
    garbage = tmp_path / "_garbage.so"
    garbage.write_bytes(b"not an ELF file")
    with pytest.raises(LibraryError, match=f"cannot load library {garbage}: "):
        load_library(garbage)
    # A real extension module that declares nothing (the standard library's _json).
    import _json

    with pytest.raises(LibraryError, match=r"_json.* declares no ops or kernels"):
        load_library(_json.__file__)  # type: ignore[arg-type]  # _json has a __file__ here


def _fake(decls: Any, fmt: int = 1) -> Any:
    return SimpleNamespace(__file__="fake.so", __name__="fake", __opmarket_library__=(fmt, decls))


def test_library_declarations_collect_every_problem() -> None:
    op = {
        "kind": "op",
        "name": "Opm>Bad",
        "inputs": ["x: T"],
        "outputs": ["y: Q"],
        "attrs": ["T: type"],
        "doc": "",
        "stateful": False,
    }
    k = {
        "kind": "kernel",
        "op": "Opm>Bad",
        "name": "bad",
        "fn": abs,
        "device": "CPU",
        "constraints": [("T", ["nonsense"])],
        "host_memory": [],
        "priority": 0,
        "label": "",
        "args": [],
    }
    with pytest.raises(InvalidOpDefError) as info:
        library_declarations(_fake([op, k]))
    text = str(info.value)
    assert "fake.so" in text
    assert "Q" in text and "nonsense" in text
    with pytest.raises(InvalidOpDefError, match="format 99; this opmarket reads formats 1 and 2"):
        library_declarations(_fake([], fmt=99))
    assert library_declarations(SimpleNamespace(__name__="plain")) == []  # type: ignore[arg-type]
