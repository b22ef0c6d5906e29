"""Validation of one wheel, step by step: what the marketplace runs on every upload and
``opmarket validate`` runs locally, with the same verdict.

Steps: inspect (the upload checks, outside the sandbox) -> install (unpacked into the
sandbox's private folder) -> entry point -> load -> snapshot -> conformance (the plugin's
code, in its own process in the sandbox) -> manifest (the reported op-set against the
wheel's ``opmarket.opset.json``, read outside) -> compat against the previous validated
release -> version policy -> loads with (a validated file's table, see ``_loads``: facts,
never a verdict). A wheel is ``validated`` when no step failed; a step whose machinery is
missing says ``not available`` and is never counted as passed.

The verdict is decided here, outside the sandbox, from what came back on the result pipe of
the harness (``_probe``), never from what the plugin printed; see docs/marketplace.md for
what that does and does not prove.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opmarket.web.gpu._tools import ToolSandbox
from opmarket.web.sandbox._run import Limits, SandboxUnavailableError
from opmarket.web.validation._deps import IndexWheel, WheelSource, dependency_step
from opmarket.web.validation._harness import run_probe, tail
from opmarket.web.validation._loads import Known, loads_with
from opmarket.web.validation._owned import import_problems, others_packages
from opmarket.web.validation._report import HarnessResult
from opmarket.web.validation._shown import MAX_OPSET_BYTES, manifest_size_problems
from opmarket.web.validation._steps import KernelRow, Previous, Step, StepStatus, Verdict
from opmarket.web.wheels._filename import WheelName
from opmarket.web.wheels._inspect import WheelError, WheelInfo, WheelLimits, inspect_wheel

if TYPE_CHECKING:
    from opmarket.web._settings import Settings

__all__ = ["Previous", "Step", "Verdict", "job_limits", "limits_from", "validate_wheel"]


def limits_from(settings: Settings | None) -> tuple[Limits, WheelLimits]:
    """The sandbox's and the archive checks' limits from the settings (None: defaults)."""
    if settings is None:
        return Limits(), WheelLimits()
    return settings.sandbox_limits(), settings.wheel_limits()


@dataclasses.dataclass(slots=True)
class _Run:
    """One wheel's validation as it goes: what it was asked, and what the steps so far found."""

    path: Path
    filename: str
    previous: Previous | None
    limits: Limits
    wheel_limits: WheelLimits | None
    gpu: bool
    interpreter: str
    private: Sequence[Path]
    dependencies: WheelSource | None
    verdict: Verdict
    known: Sequence[Known] | None = None  # the "loads with" environments; None: no table
    warm: bool = False  # this thread's sandbox, kept for its next job (_harness)
    info: WheelInfo | None = None
    deps: list[IndexWheel] = dataclasses.field(default_factory=list)
    outcome: Any = None  # the sandbox's SandboxResult
    result: HarnessResult | None = None

    def add(self, name: str, status: StepStatus, log: list[str]) -> None:
        self.verdict.steps.append(Step(name, status, log))


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
    dependencies: WheelSource | None = None,
    known: Sequence[Known] | None = None,
    warm: bool = False,
) -> Verdict:
    """Run every step on the wheel at ``path`` and say what each found; ``private``: host
    folders the plugin must never see (the server's data); ``dependencies``: where its
    requirements beyond the warm environment come from (this index; None: nowhere, and
    what is missing is only reported); ``known``: the environments of the "loads with"
    table of a file that passed (None: no table); ``warm``: as a validation worker does,
    run in this thread's sandbox, which then serves its next validation too (put back as
    it was between them, or a new one started: see ``_harness``). Raises nothing for a bad
    wheel: every failure is a failed step (``SandboxUnavailableError`` included). The
    steps are :data:`STEPS`, in order, until one says to stop."""
    filename = filename or path.name
    limits = job_limits(limits, gpu)
    run = _Run(
        path,
        filename,
        previous,
        limits,
        wheel_limits,
        gpu,
        interpreter,
        private,
        dependencies,
        Verdict(filename),
        known,
        warm=warm,
    )
    for step in STEPS:
        if not step(run):
            break
    return run.verdict


def job_limits(limits: Limits | None, gpu: bool) -> Limits:
    """The sandbox's limits for a job: ``limits`` (None: the defaults), with the GPU's
    device files for its kernels' conformance when ``gpu``."""
    limits = limits or Limits()
    if gpu and not limits.devices:
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
    return limits


