"""What ``opmarket doctor`` shows: what this machine has, and for every installed op which
kernel runs on each device and why every other kernel or build does not fit.

Two halves. :func:`decide` is pure: machine facts (:class:`~opmarket.registry._machine.
Machine`) and one op's kernel candidates (:class:`Candidate`) in, a :class:`Decision` per
candidate out; tests feed it made-up machines (an sm_75 GPU, no runtime, an old driver) for
every branch. :func:`examine` gathers the candidates of this installation: the kernels the
loaded plugins registered, the kernels their manifests list that did not register here (a
GPU companion on a machine without a GPU), the device code of each companion's libraries
(read from their ``.nv_fatbin`` sections, :mod:`~opmarket.registry._gpubinary`, so no CUDA
toolkit is needed and the answer is what the file carries, not what its build says), and
the ``cuda<major>`` extras of base plugins whose companion is not installed.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from opmarket.registry._capi_bridge import BRIDGE_API_VERSION, NativeDoor, native_door
from opmarket.registry._cuda_rules import code_runs_on
from opmarket.registry._doctor_frameworks import FrameworkPath, Query, framework_paths
from opmarket.registry._gpubinary import DeviceCode, read_device_code
from opmarket.registry._machine import Gpu, Machine

__all__ = [
    "Candidate",
    "Decision",
    "OpReport",
    "decide",
    "door_text",
    "examine",
    "frameworks_text",
    "gpu_fit",
    "report_json",
]

_EXTRA = re.compile(r"^cuda(\d+)$")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A kernel (or a build not installed) that could run one op on one device."""

    device: str
    dtypes: tuple[str, ...] | None  # None: any dtype
    plugin: str = ""
    registered: bool = True  # False: its manifest lists it, it did not register here
    priority: int = 0
    label: str = ""
    builds: tuple[DeviceCode, ...] = ()  # the CUDA libraries of its distribution
    load_status: str = ""  # what loading its CUDA library said, when it has one
    missing: str = ""  # a companion distribution not installed ("" when installed)
    extra: str = ""  # the extra that installs ``missing`` (cuda13)
    door: NativeDoor | None = None  # how framework bridges run it (registered CPU kernels)
    # the path each framework's bridge gives it (GPU kernels of installed companions)
    frameworks: tuple[FrameworkPath, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether ``candidate`` runs on its device here, and why (or why not)."""

    candidate: Candidate
    chosen: bool
    reason: str


@dataclass(slots=True)
class OpReport:
    """One op's candidates and the decision on each."""

    op: str
    candidates: list[Candidate] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)


# --- the decision (pure) ------------------------------------------------------------------


def _fits(gpu: Gpu, build: DeviceCode) -> str:
    """How ``build`` runs on ``gpu`` ("" when it does not): SASS of the same major and a
    minor at or below the GPU's (``a`` variants only on their own GPU), else PTX at or below
    the compute capability, compiled by the driver when the library loads (the rules:
    ``_cuda_rules``)."""
    capability = gpu.compute_capability[0] * 10 + gpu.compute_capability[1]
    for sass in reversed(build.sass):
        if code_runs_on(sass, capability):
            return f"SASS {sass}"
    for ptx in reversed(build.ptx):
        if code_runs_on(ptx, capability):
            return f"PTX {ptx}, compiled by the driver"
    return ""


def gpu_fit(machine: Machine, builds: Sequence[DeviceCode]) -> tuple[bool, str]:
    """Whether GPU code from ``builds`` can run on this machine, and why (not); the reason
    ends with why a build's device code could not be read (its ``problem``) where one's
    could not: the answer then stands on the others alone."""
    fits, why = _gpu_fit(machine, builds)
    unread = [b.problem for b in builds if b.problem]
    if unread:
        more = f" (and {len(unread) - 1} more)" if len(unread) > 1 else ""
        why += f"; device code not read: {unread[0]}{more}"
    return fits, why


