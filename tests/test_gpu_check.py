"""scripts/gpu-check on a machine without a GPU: every check prints one skip line with its
reason (none is silently left out, none fails), the totals last, exit status 0."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from opmarket.web.gpu._worker import gpu_visible

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"gpu-check: (?P<name>[^:]+): (?P<verdict>ok|FAIL|skip) \((?P<detail>.+)\)")


@pytest.mark.slow  # about 7 s here: gpu-check imports every framework
@pytest.mark.skipif(bool(gpu_visible()), reason="this machine has a GPU: gpu-check runs for real")
def test_without_a_gpu_every_check_is_a_skip_line_with_its_reason() -> None:
    done = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    *lines, last = done.stdout.splitlines()
    parsed = [LINE.fullmatch(text) for text in lines]
    assert all(parsed), lines
    names = [m["name"] for m in parsed if m]
    assert {m["verdict"] for m in parsed if m} == {"skip"}
    assert all(m["detail"].strip() for m in parsed if m)
    # each kind of check has its line (one per companion kernel and dtype where
    # scripts/setup installed the companions, else one saying none is installed)
    assert any(n.startswith("companion") for n in names), names
    for name in ("bridge torch cuda", "bridge jax cuda", "bridge tensorflow cuda", "doctor"):
        assert name in names
    # the bridges' own reasons for registering no CUDA kernel
    details = {m["name"]: m["detail"] for m in parsed if m}
    assert details["bridge torch cuda"].startswith(
        "opmarket.torch registers no CUDA kernel: no CUDA device in torch (torch "
    ), details
    assert details["bridge jax cuda"].startswith(
        "opmarket.jax registers no CUDA target: JAX has no CUDA platform here"
    ), details
    assert details["bridge tensorflow cuda"].startswith(
        "opmarket.tensorflow registers no GPU kernel: TensorFlow lists no GPU device (TensorFlow "
    ), details
    assert names[-1] == "worker --gpu"
    assert last == f"gpu-check: 0 ok, 0 failed, {len(lines)} skipped"
