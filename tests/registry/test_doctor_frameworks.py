"""opmarket doctor's framework paths for GPU kernels: without a GPU visible no framework is
imported and each installed one's GPU path is its Python one, for that reason; with a GPU,
each installed framework's bridge answers for itself in a process of its own (run here for
real: on this machine's CPU builds the bridges say why they register no GPU kernel); a
framework that is not installed is said to be, and a bridge that cannot answer says why."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from opmarket.registry._doctor import Candidate, OpReport, decide, frameworks_text, report_json
from opmarket.registry._doctor_frameworks import (
    FRAMEWORKS,
    Framework,
    FrameworkPath,
    framework_paths,
)
from opmarket.registry._machine import Gpu, Machine

NO_GPU = Machine(gpu_note="no NVIDIA driver (libcuda.so.1 not found)")
WITH_GPU = Machine(gpus=(Gpu(0, "Test GPU", (9, 0)),), driver="580.65.06", driver_cuda=(13, 0))
QUERIES = [("Opm>TimeTwo", "", {"T": "float"}), ("Opm>MedianPool", "", {"T": "double"})]
ABSENT = Framework("absent", "opmarket_no_such_framework", "opmarket.absent", "python")
BROKEN = Framework("broken", "json", "opmarket.no_such_bridge", "python")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def test_without_a_gpu_no_framework_is_imported_and_each_says_why() -> None:
    # In a fresh interpreter, so that "not imported" is a fact of this call alone.
    script = (
        "import json, sys\n"
        "from opmarket.registry._doctor_frameworks import FRAMEWORKS, framework_paths\n"
        "from opmarket.registry._machine import Machine\n"
        "m = Machine(gpu_note='no NVIDIA driver (libcuda.so.1 not found)')\n"
        "rows = framework_paths(m, [('Opm>TimeTwo', '', {'T': 'float'})])\n"
        "imported = [f.module for f in FRAMEWORKS if f.module in sys.modules]\n"
        "print(json.dumps([[[p.framework, p.path, p.reason] for p in rows[0]], imported]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    rows, imported = json.loads(done.stdout)
    assert imported == []
    why = "no GPU visible (no NVIDIA driver (libcuda.so.1 not found))"
    expected = [
        [f.name, f.python_path, why] if _installed(f.module) else [f.name, "not installed", ""]
        for f in FRAMEWORKS
    ]
    assert rows == expected


def test_a_framework_that_is_not_installed_is_said_to_be_on_any_machine() -> None:
    for machine in (NO_GPU, WITH_GPU):
        rows = framework_paths(machine, QUERIES, [ABSENT])
        assert rows == [(FrameworkPath("absent", "not installed", ""),)] * 2
    assert framework_paths(WITH_GPU, [], [ABSENT]) == []


def test_a_bridge_that_cannot_answer_says_why() -> None:
    rows = framework_paths(WITH_GPU, QUERIES[:1], [BROKEN])
    assert rows == [
        (
            FrameworkPath(
                "broken",
                "unknown",
                "opmarket.no_such_bridge did not answer: ModuleNotFoundError: No module named "
                "'opmarket.no_such_bridge'",
            ),
        )
    ]


@pytest.mark.slow  # each framework imported in a process of its own
def test_with_a_gpu_each_installed_bridge_answers_for_itself() -> None:
    present = [f for f in FRAMEWORKS if _installed(f.module)]
    if not present:
        pytest.skip("no framework installed")
    rows = framework_paths(WITH_GPU, QUERIES, [*present, ABSENT])
    assert len(rows) == 2
    for row in rows:
        by_name = {p.framework: p for p in row}
        assert by_name["absent"] == FrameworkPath("absent", "not installed", "")
        # This machine's frameworks see no GPU: each bridge's own words for it.
        starts = {
            "tensorflow": ("python", "TensorFlow lists no GPU device (TensorFlow "),
            "torch": ("python", "no CUDA device in torch (torch "),
            "jax": ("callback", "JAX has no CUDA platform here"),
        }
        for f in present:
            path, reason = starts[f.name]
            assert by_name[f.name].path == path, by_name[f.name]
            assert by_name[f.name].reason.startswith(reason), by_name[f.name]


def test_a_gpu_kernel_s_framework_paths_in_json_and_text() -> None:
    paths = (
        FrameworkPath("tensorflow", "native, synchronizing", "TensorFlow's C API gives no stream"),
        FrameworkPath("torch", "native", ""),
        FrameworkPath("jax", "not installed", ""),
    )
    gpu = Candidate("GPU", ("float",), "time_two_cuda13", True, frameworks=paths)
    report = OpReport("Opm>TimeTwo", [Candidate("CPU", ("float",), "time_two"), gpu])
    report.decisions = decide(NO_GPU, report.candidates)
    kernels = report_json(NO_GPU, [report])["ops"][0]["kernels"]
    assert "frameworks" not in kernels[0]
    assert kernels[1]["frameworks"] == {
        "tensorflow": {
            "path": "native, synchronizing",
            "reason": "TensorFlow's C API gives no stream",
        },
        "torch": {"path": "native", "reason": ""},
        "jax": {"path": "not installed", "reason": ""},
    }
    assert frameworks_text(paths) == (
        "frameworks: tensorflow native, synchronizing (TensorFlow's C API gives no stream); "
        "torch native; jax not installed"
    )
    why = "no GPU visible (no NVIDIA driver)"
    same = tuple(FrameworkPath(p.framework, "python", why) for p in paths)
    assert frameworks_text(same) == (
        f"frameworks: tensorflow python, torch python, jax python ({why})"
    )
