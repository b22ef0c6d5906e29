"""Validation of one wheel, step by step: what the marketplace runs on every upload and
``opmarket validate`` runs locally, with the same verdict.

Steps: inspect (the upload checks) -> install (pip, into a directory of its own) -> entry
point -> load -> snapshot -> manifest -> conformance (the plugin's code: all in the
sandbox) -> compat against the previous validated release -> version policy. A wheel is
``validated`` when no step failed; a step whose machinery is missing says ``not available``
in the log and is never counted as passed.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opmarket.web._sandbox import Limits, run_sandboxed
from opmarket.web._wheels import WheelLimits, WheelProblem, inspect_wheel

if TYPE_CHECKING:
    from opmarket.web._settings import Settings

__all__ = ["Previous", "Step", "Verdict", "limits_from", "validate_wheel"]

_PROBE = Path(__file__).with_name("_probe.py")
_MARK = b"RESULT "
_STATUSES = ("passed", "failed", "skipped", "not available")


@dataclass(slots=True)
class Step:
    """One validation step: name, status (passed, failed, skipped, not available) and log."""

    name: str
    status: str  # one of _STATUSES
    log: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Previous:
    """The release to compare against: its label, and its op-set as canonical JSON."""

    label: str
    opset: str


@dataclass(slots=True)
class Verdict:
    """The outcome: ``validated`` or ``rejected``, every step, and what was learned."""

    filename: str
    steps: list[Step] = field(default_factory=list)
    opset: str = ""  # canonical op-set JSON, when the snapshot worked
    ops: list[dict[str, str]] = field(default_factory=list)
    kernels: list[dict[str, str]] = field(default_factory=list)
    compat: dict[str, Any] | None = None

    @property
    def status(self) -> str:
        """``validated`` when at least one step ran and none failed, else ``rejected``."""
        ok = self.steps and all(s.status != "failed" for s in self.steps)
        return "validated" if ok else "rejected"

    @property
    def failures(self) -> list[Step]:
        """The steps that failed, in order."""
        return [s for s in self.steps if s.status == "failed"]

    def log_text(self) -> str:
        """What a person reads: the verdict, then each step's status and name, its log indented."""
        lines = [f"{self.filename}: {self.status}"]
        for step in self.steps:
            lines.append(f"[{step.status}] {step.name}")
            lines.extend(f"    {line}" for text in step.log for line in text.splitlines())
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        """The verdict as the marketplace stores it and ``opmarket validate --json`` prints it."""
        return {"filename": self.filename, "status": self.status,
                "steps": [asdict(s) for s in self.steps], "ops": self.ops,
                "kernels": self.kernels, "compat": self.compat}


def limits_from(settings: Settings | None) -> tuple[Limits, WheelLimits]:
    """The sandbox's and the archive checks' limits from the settings (None: defaults)."""
    if settings is None:
        return Limits(), WheelLimits()
    return (
        Limits(timeout_s=settings.validation_timeout_s, memory_mb=settings.validation_memory_mb,
               max_pids=settings.validation_max_pids,
               max_output_bytes=settings.validation_max_output_bytes,
               user=settings.sandbox_user),
        WheelLimits(settings.max_unpacked_bytes, settings.max_zip_entries,
                    settings.max_compression_ratio),
    )  # fmt: skip


def _env(workdir: Path) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir),
        "TMPDIR": str(workdir / "tmp"), "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
        "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1", "PIP_NO_INDEX": "1",
        # One thread per library: threads count against the process limit.
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    }  # fmt: skip
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # some CPUs need these
        if name in os.environ:
            env[name] = os.environ[name]
    return env


# Unpacks a wheel whose member names were checked (inspect): purelib/platlib .data folders
# go to the top, as installers put them.
_UNPACK = """
import sys, zipfile, pathlib
wheel, target = sys.argv[1], pathlib.Path(sys.argv[2])
with zipfile.ZipFile(wheel) as zf:
    for info in zf.infolist():
        parts = info.filename.split("/")
        if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib"):
            parts = parts[2:]
        elif parts[0].endswith(".data"):
            continue
        if info.is_dir():
            continue
        out = target.joinpath(*parts)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(zf.read(info))
"""


@functools.cache
def _has_pip(interpreter: str) -> bool:
    done = subprocess.run([interpreter, "-I", "-m", "pip", "--version"], capture_output=True,
                          check=False, timeout=60)
    return done.returncode == 0


def _tail(data: bytes, limit: int = 4000) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else "...\n" + text[-limit:]


