"""The validation pipeline on plugins that misbehave: each fails its own validation, with a
log that says why, and the machine is none the worse."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opmarket.sdk import OpSet, op, opset_to_json
from opmarket.web import Limits, validate_wheel
from opmarket.web.sandbox._cgroup import create_job_cgroup
from opmarket.web.validation import _pipeline
from opmarket.web.validation._pipeline import Previous, Verdict, _compat, _Run
from opmarket.web.validation._steps import StepStatus

from .plugins import build_plugin, plugin_source

OP = "Test>Misbehave"
GOOD = plugin_source(OP, 2)
GPU_KERNEL = """@kernel("Test>Misbehave", device="GPU", constraints={"T": ["float"]})
def scale_gpu(x):
    return x * 2


"""
GPU = GOOD.replace("@hookimpl", GPU_KERNEL + "@hookimpl").replace(
    "register(OP, scale,", "register(OP, scale, scale_gpu,"
)

HOSTILE = {
    "hang": "import time\ntime.sleep(3600)\n",
    "crash": "import ctypes\nctypes.string_at(0)\n",  # a real segmentation fault
    "flood": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
    "forks": (
        "import os, time\nfor _ in range(10000):\n    if os.fork() == 0:\n"
        "        time.sleep(30)\n        os._exit(0)\n"
    ),
}
WHY = {
    "hang": "still running after 3 s",
    "crash": "killed by signal SIGSEGV",
    "flood": "printed more than",
    "forks": "Resource temporarily unavailable",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    out = {
        name: build_plugin(
            d, f"opm-{name}", "1.0.0", op_name=OP, source=GOOD + code, manifest_source=GOOD
        )
        for name, code in HOSTILE.items()
    }
    out["gpu"] = build_plugin(d, "opm-gpu", "1.0.0", op_name=OP, source=GPU)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hang", "crash", "flood", "forks"])
def test_a_misbehaving_plugin_fails_alone(built: dict[str, Path], name: str) -> None:
    if name == "forks" and (os.geteuid() != 0 or create_job_cgroup(512, 32, 1) is None):
        pytest.skip("containing endless forks needs a writable control group")
    verdict = validate_wheel(
        built[name], limits=Limits(timeout_s=3, max_pids=32, max_output_bytes=1_000_000)
    )
    assert verdict.status == "rejected"
    (failed,) = verdict.failures
    assert failed.name == "load"
    assert WHY[name] in "\n".join(failed.log), verdict.log_text()


@pytest.mark.slow
def test_gpu_kernels_are_marked_not_run_without_a_gpu(built: dict[str, Path]) -> None:
    verdict = validate_wheel(built["gpu"])
    assert verdict.status == "validated", verdict.log_text()
    gpu = [k for k in verdict.kernels if k.device == "GPU"]
    assert gpu and all(k.status == "gpu: not run" for k in gpu)
    assert {k.status for k in verdict.kernels if k.device == "CPU"} == {"passed"}


@pytest.mark.slow
def test_without_a_sandbox_uploaded_code_is_refused(built: dict[str, Path]) -> None:
    verdict = validate_wheel(built["gpu"], limits=Limits(bwrap="/nonexistent/bwrap"))
    assert verdict.status == "rejected"
    (failed,) = verdict.failures
    assert failed.name == "sandbox"
    assert "'/nonexistent/bwrap' is not installed" in failed.log[0]
    assert "OPMARKET_VALIDATION_ALLOW_UNSANDBOXED" in verdict.log_text()


@pytest.mark.slow
def test_allowed_to_run_unsandboxed_it_validates_and_says_so(built: dict[str, Path]) -> None:
    verdict = validate_wheel(
        built["gpu"], limits=Limits(bwrap="/nonexistent/bwrap", allow_unsandboxed=True)
    )
    assert verdict.status == "validated", verdict.log_text()
    assert "NOT SANDBOXED ('/nonexistent/bwrap' is not installed" in verdict.log_text()


@pytest.mark.slow
def test_opmarket_validate_without_bubblewrap_warns_and_runs(
    built: dict[str, Path], tmp_path: Path
) -> None:
    empty = tmp_path / "bin"  # a PATH with no bwrap on it
    empty.mkdir()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "opmarket"), "validate", str(built["gpu"])],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(empty), "HOME": str(tmp_path)},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning: no sandbox (" in done.stderr and "is not installed" in done.stderr
    assert "NOT SANDBOXED" in done.stdout


@pytest.mark.slow
def test_a_stale_manifest_names_the_field_and_the_command(tmp_path: Path) -> None:
    wheel = build_plugin(
        tmp_path, "opm-stale", "1.0.0", op_name=OP, factor=3, manifest_source=plugin_source(OP, 2)
    )
    verdict = validate_wheel(wheel)
    assert verdict.status == "rejected"
    (failed,) = verdict.failures
    assert failed.name == "manifest"
    assert failed.log == [
        f"{OP}: the manifest's definition differs from the registered one in summary: the "
        "manifest says 'Multiplies x by 2.', the code 'Multiplies x by 3.'",
        "opmarket.opset.json is stale or missing: rebuild the wheel with `opmarket build` (its "
        "backend opmarket.build_meta writes the manifest), or run `opmarket manifest PATH` on "
        "the project or the wheel",
    ]


def _opset(version: str, *attrs: str) -> str:
    built = op("Test>Scale").input("x: float").output("y: float")
    for attr in attrs:
        built = built.attr(attr)
    return opset_to_json(OpSet((built.build(),), name="opm-scale", version=version))


@pytest.mark.parametrize(
    ("version", "compat", "policy"),
    [("1.1.0", "failed", "failed"), ("2.0.0", "allowed", "passed")],
)
def test_a_compat_step_with_breaking_findings_never_says_passed(
    version: str, compat: str, policy: str
) -> None:
    """Removing an attr breaks graphs saved with 1.0.0: a minor bump fails the compat step
    itself (not only the version policy); a major bump allows it, and says so."""
    verdict = Verdict(f"opm_scale-{version}-py3-none-any.whl", opset=_opset(version))
    previous = Previous("opm_scale-1.0.0-py3-none-any.whl", _opset("1.0.0", "factor: int = 2"))
    _compat(verdict, previous, verdict.filename)
    assert [(s.name, s.status) for s in verdict.steps] == [
        ("compat", compat),
        ("version policy", policy),
    ]
    log = verdict.log_text()
    assert "[passed] compat" not in log and "[breaking]" in log
    assert verdict.status == ("rejected" if compat == "failed" else "validated")


@pytest.mark.slow
def test_the_steps_run_in_order_until_one_stops(
    built: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """validate_wheel is its STEPS in order: a step added to the table runs in its place,
    and one that says stop ends the validation there."""
    ran: list[str] = []

    def count(run: _Run) -> bool:
        ran.append(run.filename)
        run.add("counted", StepStatus.PASSED, [f"after {[s.name for s in run.verdict.steps]}"])
        return len(ran) < 2

    inspect, *rest = _pipeline.STEPS
    monkeypatch.setattr(_pipeline, "STEPS", (inspect, count, count, *rest))
    verdict = validate_wheel(built["gpu"])
    assert [s.name for s in verdict.steps] == ["inspect", "counted", "counted"]
    assert verdict.steps[1].log == ["after ['inspect']"]
    assert verdict.status == "validated"  # no step failed