def _gpu_fit(machine: Machine, builds: Sequence[DeviceCode]) -> tuple[bool, str]:
    if not machine.gpus:
        return False, "no GPU visible"
    code = [b for b in builds if b.has_device_code]
    for major in sorted({b.cuda_runtime for b in code if b.cuda_runtime is not None}):
        if machine.runtime(major) is None:
            return False, f"CUDA runtime {major} not found; install the cuda{major} extra"
        if machine.driver_cuda is not None and machine.driver_cuda[0] < major:
            return False, (
                "the NVIDIA driver supports CUDA {}.{}, the build needs CUDA {}; update the "
                "driver".format(*machine.driver_cuda, major)
            )
    if not code:
        return True, f"{machine.gpus[0].sm} GPU"
    for gpu in machine.gpus:
        for build in code:
            how = _fits(gpu, build)
            if how:
                return True, f"{gpu.sm} GPU ({gpu.name}): {how}"
    gpu, build = machine.gpus[0], code[0]
    cc = "{}.{}".format(*gpu.compute_capability)
    return False, (
        f"{gpu.sm} GPU but the build has {'/'.join(build.sass) or 'no SASS'} and no PTX <= {cc}"
    )


def _covers(higher: Candidate, lower: Candidate) -> bool:
    if higher.dtypes is None:
        return True
    return lower.dtypes is not None and set(lower.dtypes) <= set(higher.dtypes)


def _overlaps(a: Candidate, b: Candidate) -> bool:
    return a.dtypes is None or b.dtypes is None or bool(set(a.dtypes) & set(b.dtypes))


def decide(machine: Machine, candidates: Sequence[Candidate]) -> list[Decision]:
    """A decision for each of one op's ``candidates`` on ``machine``: the registered,
    unlabelled, highest-priority kernel of each device (and dtype) is chosen; a GPU kernel
    only where :func:`gpu_fit` says its build runs. The reasons name what is missing."""
    decisions: list[Decision] = []
    gpu_runs = any(c.device == "GPU" and c.registered and not c.label for c in candidates)
    for c in candidates:
        if c.missing:
            fits, why = gpu_fit(machine, ())
            detail = f"{c.missing} (the {c.extra} extra) is not installed"
            reason = f"{why}; {detail}" if not fits else f"{detail}: pip install it to use the GPU"
            decisions.append(Decision(c, False, reason))
            continue
        if c.label:
            decisions.append(
                Decision(c, False, f"label {c.label!r}: runs only for nodes that ask for it")
            )
            continue
        if not c.registered:
            fits, why = gpu_fit(machine, c.builds) if c.device == "GPU" else (True, "")
            if fits:
                why = c.load_status or f"{c.plugin} registered no {c.device} kernel here"
            decisions.append(Decision(c, False, why))
            continue
        better = [
            o
            for o in candidates
            if o is not c
            and o.registered
            and not o.label
            and o.device == c.device
            and o.priority > c.priority
            and _overlaps(o, c)
        ]
        shadow = next((o for o in better if _covers(o, c)), None)
        if shadow is not None:
            decisions.append(
                Decision(
                    c,
                    False,
                    f"{shadow.plugin}'s kernel has priority {shadow.priority} > {c.priority} "
                    "for these dtypes",
                )
            )
            continue
        if c.device == "GPU":
            # Registered where its build cannot run (an sm_75 GPU, sm_80 code): dispatch
            # would pick it and the launch fail, so it is not counted as running.
            fits, why = gpu_fit(machine, c.builds)
            if fits:
                why = f"runs on GPU (the default device): {why}"
            decisions.append(Decision(c, fits, why))
        elif c.device == "CPU":
            where = (
                "inside device('CPU') scopes; the GPU kernel runs by default"
                if gpu_runs
                else "the default device here"
            )
            decisions.append(Decision(c, True, f"runs on CPU ({where})"))
        else:
            decisions.append(Decision(c, True, f"runs on {c.device} inside device() scopes"))
    return decisions


# --- this installation --------------------------------------------------------------------


