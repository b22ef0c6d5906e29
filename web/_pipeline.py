"""Validation of one wheel, step by step: what the marketplace runs on every upload and
``opmarket validate`` runs locally, with the same verdict.

Steps: inspect (the upload checks, outside the sandbox) -> install (unpacked into the
sandbox's private folder) -> entry point -> load -> snapshot -> conformance (the plugin's
code, in its own process in the sandbox) -> manifest (the reported op-set against the
wheel's ``opmarket.opset.json``, read outside) -> compat against the previous validated
release -> version policy. A wheel is ``validated`` when no step failed; a step whose
machinery is missing says ``not available`` and is never counted as passed.

The verdict is decided here, outside the sandbox, from what came back on the result pipe of
the harness (``_probe``), never from what the plugin printed; see docs/marketplace.md for
what that does and does not prove.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opmarket.web._deps import Source, dependency_step
from opmarket.web._gpu_tools import ToolSandbox
from opmarket.web._owned import import_problems, others_packages
from opmarket.web._report import HarnessResult, ReportError, parse_harness
from opmarket.web._sandbox import Limits, SandboxUnavailableError, run_sandboxed
from opmarket.web._shown import MAX_OPSET_BYTES, manifest_size_problems
from opmarket.web._steps import Previous, Step, Verdict
from opmarket.web._wheels import WheelError, WheelLimits, inspect_wheel

if TYPE_CHECKING:
    from opmarket.web._settings import Settings

__all__ = ["Previous", "Step", "Verdict", "limits_from", "validate_wheel"]

_PROBE = Path(__file__).with_name("_probe.py")
_RESULT_CAP = 16 * 1024 * 1024


def limits_from(settings: Settings | None) -> tuple[Limits, WheelLimits]:
    """The sandbox's and the archive checks' limits from the settings (None: defaults)."""
    if settings is None:
        return Limits(), WheelLimits()
    return settings.sandbox_limits(), settings.wheel_limits()


def _env() -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        # getpass.getuser() reads these first: the sandbox has no /etc/passwd.
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        # One thread per library: threads count against the process limit.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # some CPUs need these
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _tail(data: bytes, limit: int = 4000) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else "...\n" + text[-limit:]


def _drain(fd: int, sink: bytearray) -> None:
    with os.fdopen(fd, "rb") as pipe:
        while chunk := pipe.read(65536):
            if len(sink) + len(chunk) > _RESULT_CAP:
                sink.clear()  # too much: not the harness's result
                return
            sink.extend(chunk)


def _run_probe(
    wheel: Path,
    filename: str,
    dist: str,
    limits: Limits,
    *,
    gpu: bool,
    interpreter: str,
    private: Sequence[Path],
    deps: Sequence[Path] = (),
) -> tuple[Any, HarnessResult | str]:
    """Run the harness in the sandbox: its outcome, and its checked result or why none."""
    secret = secrets.token_hex(32)
    secret_r, secret_w = os.pipe()
    os.write(secret_w, secret.encode())
    os.close(secret_w)
    result_r, result_w = os.pipe()
    raw = bytearray()
    reader = threading.Thread(target=_drain, args=(result_r, raw), daemon=True)
    reader.start()
    try:
        outcome = run_sandboxed(
            [
                interpreter,
                "-I",
                "-S",
                "/input/probe.py",
                "harness",
                str(secret_r),
                str(result_w),
                f"/input/{filename}",
                dist,
                *(["--gpu"] if gpu else []),
                *(a for d in deps for a in ("--dep", f"/input/deps/{d.name}")),
            ],
            limits=limits,
            interpreter=interpreter,
            env=_env(),
            binds={
                "/input/probe.py": _PROBE,
                f"/input/{filename}": wheel,
                **{f"/input/deps/{d.name}": d for d in deps},
            },
            pass_fds=(secret_r, result_w),
            private=private,
        )
    finally:
        os.close(secret_r)
        os.close(result_w)  # the reader sees the end once every sandboxed copy is gone too
        reader.join(30)
    try:
        return outcome, parse_harness(bytes(raw), secret)
    except ReportError as exc:
        return outcome, str(exc)


def validate_wheel(
    path: Path,
    *,
    filename: str | None = None,
    previous: Previous | None = None,
    limits: Limits | None = None,
    wheel_limits: WheelLimits | None = None,
    gpu: bool = False,
    interpreter: str = sys.executable,
    private: Sequence[Path] = (),
    dependencies: Source | None = None,
) -> Verdict:
    """Run every step on the wheel at ``path`` and say what each found; ``private``: host
    folders the plugin must never see (the server's data); ``dependencies``: where its
    requirements beyond the warm environment come from (this index; None: nowhere, and
    what is missing is only reported). Raises nothing for a bad wheel: every failure is a
    failed step (``SandboxUnavailableError`` included)."""
    filename = filename or path.name
    limits = limits or Limits()
    if gpu and not limits.devices:  # the GPU's device files, for its kernels' conformance
        limits = dataclasses.replace(
            limits,
            devices=tuple(
                sorted(
                    str(p)
                    for pattern in ("nvidia*", "dri", "kfd")
                    for p in Path("/dev").glob(pattern)
                )
            ),
        )
    verdict = Verdict(filename)
    try:
        info = inspect_wheel(path, filename, wheel_limits)
    except WheelError as exc:
        verdict.steps.append(Step("inspect", "failed", [str(exc)]))
        return verdict
    clashes = import_problems(path, info.normalized) + manifest_size_problems(path)
    if dependencies is not None:  # another project's package, by the name it installs under
        clashes += others_packages(path, info.normalized, dependencies.projects)
    if clashes:
        verdict.steps.append(Step("inspect", "failed", clashes))
        return verdict
    verdict.steps.append(
        Step(
            "inspect",
            "passed",
            [f"{info.name} {info.version}; archive checks passed (paths, links, sizes)"],
        )
    )
    tools = ToolSandbox(limits, interpreter, private)
    if _static_gpu(verdict, path, filename, info.variant, tools):  # rejected before code runs
        return verdict
    deps = dependency_step(verdict, info.metadata, dependencies)
    if deps is None:
        return verdict
    try:
        with contextlib.ExitStack() as stack:
            wheels: list[Path] = []
            if deps and dependencies is not None:
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="opm-deps-")))
                wheels = [dependencies.fetch(c, folder) for c in deps]
            outcome, result = _run_probe(
                path.resolve(),
                filename,
                info.normalized,
                limits,
                gpu=gpu,
                interpreter=interpreter,
                private=private,
                deps=wheels,
            )
    except SandboxUnavailableError as exc:
        verdict.steps.append(
            Step(
                "sandbox",
                "failed",
                [
                    str(exc),
                    "the marketplace does not run uploaded code outside a sandbox "
                    "(OPMARKET_VALIDATION_ALLOW_UNSANDBOXED=1 overrides that; "
                    "see docs/marketplace.md)",
                ],
            )
        )
        return verdict
    note = "sandbox: " + "; ".join(outcome.protections)
    if outcome.peak_memory_bytes is not None:
        note += f"; peak memory of the whole job {outcome.peak_memory_bytes / 2**20:.0f} MiB"
    if outcome.problem or isinstance(result, str):
        why = outcome.problem or str(result)
        verdict.steps.append(
            Step(
                "load",
                "failed",
                [
                    f"the plugin's process {why}" if outcome.problem else why,
                    _tail(outcome.stderr),
                    _tail(outcome.stdout),
                    note,
                ],
            )
        )
        return verdict
    if result.install_error:
        verdict.steps.append(Step("install", "failed", [result.install_error, note]))
        return verdict
    verdict.steps.append(
        Step(
            "install",
            "passed",
            [
                "unpacked into the sandbox's private folder, as an installer would",
                note,
                "" if result.protected else "the harness could not make itself non-dumpable",
            ],
        )
    )
    why = _ended_badly(result)
    if why:
        verdict.steps.append(
            Step(
                "load",
                "failed",
                [f"the plugin's process {why}", _tail(outcome.stderr), _tail(outcome.stdout)],
            )
        )
        return verdict
    report = result.report
    assert report is not None
    for name, status, log in report.steps:
        verdict.steps.append(Step(name, status, log))
    verdict.opset = report.opset  # its ops and kernels: only as the manifest allows (_shown)
    if report.opset or not verdict.failures:  # a load that failed reports no op-set
        _manifest(verdict, path, report.registered_kernels, (report.kernels, gpu))
    output = (_tail(outcome.stderr) + "\n" + _tail(outcome.stdout)).strip()
    if output:
        verdict.steps.append(Step("plugin output", "skipped", [output]))
    if verdict.opset and not verdict.failures:
        _compat(verdict, previous, filename)
    return verdict


def _static_gpu(
    verdict: Verdict,
    path: Path,
    filename: str,
    variant: dict[str, Any] | None,
    tools: ToolSandbox,
) -> bool:
    """The static GPU and variant steps (see _gpu, _variants); True when one failed."""
    from opmarket.web._gpu import inspect_gpu
    from opmarket.web._variants import variant_note

    if variant is not None:
        verdict.steps.append(Step("variant", "passed", variant_note(filename, variant)))
    gpu = inspect_gpu(path, filename, tools)
    if gpu is None:
        return False
    verdict.gpu = gpu.summary
    verdict.steps.append(Step("gpu (static)", gpu.status, gpu.log))
    return gpu.status == "failed"


def _ended_badly(result: HarnessResult) -> str:
    import signal

    if result.returncode < 0:
        try:
            name = signal.Signals(-result.returncode).name
        except ValueError:
            name = str(-result.returncode)
        return f"was killed by signal {name}"
    if result.report_error:
        return result.report_error
    if result.returncode != 0:
        return f"exited with {result.returncode} before it reported"
    if result.report is None:
        return "ended without a report"
    return ""


def _manifest(
    verdict: Verdict,
    wheel: Path,
    registered: list[tuple[str, str]],
    ran: tuple[list[dict[str, str]], bool],
) -> None:
    """Compare the reported op-set with the manifest read here from the archive; list the
    manifest's ops, the rows of ``ran`` (reported rows, whether a GPU was there) it allows
    and its kernels for devices this worker has not (not run): see :mod:`._shown`."""
    from opmarket.compat import opset_from_wheel
    from opmarket.registry._manifest import MANIFEST, MANIFEST_FIX, op_difference
    from opmarket.sdk import OpmarketError, opset_from_json
    from opmarket.web._shown import MAX_KERNEL_ROWS, MAX_OPS, not_run, shown_kernels, shown_ops

    if len(verdict.opset) > MAX_OPSET_BYTES:  # not parsed: see _shown
        verdict.steps.append(
            Step("manifest", "failed", [f"the reported op-set is over {MAX_OPSET_BYTES} bytes"])
        )
        return
    try:
        have = {o.name: o for o in opset_from_json(verdict.opset).ops}
    except (OpmarketError, ValueError) as exc:
        verdict.steps.append(Step("manifest", "failed", [f"the reported op-set: {exc}"]))
        return
    try:
        manifest = opset_from_wheel(wheel)
    except Exception as exc:  # any unreadable manifest is the wheel's failure
        verdict.steps.append(Step("manifest", "failed", [f"{MANIFEST}: {exc}; {MANIFEST_FIX}"]))
        return
    want = {o.name: o for o in manifest.ops}
    if not want and not have and not manifest.kernels:
        verdict.steps.append(
            Step("manifest", "failed", ["the plugin registers no ops and its manifest no kernels"])
        )
        return
    problems = [f"{n}: in the manifest, not registered" for n in sorted(set(want) - set(have))]
    problems += [f"{n}: registered, not in the manifest" for n in sorted(set(have) - set(want))]
    problems += [
        f"{n}: the manifest's definition differs from the registered one in "
        + str(op_difference(want[n], have[n]))
        for n in sorted(set(want) & set(have))
        if want[n] != have[n]
    ]
    if problems:
        problems.append(f"{MANIFEST} is stale or missing: {MANIFEST_FIX}")
    verdict.ops = shown_ops(manifest)
    verdict.kernels, left_out = shown_kernels(manifest, ran[0], ("CPU", "GPU")[: 1 + ran[1]])
    if len(verdict.ops) > MAX_OPS or len(verdict.kernels) > MAX_KERNEL_ROWS:
        problems.append(
            f"{len(verdict.ops)} ops and {len(verdict.kernels)} kernel results; the index "
            f"lists at most {MAX_OPS} ops and {MAX_KERNEL_ROWS} kernel results per file"
        )
        verdict.ops, verdict.kernels = verdict.ops[:MAX_OPS], verdict.kernels[:MAX_KERNEL_ROWS]
    verdict.steps.append(
        Step(
            "manifest",
            "failed" if problems else "passed",
            (problems or ["opmarket.opset.json matches what registers"])
            + [f"{left_out} kernel result(s) for kernels it does not declare: not listed"]
            * bool(left_out),
        )
    )
    verdict.kernels += not_run(verdict.kernels, registered, manifest)


def _compat(verdict: Verdict, previous: Previous | None, filename: str) -> None:
    from opmarket import compat
    from opmarket.sdk import OpmarketError, opset_from_json

    check_sources = getattr(compat, "check_sources", None)
    if check_sources is None:
        verdict.steps.append(
            Step("compat", "not available", ["opmarket.compat has no check_sources yet"])
        )
        return
    if previous is None:
        verdict.steps.append(
            Step("compat", "skipped", ["first validated release: nothing to compare against"])
        )
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
    # Breaking findings never read "passed": allowed by a major bump, else the step fails.
    breaking = "allowed" if report.version is not None and report.version.ok else "failed"
    verdict.steps.append(Step("compat", "passed" if report.compatible else breaking, text))
    if report.version is None:
        verdict.steps.append(
            Step("version policy", "not available", ["a version is missing on one side"])
        )
    else:
        verdict.steps.append(
            Step(
                "version policy",
                "passed" if report.version.ok else "failed",
                [report.version.message],
            )
        )
