"""What scripts/check-frameworks runs: tests/bridges against several releases of each
framework, with opmarket installed from its own wheel (so the bridges use the shims that
wheel carries, built once, against no framework).

For each release in RELEASES: a virtual environment under the work folder
(``$OPMARKET_CHECK_DIR``, else ``/tmp/opmarket-check-frameworks``; kept, so a second run
installs nothing new) gets the framework release with its dependencies, and opmarket's wheel
without; everything else the tests need (pytest, the first-party plugins, the other
frameworks) comes from the running environment (.venv), as a path entry after the venv's own
packages, so the release installed in the venv is the one imported. Then the release's test
files run there (``-m "not slow"``), with an empty opmarket cache of its own: the line says
which shims the bridges had to build at first use (none, where the wheel's serve).

One line per release: ``check-frameworks: NAME (PACKAGE VERSION): passed|FAILED|not run
(DETAIL)``, and a last line with the totals. Exit 1 when a release failed, else 0 (a release
that could not be installed, for instance offline, is "not run" with the reason).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Each framework's files of tests/bridges. test_agreement (every framework on the same
#: calls, in one process) runs with the TensorFlow and JAX releases, this environment's torch
#: beside them; not with torch's: the CUDA build of torch 2.14 imports triton, which crashes
#: (SIGSEGV) in a process where TensorFlow is loaded, and .venv's own run covers its torch.
TENSORFLOW_TESTS = (
    "tests/bridges/test_tensorflow.py",
    "tests/bridges/test_tensorflow_eager.py",
    "tests/bridges/test_tf_adding_an_op.py",
    "tests/bridges/test_tf_kernel_label.py",
    "tests/bridges/test_tf_saved_model.py",
    "tests/bridges/test_litert.py",
    "tests/bridges/test_litert_native.py",
    "tests/bridges/test_litert_vs_tf.py",
    "tests/bridges/test_tensorflow_gpu.py",
    "tests/bridges/test_shipped_shims.py",
    "tests/bridges/test_agreement.py",
)
JAX_TESTS = (
    "tests/bridges/test_jax.py",
    "tests/bridges/test_jax_checks.py",
    "tests/bridges/test_jax_cuda.py",
    "tests/bridges/test_shipped_shims.py",
    "tests/bridges/test_agreement.py",
)
TORCH_TESTS = (
    "tests/bridges/test_torch.py",
    "tests/bridges/test_torch_native.py",
    "tests/bridges/test_torch_cuda.py",
    "tests/bridges/test_shipped_shims.py",
)


@dataclass(frozen=True)
class Release:
    """One framework release: what to install (with its dependencies), the module whose
    version it reports, and the test files to run."""

    name: str
    requirements: tuple[str, ...]
    module: str
    tests: tuple[str, ...]


RELEASES = (
    Release("TensorFlow 2.21", ("tensorflow-cpu==2.21.*",), "tensorflow", TENSORFLOW_TESTS),
    Release("TensorFlow 2.20", ("tensorflow-cpu==2.20.*",), "tensorflow", TENSORFLOW_TESTS),
    Release("JAX 0.10.2", ("jax==0.10.2", "jaxlib==0.10.2"), "jaxlib", JAX_TESTS),
    Release("JAX 0.10.1", ("jax==0.10.1", "jaxlib==0.10.1"), "jaxlib", JAX_TESTS),
    # The registries reachable here have torch 2.13 as a CPU build, 2.14 only as the CUDA
    # build (its NVIDIA libraries, some GB, come with it; the tests use the CPU).
    Release("PyTorch 2.13", ("torch==2.13.*",), "torch", TORCH_TESTS),
    Release("PyTorch 2.14", ("torch==2.14.*",), "torch", TORCH_TESTS),
)
TOTALS = {"passed": 0, "FAILED": 0, "not run": 0}


def report(release: Release, version: str, verdict: str, detail: str) -> None:
    """One release's line."""
    TOTALS[verdict] += 1
    what = f"{release.name} ({release.module} {version})" if version else release.name
    detail = " ".join(detail.split())[:300]
    print(f"check-frameworks: {what}: {verdict} ({detail})", flush=True)