def _libraries(metadata_dir: str, module: str) -> list[Path]:
    """The shared libraries in the entry point module's top-level package (beside the
    distribution's metadata folder)."""
    folder = Path(metadata_dir).parent / module.partition(".")[0]
    return sorted(folder.rglob("*.so*")) if folder.is_dir() else []


def _missing_companions(metadata_dir: str) -> list[tuple[str, str]]:
    """(distribution, extra) of each ``cuda<major>`` extra whose companion is not installed."""
    dist = importlib.metadata.PathDistribution(Path(metadata_dir))
    out: list[tuple[str, str]] = []
    for req in dist.requires or []:
        name, _, marker = req.partition(";")
        extra = re.search(r"extra\s*==\s*[\"']([^\"']+)[\"']", marker)
        if extra is None or not _EXTRA.match(extra.group(1)):
            continue
        project = re.split(r"[\s<>=!~\[(]", name.strip(), maxsplit=1)[0]
        try:
            importlib.metadata.distribution(project)
        except importlib.metadata.PackageNotFoundError:
            out.append((project, extra.group(1)))
    return out


def examine(machine: Machine) -> tuple[list[OpReport], list[str]]:
    """Load the installed plugins (into the process-wide registry) and decide every op's
    kernels on ``machine``; also the problems found (plugins that failed to load)."""
    from opmarket.registry._envcheck import installed_problems
    from opmarket.registry._listing import kernel_dtypes
    from opmarket.registry._manifest import read_manifest
    from opmarket.registry._plugins import discover
    from opmarket.registry._runtime import get_registry, load_plugins
    from opmarket.sdk import OpmarketError
    from opmarket.sdk.build import load_cuda_library

    infos = {i.name: i for i in load_plugins()}
    reg = get_registry()
    problems = [f"plugin {i.name}: {i.error}" for i in infos.values() if i.status == "failed"]
    # Read from the files (opmarket env-check): a library a plugin loads only when used.
    problems += installed_problems((e.metadata_dir for e in discover()), machine)
    reports: dict[str, OpReport] = {}
    owner: dict[Any, str] = {}
    for info in infos.values():
        for k in info.kernels:
            owner.setdefault(k, info.name)
        for op in info.ops:
            reports.setdefault(op, OpReport(op))

    def dtypes(op: str, k: Any) -> tuple[str, ...] | None:
        op_def = reg.op_def(op)
        found = kernel_dtypes(op_def, k) if op_def is not None else None
        return None if found is None else tuple(t.spec_name for t in sorted(found))

    # Each loaded plugin's CUDA libraries: their device code, and what loading one says.
    entries = [e for e in discover() if e.name in infos and infos[e.name].status == "loaded"]
    builds: dict[str, tuple[DeviceCode, ...]] = {}
    status: dict[str, str] = {}
    for entry in entries:
        for lib in _libraries(entry.metadata_dir, entry.module):
            code = read_device_code(lib)
            if code.problem:  # shown in the GPU kernels' reasons, by the library's name
                problem = f"{lib.name}: {code.problem}"
                builds[entry.name] = (*builds.get(entry.name, ()), replace(code, problem=problem))
            if code.has_device_code:
                builds[entry.name] = (*builds.get(entry.name, ()), code)
                major = code.cuda_runtime
                if major is not None:
                    status[entry.name] = load_cuda_library(lib, runtime_major=major).status
    for op, report in reports.items():
        for k in reg.kernels(op):
            plugin = owner.get(k.definition, "")
            report.candidates.append(
                Candidate(
                    k.device,
                    dtypes(op, k),
                    plugin,
                    True,
                    k.priority,
                    k.label,
                    builds.get(plugin, ()),
                    # The door the framework bridges take: each serves this host's bridge
                    # interface (TensorFlow, JAX and PyTorch all read list attrs).
                    door=(
                        native_door(k, bridge_version=BRIDGE_API_VERSION)
                        if k.device == "CPU"
                        else None
                    ),
                )
            )
    for entry in entries:
        loaded = infos[entry.name]
        try:
            manifest = read_manifest(entry)
        except OpmarketError:
            manifest = None
        registered = {(k.op, k.device) for k in loaded.kernels}
        for k in manifest.kernels if manifest is not None else ():
            if (k.op, k.device) in registered or k.op not in reports:
                continue
            reports[k.op].candidates.append(
                Candidate(
                    k.device,
                    dtypes(k.op, k),
                    entry.name,
                    False,
                    k.priority,
                    k.label,
                    builds.get(entry.name, ()),
                    status.get(entry.name, ""),
                )
            )
        for project, extra in _missing_companions(entry.metadata_dir):
            for op in loaded.ops:
                reports[op].candidates.append(
                    Candidate("GPU", None, entry.name, False, missing=project, extra=extra)
                )
    ordered = sorted(reports.values(), key=lambda r: r.op)
    _add_framework_paths(machine, ordered, reg)
    for report in ordered:
        report.decisions = decide(machine, report.candidates)
        if not any(v.chosen for v in report.decisions):
            problems.append(f"{report.op}: no kernel runs on this machine")
    return ordered, problems