def validate_wheel(
    path: Path,
    *,
    filename: str | None = None,
    previous: Previous | None = None,
    limits: Limits | None = None,
    wheel_limits: WheelLimits | None = None,
    gpu: bool = False,
    interpreter: str = sys.executable,
) -> Verdict:
    """Run every step on the wheel at ``path`` and say what each found."""
    filename = filename or path.name
    limits = limits or Limits()
    verdict = Verdict(filename)
    try:
        info = inspect_wheel(path, filename, wheel_limits)
    except WheelProblem as exc:
        verdict.steps.append(Step("inspect", "failed", [str(exc)]))
        return verdict
    verdict.steps.append(Step("inspect", "passed", [
        f"{info.name} {info.version}; archive checks passed (paths, links, sizes)"]))
    workdir = Path(tempfile.mkdtemp(prefix="opmarket-validate-"))
    try:
        os.chmod(workdir, 0o755)
        (workdir / "tmp").mkdir()
        wheel = workdir / filename
        shutil.copyfile(path, wheel)
        env = _env(workdir)
        target = str(workdir / "target")
        how = "pip installed it (without dependencies) into a directory of its own"
        if _has_pip(interpreter):
            argv = [interpreter, "-I", "-m", "pip", "install", "--no-deps", "--no-index",
                    "--no-compile", "--target", target, str(wheel)]
        else:  # an environment made without pip (uv): unpack, as an installer would
            argv = [interpreter, "-I", "-c", _UNPACK, str(wheel), target]
            how = "unpacked into a directory of its own (no pip in this environment)"
        install = run_sandboxed(argv, workdir=workdir, limits=limits, interpreter=interpreter,
                                env=env)
        sandbox_note = "sandbox: " + "; ".join(install.protections)
        if install.returncode != 0 or install.problem:
            verdict.steps.append(Step("install", "failed", [
                install.problem or f"pip exited with {install.returncode}",
                _tail(install.stderr or install.stdout), sandbox_note]))
            return verdict
        verdict.steps.append(Step("install", "passed", [how, sandbox_note]))
        probe = run_sandboxed(
            [interpreter, "-I", str(_PROBE), str(workdir / "target"), info.normalized,
             str(wheel), *(["--gpu"] if gpu else [])],
            workdir=workdir, limits=limits, interpreter=interpreter, env=env,
        )  # fmt: skip
        result = _result(probe.stdout)
        if result is None or probe.problem or probe.returncode != 0:
            why = probe.problem or (f"exited with {probe.returncode}" if probe.returncode
                                    else "printed no result")
            verdict.steps.append(Step("load", "failed", [
                f"the plugin's process {why}", _tail(probe.stderr), _tail(probe.stdout)]))
            return verdict
        for step in result.get("steps", []):
            verdict.steps.append(Step(str(step["name"]), str(step["status"]),
                                      [str(x) for x in step.get("log", [])]))
        if probe.stderr.strip():
            verdict.steps.append(Step("plugin output", "skipped", [_tail(probe.stderr)]))
        verdict.opset = str(result.get("opset", ""))
        verdict.ops = list(result.get("ops", []))
        verdict.kernels = list(result.get("kernels", []))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if verdict.opset and not verdict.failures:
        _compat(verdict, previous, filename)
    return verdict


def _result(stdout: bytes) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(_MARK):
            try:
                data = json.loads(line[len(_MARK):])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _compat(verdict: Verdict, previous: Previous | None, filename: str) -> None:
    from opmarket import compat
    from opmarket.sdk import OpmarketError, opset_from_json

    check_sources = getattr(compat, "check_sources", None)
    if check_sources is None:
        verdict.steps.append(Step("compat", "not available",
                                  ["opmarket.compat has no check_sources yet"]))
        return
    if previous is None:
        verdict.steps.append(Step("compat", "skipped",
                                  ["first validated release: nothing to compare against"]))
        verdict.steps.append(Step("version policy", "skipped", ["first release"]))
        return
    try:
        old = compat.Source(previous.label, opset_from_json(previous.opset), kernels_known=True)
        new = compat.Source(filename, opset_from_json(verdict.opset), kernels_known=True)
        report = check_sources(old, new)
    except OpmarketError as exc:
        verdict.steps.append(Step("compat", "failed", [str(exc)]))
        return
    verdict.compat = report.to_json()
    text = compat.render(report, "text").rstrip().splitlines()
    verdict.steps.append(Step("compat", "passed", text))
    if report.version is None:
        verdict.steps.append(Step("version policy", "not available",
                                  ["a version is missing on one side"]))
    else:
        verdict.steps.append(Step("version policy", "passed" if report.version.ok else "failed",
                                  [report.version.message]))