def run(
    command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``command``'s result, its output captured."""
    return subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd, env=env)


def build_wheel(work: Path) -> Path:
    """opmarket's wheel, as setup.py builds it (the C-ABI host and the bridges' shims)."""
    out = work / "dist"
    for old in out.glob("opmarket-*.whl"):
        old.unlink()
    done = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(ROOT),
        ]
    )
    if done.returncode != 0:
        sys.exit(f"check-frameworks: cannot build opmarket's wheel:\n{done.stderr[-3000:]}")
    (wheel,) = out.glob("opmarket-*.whl")
    return wheel


def venv_name(release: Release) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", release.name.lower())


def environment(release: Release, work: Path, wheel: Path) -> tuple[Path | None, str]:
    """The release's venv with it and opmarket installed, or None and why not."""
    venv = work / venv_name(release)
    python = venv / "bin" / "python"
    if not python.exists():
        done = run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
        if done.returncode != 0:
            return None, f"cannot create a venv: {done.stderr.strip()[-200:]}"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    done = run([*pip, *release.requirements])
    if done.returncode != 0:
        return (
            None,
            f"cannot install {' '.join(release.requirements)}: {done.stderr.strip()[-300:]}",
        )
    done = run([*pip, "--no-deps", "--force-reinstall", str(wheel)])
    if done.returncode != 0:
        return None, f"cannot install opmarket's wheel: {done.stderr.strip()[-300:]}"
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    Path(site.stdout.strip(), "opmarket-check-frameworks.pth").write_text(
        sysconfig.get_path("purelib") + "\n"
    )
    return python, ""


def check(release: Release, work: Path, wheel: Path) -> None:
    python, why = environment(release, work, wheel)
    if python is None:
        report(release, "", "not run", why)
        return
    found = run([str(python), "-c", f"import {release.module} as m; print(m.__version__)"])
    version = found.stdout.strip()
    if found.returncode != 0:
        report(release, "", "not run", f"import {release.module} fails: {found.stderr[-300:]}")
        return
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    cache = work / "cache" / venv_name(release)
    shutil.rmtree(cache, ignore_errors=True)
    env["OPMARKET_CACHE_DIR"] = str(cache)
    start = time.monotonic()
    done = run(
        [
            str(python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow",
            *release.tests,
        ],
        cwd=ROOT,
        env=env,
    )
    took = f"{time.monotonic() - start:.0f} s"
    built = sorted(p.name.rsplit("-", 1)[0] for p in cache.glob("bridges/*.so"))
    took += f"; shims built at first use: {', '.join(built) or 'none'}"
    summary = (done.stdout.strip().splitlines() or ["no output"])[-1].strip("= ")
    if done.returncode == 0:
        report(release, version, "passed", f"{summary}; {took}")
    else:
        failed = [ln for ln in done.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
        report(release, version, "FAILED", "; ".join([summary, *failed[:5]]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="only the releases whose name contains one")
    args = parser.parse_args()
    work = Path(os.environ.get("OPMARKET_CHECK_DIR", "/tmp/opmarket-check-frameworks"))
    work.mkdir(parents=True, exist_ok=True)
    chosen = [r for r in RELEASES if not args.names or any(n in r.name for n in args.names)]
    if not chosen:
        print(f"check-frameworks: no release matches {args.names}", file=sys.stderr)
        return 2
    wheel = build_wheel(work)
    for release in chosen:
        check(release, work, wheel)
    counts = ", ".join(f"{n} {k}" for k, n in TOTALS.items())
    print(f"check-frameworks: {counts}", flush=True)
    return 1 if TOTALS["FAILED"] else 0


if __name__ == "__main__":
    sys.exit(main())