def _inspect(run: _Run) -> bool:
    """The upload checks, outside the sandbox, and names the wheel may not install."""
    try:
        info = inspect_wheel(run.path, run.filename, run.wheel_limits)
    except WheelError as exc:
        run.add("inspect", StepStatus.FAILED, [str(exc)])
        return False
    clashes = import_problems(run.path, info.normalized) + manifest_size_problems(run.path)
    if run.dependencies is not None:  # another project's package, by the name it installs under
        clashes += others_packages(run.path, info.normalized, run.dependencies.projects)
    if clashes:
        run.add("inspect", StepStatus.FAILED, clashes)
        return False
    run.info = info
    run.add(
        "inspect",
        StepStatus.PASSED,
        [f"{info.name} {info.version}; archive checks passed (paths, links, sizes)"],
    )
    return True


def _static_gpu_step(run: _Run) -> bool:
    """The static GPU and variant steps: a wheel they reject is rejected before code runs."""
    assert run.info is not None
    tools = ToolSandbox(run.limits, run.interpreter, run.private)
    return not _static_gpu(run.verdict, run.path, run.info.wheel, run.info.variant, tools)


def _dependencies(run: _Run) -> bool:
    """The requirements beyond the warm environment: from the index, or the step fails."""
    assert run.info is not None
    deps = dependency_step(run.verdict, run.info.metadata, run.dependencies)
    if deps is None:
        return False
    run.deps = deps
    return True


def _sandboxed(run: _Run) -> bool:
    """Install, entry point, load, snapshot and conformance: the plugin's code, in the
    sandbox; its own steps are taken from the harness's checked report."""
    assert run.info is not None
    try:
        with contextlib.ExitStack() as stack:
            wheels: list[Path] = []
            if run.deps and run.dependencies is not None:
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="opm-deps-")))
                wheels = [run.dependencies.fetch(c, folder) for c in run.deps]
            outcome, result = run_probe(
                run.path.resolve(),
                run.filename,
                run.info.normalized,
                run.limits,
                gpu=run.gpu,
                interpreter=run.interpreter,
                private=run.private,
                deps=wheels,
                warm=run.warm,
            )
    except SandboxUnavailableError as exc:
        run.add(
            "sandbox",
            StepStatus.FAILED,
            [
                str(exc),
                "the marketplace does not run uploaded code outside a sandbox "
                "(OPMARKET_VALIDATION_ALLOW_UNSANDBOXED=1 overrides that; "
                "see docs/marketplace.md)",
            ],
        )
        return False
    note = "sandbox: " + "; ".join(outcome.protections)
    if outcome.peak_memory_bytes is not None:
        note += f"; peak memory of the whole job {outcome.peak_memory_bytes / 2**20:.0f} MiB"
    if outcome.problem or isinstance(result, str):
        why = outcome.problem or str(result)
        run.add(
            "load",
            StepStatus.FAILED,
            [
                f"the plugin's process {why}" if outcome.problem else why,
                tail(outcome.stderr),
                tail(outcome.stdout),
                note,
            ],
        )
        return False
    if result.install_error:
        run.add("install", StepStatus.FAILED, [result.install_error, note])
        return False
    run.add(
        "install",
        StepStatus.PASSED,
        [
            "unpacked into the sandbox's private folder, as an installer would",
            note,
            "" if result.protected else "the harness could not make itself non-dumpable",
        ],
    )
    why = _ended_badly(result)
    if why:
        run.add(
            "load",
            StepStatus.FAILED,
            [f"the plugin's process {why}", tail(outcome.stderr), tail(outcome.stdout)],
        )
        return False
    report = result.report
    assert report is not None
    for name, status, log in report.steps:
        run.add(name, status, log)
    run.verdict.opset = report.opset  # its ops and kernels: only as the manifest allows (_shown)
    run.outcome, run.result = outcome, result
    return True


def _manifest_step(run: _Run) -> bool:
    """The reported op-set against the wheel's manifest, read here (a load that failed
    reports no op-set: then there is nothing to compare)."""
    assert run.result is not None and run.result.report is not None
    report = run.result.report
    if report.opset or not run.verdict.failures:
        _manifest(run.verdict, run.path, report.registered_kernels, (report.kernels, run.gpu))
    return True


def _plugin_output(run: _Run) -> bool:
    """What the plugin printed: its log, never a verdict."""
    output = (tail(run.outcome.stderr) + "\n" + tail(run.outcome.stdout)).strip()
    if output:
        run.add("plugin output", StepStatus.SKIPPED, [output])
    return True


def _compat_step(run: _Run) -> bool:
    """Compatibility with the previous validated release, and the version policy."""
    if run.verdict.opset and not run.verdict.failures:
        _compat(run.verdict, run.previous, run.filename)
    return True


def _loads_with_step(run: _Run) -> bool:
    """A validated file's "loads with" table (read in the sandbox): facts, not a step."""
    if run.known is not None and not run.verdict.failures:
        tools = ToolSandbox(run.limits, run.interpreter, run.private)
        run.verdict.loads_with = loads_with(run.path, run.filename, run.known, tools)
    return True