def _add_framework_paths(machine: Machine, reports: Sequence[OpReport], reg: Any) -> None:
    """Each installed GPU kernel's candidate gets the path each framework bridge gives it."""
    asked: list[tuple[OpReport, int]] = []
    queries: list[Query] = []
    for report in reports:
        op_def = reg.op_def(report.op)
        type_attrs = {a.type_attr for a in op_def.inputs if a.type_attr} if op_def else set()
        for i, c in enumerate(report.candidates):
            if c.device != "GPU" or c.missing:
                continue
            first = c.dtypes[0] if c.dtypes else "float"
            queries.append((report.op, c.label, {attr: first for attr in sorted(type_attrs)}))
            asked.append((report, i))
    for (report, i), paths in zip(asked, framework_paths(machine, queries), strict=True):
        report.candidates[i] = replace(report.candidates[i], frameworks=paths)


def report_json(machine: Machine, reports: Sequence[OpReport]) -> dict[str, Any]:
    """``{"machine": {...}, "ops": [{"op": ..., "kernels": [{"device", "dtypes", "chosen",
    "reason"}]}]}``: what ``opmarket doctor --format json`` prints; a registered CPU kernel
    adds ``native`` and ``native_reason``, an installed GPU kernel ``frameworks``
    (``{"tensorflow": {"path", "reason"}, "torch": ..., "jax": ...}``)."""
    return {
        "machine": machine.to_json(),
        "ops": [
            {
                "op": r.op,
                "kernels": [
                    {
                        "device": v.candidate.device,
                        "dtypes": None if v.candidate.dtypes is None else list(v.candidate.dtypes),
                        "chosen": v.chosen,
                        "reason": v.reason,
                        **_door_json(v.candidate.door),
                        **_frameworks_json(v.candidate.frameworks),
                    }
                    for v in r.decisions
                ],
            }
            for r in reports
        ],
    }


def _door_json(door: NativeDoor | None) -> dict[str, Any]:
    return {} if door is None else {"native": door.native, "native_reason": door.reason}


def _frameworks_json(paths: Sequence[FrameworkPath]) -> dict[str, Any]:
    if not paths:
        return {}
    return {"frameworks": {p.framework: {"path": p.path, "reason": p.reason} for p in paths}}


def frameworks_text(paths: Sequence[FrameworkPath]) -> str:
    """The line under a GPU kernel's in the text report: each framework's path, and why."""
    if not paths:
        return ""
    reasons = {p.reason for p in paths}
    if len(reasons) == 1 and "" not in reasons:  # one reason for all (no GPU visible): once
        return (
            f"frameworks: {', '.join(f'{p.framework} {p.path}' for p in paths)} ({reasons.pop()})"
        )
    return "frameworks: " + "; ".join(
        f"{p.framework} {p.path}" + (f" ({p.reason})" if p.reason else "") for p in paths
    )


def door_text(door: NativeDoor | None) -> str:
    """The end of a kernel's line in the text report: the door framework bridges take."""
    if door is None:
        return ""
    return f"; frameworks: {'native' if door.native else 'python'} ({door.reason})"
