"""opmarket doctor's decision on made-up machines (every branch, no GPU needed), the machine
facts read here, and the install command's choice of a GPU companion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from opmarket.registry._doctor import Candidate, OpReport, decide, gpu_fit, report_json
from opmarket.registry._gpubinary import DeviceCode, read_device_code
from opmarket.registry._install import choose_extra
from opmarket.registry._machine import CudaRuntime, Gpu, Machine, cpu_simd, machine_facts

RUNTIME13 = CudaRuntime(13, "/site/nvidia/cu13/lib/libcudart.so.13", "wheel")
BUILD = DeviceCode(("sm_80", "sm_90"), ("compute_75",), ("libcudart.so.13", "libc.so.6"))
SASS_ONLY = DeviceCode(("sm_80", "sm_90"), (), ("libcudart.so.13",))


def gpu_machine(cc: tuple[int, int], *, driver_cuda: tuple[int, int] = (13, 0)) -> Machine:
    return Machine(
        gpus=(Gpu(0, "Test GPU", cc),),
        driver="580.65.06",
        driver_cuda=driver_cuda,
        runtimes=(RUNTIME13,),
    )


NO_GPU = Machine(gpu_note="no NVIDIA driver (libcuda.so.1 not found)", runtimes=(RUNTIME13,))


@pytest.mark.parametrize(
    ("machine", "builds", "fits", "reason"),
    [
        (NO_GPU, [BUILD], False, "no GPU visible"),
        (
            gpu_machine((7, 5)),
            [SASS_ONLY],
            False,
            "sm_75 GPU but the build has sm_80/sm_90 and no PTX <= 7.5",
        ),
        (
            gpu_machine((7, 0)),
            [BUILD],
            False,
            "sm_70 GPU but the build has sm_80/sm_90 and no PTX <= 7.0",
        ),
        (
            gpu_machine((7, 5)),
            [BUILD],
            True,
            "sm_75 GPU (Test GPU): PTX compute_75, compiled by the driver",
        ),
        (gpu_machine((8, 6)), [BUILD], True, "sm_86 GPU (Test GPU): SASS sm_80"),
        (gpu_machine((9, 0)), [BUILD], True, "sm_90 GPU (Test GPU): SASS sm_90"),
        # A newer major than any SASS: only PTX can run there.
        (
            gpu_machine((12, 0)),
            [BUILD],
            True,
            "sm_120 GPU (Test GPU): PTX compute_75, compiled by the driver",
        ),
        (
            gpu_machine((12, 0)),
            [SASS_ONLY],
            False,
            "sm_120 GPU but the build has sm_80/sm_90 and no PTX <= 12.0",
        ),
        # Arch-specific SASS (sm_90a) runs only on its own GPU.
        (
            gpu_machine((9, 1)),
            [DeviceCode(("sm_90a",), (), ("libcudart.so.13",))],
            False,
            "sm_91 GPU but the build has sm_90a and no PTX <= 9.1",
        ),
        (
            Machine(gpus=(Gpu(0, "T", (9, 0)),), driver_cuda=(13, 0)),
            [BUILD],
            False,
            "CUDA runtime 13 not found; install the cuda13 extra",
        ),
        (
            gpu_machine((9, 0), driver_cuda=(12, 8)),
            [BUILD],
            False,
            "the NVIDIA driver supports CUDA 12.8, the build needs CUDA 13; update the driver",
        ),
    ],
)
def test_gpu_fit(machine: Machine, builds: list[DeviceCode], fits: bool, reason: str) -> None:
    assert gpu_fit(machine, builds) == (fits, reason)


CPU_FLOAT = Candidate("CPU", ("float",), "time_two")
CPU_DOUBLE = Candidate("CPU", ("double",), "time_two")
GPU_LOADED = Candidate("GPU", ("float", "double"), "time_two_cuda13", True, builds=(BUILD,))
GPU_UNREGISTERED = Candidate(
    "GPU",
    ("float", "double"),
    "time_two_cuda13",
    registered=False,
    builds=(BUILD,),
    load_status="no GPU visible (CUDA runtime: the NVIDIA driver is missing)",
)


def reasons(machine: Machine, candidates: list[Candidate]) -> list[tuple[bool, str]]:
    return [(v.chosen, v.reason) for v in decide(machine, candidates)]


def test_without_a_gpu_the_cpu_kernels_run_and_the_gpu_kernel_is_not_chosen() -> None:
    assert reasons(NO_GPU, [CPU_FLOAT, CPU_DOUBLE, GPU_UNREGISTERED]) == [
        (True, "runs on CPU (the default device here)"),
        (True, "runs on CPU (the default device here)"),
        (False, "no GPU visible"),
    ]


def test_with_a_fitting_gpu_the_gpu_kernel_is_the_default() -> None:
    assert reasons(gpu_machine((9, 0)), [CPU_FLOAT, GPU_LOADED]) == [
        (True, "runs on CPU (inside device('CPU') scopes; the GPU kernel runs by default)"),
        (True, "runs on GPU (the default device): sm_90 GPU (Test GPU): SASS sm_90"),
    ]


def test_a_gpu_that_fits_but_a_kernel_that_did_not_register_gives_the_load_status() -> None:
    broken = Candidate(
        "GPU", ("float",), "x_cuda13", registered=False, builds=(BUILD,), load_status="boom"
    )
    assert reasons(gpu_machine((9, 0)), [broken]) == [(False, "boom")]


def test_priority_and_labels() -> None:
    fast = Candidate("CPU", ("float", "double"), "fast", priority=1)
    labelled = Candidate("CPU", ("float",), "c", label="c_abi")
    assert reasons(NO_GPU, [CPU_FLOAT, fast, labelled]) == [
        (False, "fast's kernel has priority 1 > 0 for these dtypes"),
        (True, "runs on CPU (the default device here)"),
        (False, "label 'c_abi': runs only for nodes that ask for it"),
    ]


def test_a_companion_not_installed() -> None:
    missing = Candidate(
        "GPU",
        None,
        "time_two",
        registered=False,
        missing="opmarket-time-two-cuda13",
        extra="cuda13",
    )
    assert reasons(NO_GPU, [missing]) == [
        (False, "no GPU visible; opmarket-time-two-cuda13 (the cuda13 extra) is not installed")
    ]
    assert reasons(gpu_machine((9, 0)), [missing])[0][1] == (
        "opmarket-time-two-cuda13 (the cuda13 extra) is not installed: pip install it to use "
        "the GPU"
    )


def test_the_json_shape() -> None:
    report = OpReport("Opm>TimeTwo", [CPU_FLOAT, GPU_UNREGISTERED])
    report.decisions = decide(NO_GPU, report.candidates)
    data = report_json(NO_GPU, [report])
    assert set(data) == {"machine", "ops"}
    assert data["ops"] == [
        {
            "op": "Opm>TimeTwo",
            "kernels": [
                {
                    "device": "CPU",
                    "dtypes": ["float"],
                    "chosen": True,
                    "reason": "runs on CPU (the default device here)",
                },
                {
                    "device": "GPU",
                    "dtypes": ["float", "double"],
                    "chosen": False,
                    "reason": "no GPU visible",
                },
            ],
        }
    ]
    assert data["machine"]["gpus"] == [] and data["machine"]["cuda_runtimes"][0]["major"] == 13
    json.dumps(data)


def test_cpu_simd_from_cpuinfo() -> None:
    x86 = "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx avx2 fma avx512f\n"
    assert cpu_simd(x86) == ("Some CPU", "sse2 avx avx2 fma avx512f")
    arm = "processor\t: 0\nFeatures\t: fp asimd asimdhp sve\nCPU part\t: 0xd40\n"
    assert cpu_simd(arm) == ("0xd40", "asimd asimdhp sve")


def test_this_machines_facts() -> None:
    machine = machine_facts()
    assert machine.arch
    if not Path("/proc/driver/nvidia/version").exists():
        # The GPU-only branch (libcuda.so.1 present) is _driver_gpus; here: the facts say why.
        assert machine.gpus == () and machine.driver == ""
        assert machine.gpu_note
    assert json.loads(json.dumps(machine.to_json()))["simd"] == list(machine.simd)


def test_a_file_that_is_not_elf_has_no_device_code(tmp_path: Path) -> None:
    (tmp_path / "x.so").write_bytes(b"not an ELF file" * 10)
    assert read_device_code(tmp_path / "x.so") == DeviceCode()
    assert read_device_code(Path(sys.executable)).sass == ()


@pytest.mark.parametrize(
    ("machine", "extras", "chosen", "first"),
    [
        (NO_GPU, ["cuda13"], None, "cuda13: not installed: no GPU visible (no NVIDIA driver"),
        (gpu_machine((9, 0)), ["cuda12", "cuda13"], "cuda13", "cuda13: chosen: sm_90 GPU"),
        (
            gpu_machine((9, 0), driver_cuda=(12, 8)),
            ["cuda12", "cuda13", "docs"],
            "cuda12",
            "cuda13: not installed: the NVIDIA driver supports CUDA 12.8, older than 13",
        ),
        (gpu_machine((9, 0)), ["docs"], None, "the plugin offers no GPU companion"),
    ],
)
def test_install_chooses_the_companion_that_fits(
    machine: Machine, extras: list[str], chosen: str | None, first: str
) -> None:
    choice = choose_extra(machine, extras)
    assert choice.extra == chosen
    assert choice.reasons[0].startswith(first)


def test_doctor_is_a_command() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "opmarket"), "doctor", "--format", "xml"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "xml" in done.stderr


def test_a_registered_gpu_kernel_whose_build_does_not_fit_is_not_chosen() -> None:
    # The companion registered (its runtime sees a GPU), but the GPU is older than its code.
    registered = Candidate("GPU", ("float",), "x_cuda13", True, builds=(SASS_ONLY,))
    assert reasons(gpu_machine((7, 5)), [CPU_FLOAT, registered]) == [
        (True, "runs on CPU (inside device('CPU') scopes; the GPU kernel runs by default)"),
        (False, "sm_75 GPU but the build has sm_80/sm_90 and no PTX <= 7.5"),
    ]