#: The steps, in order: each adds its findings to the verdict and says whether to go on.
#: A new step is a function here.
STEPS: tuple[Callable[[_Run], bool], ...] = (
    _inspect,
    _static_gpu_step,
    _dependencies,
    _sandboxed,
    _manifest_step,
    _plugin_output,
    _compat_step,
    _loads_with_step,
)


def _static_gpu(
    verdict: Verdict,
    path: Path,
    wheel: WheelName,
    variant: dict[str, Any] | None,
    tools: ToolSandbox,
) -> bool:
    """The static GPU and variant steps (see _gpu, _variants); True when one failed."""
    from opmarket.web.gpu._checks import inspect_gpu
    from opmarket.web.wheels._variants import variant_note

    if variant is not None:
        note = variant_note(wheel.variant or "", variant)
        verdict.steps.append(Step("variant", StepStatus.PASSED, note))
    gpu = inspect_gpu(path, wheel, tools)
    if gpu is None:
        return False
    verdict.gpu = gpu.summary
    verdict.steps.append(Step("gpu (static)", gpu.status, gpu.log))
    return gpu.status == StepStatus.FAILED


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
    ran: tuple[list[KernelRow], bool],
) -> None:
    """Compare the reported op-set with the manifest read here from the archive; list the
    manifest's ops, the rows of ``ran`` (reported rows, whether a GPU was there) it allows
    and its kernels for devices this worker has not (not run): see :mod:`._shown`."""
    from opmarket.compat import opset_from_wheel
    from opmarket.registry._manifest import MANIFEST, MANIFEST_FIX, op_difference
    from opmarket.sdk import OpmarketError, opset_from_json
    from opmarket.web.validation._shown import (
        MAX_KERNEL_ROWS,
        MAX_OPS,
        not_run,
        shown_kernels,
        shown_ops,
    )

    if len(verdict.opset) > MAX_OPSET_BYTES:  # not parsed: see _shown
        verdict.steps.append(
            Step(
                "manifest",
                StepStatus.FAILED,
                [f"the reported op-set is over {MAX_OPSET_BYTES} bytes"],
            )
        )
        return
    try:
        have = {o.name: o for o in opset_from_json(verdict.opset).ops}
    except (OpmarketError, ValueError) as exc:
        verdict.steps.append(Step("manifest", StepStatus.FAILED, [f"the reported op-set: {exc}"]))
        return
    try:
        manifest = opset_from_wheel(wheel)
    except Exception as exc:  # any unreadable manifest is the wheel's failure
        verdict.steps.append(
            Step("manifest", StepStatus.FAILED, [f"{MANIFEST}: {exc}; {MANIFEST_FIX}"])
        )
        return
    want = {o.name: o for o in manifest.ops}
    if not want and not have and not manifest.kernels:
        verdict.steps.append(
            Step(
                "manifest",
                StepStatus.FAILED,
                ["the plugin registers no ops and its manifest no kernels"],
            )
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
            StepStatus.FAILED if problems else StepStatus.PASSED,
            (problems or ["opmarket.opset.json matches what registers"])
            + [f"{left_out} kernel result(s) for kernels it does not declare: not listed"]
            * bool(left_out),
        )
    )
    verdict.kernels += not_run(verdict.kernels, registered, manifest)


def _compat(verdict: Verdict, previous: Previous | None, filename: str) -> None:
    from opmarket import compat
    from opmarket.sdk import OpmarketError, opset_from_json

    if previous is None:
        verdict.steps.append(
            Step(
                "compat",
                StepStatus.SKIPPED,
                ["first validated release: nothing to compare against"],
            )
        )
        verdict.steps.append(Step("version policy", StepStatus.SKIPPED, ["first release"]))
        return
    try:
        old = compat.Source(previous.label, opset_from_json(previous.opset), kernels_known=True)
        new = compat.Source(filename, opset_from_json(verdict.opset), kernels_known=True)
        report = compat.check_sources(old, new)
    except OpmarketError as exc:
        verdict.steps.append(Step("compat", StepStatus.FAILED, [str(exc)]))
        return
    verdict.compat = report.to_json()
    text = compat.render(report, "text").rstrip().splitlines()
    # Breaking findings never read "passed": allowed by a major bump, else the step fails.
    breaking = (
        StepStatus.ALLOWED
        if report.version is not None and report.version.ok
        else StepStatus.FAILED
    )
    verdict.steps.append(Step("compat", StepStatus.PASSED if report.compatible else breaking, text))
    if report.version is None:
        verdict.steps.append(
            Step("version policy", StepStatus.NOT_AVAILABLE, ["a version is missing on one side"])
        )
    else:
        verdict.steps.append(
            Step(
                "version policy",
                StepStatus.PASSED if report.version.ok else StepStatus.FAILED,
                [report.version.message],
            )
        )
