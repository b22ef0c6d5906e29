"""Static GPU validation of an uploaded wheel: what its shared libraries need and carry,
read without a GPU and without running them.

For every shared library in the wheel (``*.so``, ``*.so.N``):

- the CUDA runtime it needs: its ``DT_NEEDED`` entries (``libcudart.so.13``), read with
  the ELF reader of ``opmarket.registry`` (in bounded memory; a library past its limits on
  sections and dynamic entries, which no linker's reaches, fails the step), and whether
  the wheel provides it, by bundling that file or by declaring a dependency on NVIDIA's
  runtime wheel of that major (``nvidia-cuda-runtime>=13,<14``, or ``nvidia-cuda-runtime-cu13``);
- the device code it carries: SASS (``sm_80``: machine code for one GPU architecture) and
  PTX (``compute_75``: an intermediate form the driver compiles for newer GPUs), listed by
  NVIDIA's ``cuobjdump`` (see :mod:`opmarket.web.gpu._tools`); where cuobjdump cannot
  read the library or lists fewer architectures than opmarket's ELF reader
  (:mod:`opmarket.registry._gpubinary`, doctor's and env-check's) finds (cuobjdump reads
  section headers, which ``sstrip`` removes and the loader ignores), cuobjdump also lists
  the fatbins the reader finds in the loaded segments, and the log says so;
- the GPUs it runs on: a compute capability X.Y for which it has SASS (sm_Xy with y <= Y:
  cubins run on later minors of their major; ``sm_90a`` only on 9.0) or PTX at or below
  X.Y (the rules: ``opmarket.registry._cuda_rules``); the lowest such is
  ``min_compute_capability``;
- the minimum Linux driver, from the CUDA runtime's major (minor version compatibility).

The manylinux policy of a GPU wheel is read with ``auditwheel`` with the CUDA driver and
runtime excluded, as PyTorch and JAX exclude them, and shown.

A wheel is rejected when its manifest declares GPU kernels and none of its shared libraries
carries device code (a native plugin built where nvcc was missing), or when a library needs
a CUDA runtime that neither the wheel nor its declared dependencies provide. A wheel with
GPU kernels and no shared library at all (kernels written in Python: CuPy, Triton, a
framework's ops) has no device code to read: its step says ``skipped``.

Nothing here says a GPU kernel *works*: that is the GPU worker's
conformance step (``opmarket worker --gpu``); until one has run, GPU kernels say
``gpu: not run``.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.markers import InvalidMarker
from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from opmarket.registry._cuda_rules import capability_number, parse_arch
from opmarket.registry._elf import read_library
from opmarket.registry._gpubinary import DeviceCode, EntryBudget, arch_key, read_device_code
from opmarket.web.gpu._tools import (
    AUDITWHEEL_EXCLUDE,
    ToolError,
    ToolSandbox,
    auditwheel_show,
    cuobjdump_path,
    cuobjdump_version,
    list_device_code,
)
from opmarket.web.validation._steps import StepStatus
from opmarket.web.wheels._filename import WheelName

__all__ = ["MAX_LIBRARIES", "MIN_DRIVER", "GpuCheck", "capability_number", "inspect_gpu", "runs_on"]

_SHARED = re.compile(r"\.so(\.\d+)*$")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)$")
_OTHER_CUDA = re.compile(
    r"^lib(cublas|cublasLt|cufft|curand|cusparse|cusolver|nvrtc|nvJitLink|cudnn)\.so"
)
_MAX_LIBRARY = 512 * 1024 * 1024
#: The most shared libraries one wheel may carry: each is read by a sandboxed cuobjdump
#: (tens of milliseconds each), so a wheel of 20,000 tiny libraries would hold a worker
#: for many minutes. Plugins carry one to a few; a repaired wheel's vendored ones add some.
MAX_LIBRARIES = 64

#: The minimum Linux driver for a CUDA runtime major: CUDA 11 and later run on any driver
#: of their major's first release or newer ("minor version compatibility"). Source: NVIDIA,
#: CUDA Toolkit Release Notes, table "CUDA Toolkit and Minimum Required Driver Version for
#: CUDA Minor Version Compatibility", and
#: https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
#: (13.x: >= 580, 12.x: >= 525, 11.x: >= 450; the exact versions are those of the x.0 GA
#: releases' drivers).
MIN_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


@dataclass(slots=True)
class GpuCheck:
    """The static GPU step's outcome: status (passed, failed, not available), the log, and
    the ``gpu`` object of the JSON API (None for a wheel without device code)."""

    status: StepStatus
    log: list[str] = field(default_factory=list)
    summary: dict[str, Any] | None = None


def _arch(name: str) -> tuple[str, int, str]:
    arch = parse_arch(name)
    return arch.kind, arch.capability, arch.suffix


def runs_on(sass: list[str], ptx: list[str], capability: int) -> bool:
    """Whether device code with these SASS architectures and PTX versions runs on a GPU of
    ``capability`` (see :func:`capability_number`), by the rules of ``registry._cuda_rules``."""
    return any(parse_arch(a).runs_on(capability) for a in [*sass, *ptx])


def _label(capability: int) -> str:
    return f"{capability // 10}.{capability % 10}"


def _requirements(zf: zipfile.ZipFile) -> list[Requirement]:
    """The wheel's unconditional dependencies (or those whose marker holds on Linux)."""
    metadata = next(
        (n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")),
        None,
    )
    if metadata is None:
        return []
    raw, _ = parse_email(zf.read(metadata))
    found = []
    for line in raw.get("requires_dist", []):
        try:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(
                {"extra": "", "sys_platform": "linux", "platform_system": "Linux"}
            ):
                found.append(req)
        except (InvalidRequirement, InvalidMarker):
            continue
    return found


def _runtime_provider(requirements: list[Requirement], major: int) -> tuple[str, int, str]:
    """The dependency that brings CUDA runtime ``major``: (requirement, lowest minor it
    allows, a warning); ("", 0, "") when none does."""
    for req in requirements:
        name = req.name.lower().replace("_", "-")
        if name == f"nvidia-cuda-runtime-cu{major}":
            return str(req), 0, ""
        if name != "nvidia-cuda-runtime":
            continue
        # Versions of that major the requirement might allow: N.0 to N.19, and those its
        # specifiers name (==13.0.96, ==13.*).
        probes = {Version(f"{major}.{m}") for m in range(20)}
        for spec in req.specifier:
            with contextlib.suppress(InvalidVersion):
                probes.add(Version(spec.version.removesuffix(".*")))
        allowed = sorted(v.minor for v in probes if v.major == major and req.specifier.contains(v))
        if not allowed:
            continue
        warning = ""
        if req.specifier.contains(Version(f"{major + 1}.0")):
            warning = (
                f"{req} also allows CUDA {major + 1}'s runtime, which has no "
                f"libcudart.so.{major}: pin <{major + 1}"
            )
        return str(req), allowed[0], warning
    return "", 0, ""


def _declared_gpu_kernels(path: Path) -> tuple[list[str], str]:
    """The ops the wheel's manifest declares GPU kernels for, and why it could not be read."""
    from opmarket.compat import opset_from_wheel

    try:
        opset = opset_from_wheel(path)
    except Exception as exc:  # not a plugin, or its manifest is the manifest step's concern
        return [], str(exc)
    return sorted({k.op for k in opset.kernels if k.device == "GPU"}), ""


def _min_capability(libraries: list[dict[str, Any]]) -> int | None:
    """The lowest compute capability on which every library with device code runs."""
    with_code = [lib for lib in libraries if lib["sass"] or lib["ptx"]]
    candidates = sorted({_arch(a)[1] for lib in with_code for a in [*lib["sass"], *lib["ptx"]]})
    for capability in candidates:
        if all(runs_on(lib["sass"], lib["ptx"], capability) for lib in with_code):
            return capability
    return None


def inspect_gpu(
    path: Path, wheel: WheelName | None = None, sandbox: ToolSandbox | None = None
) -> GpuCheck | None:
    """Check the wheel at ``path`` (its file name parsed: ``wheel``, default ``path``'s name)
    as described in this module; None for a wheel that has no shared library and declares no
    GPU kernel (nothing to check). The tools run in ``sandbox`` (default: the validation
    sandbox's default limits)."""
    sandbox = sandbox or ToolSandbox()
    with zipfile.ZipFile(path) as zf:
        members = [
            m
            for m in zf.infolist()
            if not m.is_dir() and _SHARED.search(m.filename) and m.file_size <= _MAX_LIBRARY
        ]
        declared, _why = _declared_gpu_kernels(path)
        if not members and not declared:
            return None
        if not members:  # GPU kernels in Python: nothing built for a GPU to read here
            return GpuCheck(
                StepStatus.SKIPPED,
                [
                    f"GPU kernels declared for {', '.join(declared)} and no shared library: "
                    "kernels written in Python (CuPy, Triton, a framework's ops) carry no "
                    "device code to check; whether they work: gpu: not run until a GPU "
                    "worker (opmarket worker --gpu) checks them"
                ],
            )
        if len(members) > MAX_LIBRARIES:
            return GpuCheck(
                StepStatus.FAILED,
                [
                    f"the wheel carries {len(members)} shared libraries; the index reads at "
                    f"most {MAX_LIBRARIES} per wheel (each is checked for device code)"
                ],
            )
        bundled = {PurePosixPath(n).name for n in zf.namelist()}
        try:
            requirements = _requirements(zf)
            with tempfile.TemporaryDirectory(prefix="opmarket-gpu-") as tmp:
                check, read = _check_libraries(
                    zf, members, Path(tmp), requirements, bundled, sandbox=sandbox
                )
        except (OSError, zipfile.BadZipFile, RuntimeError, ValueError) as exc:
            return GpuCheck(StepStatus.FAILED, [f"the wheel's libraries cannot be read: {exc}"])
    if check.summary is None:
        if declared and read:
            check.status = StepStatus.FAILED
            check.log.append(
                f"the manifest declares GPU kernels for {', '.join(declared)} but no shared "
                "library in the wheel carries device code (cuobjdump found no SASS and no "
                "PTX): build the kernels with nvcc into the wheel's library"
            )
        return check
    if declared:
        check.log.append(
            f"GPU kernels declared for {', '.join(declared)}; whether they work: "
            "gpu: not run until a GPU worker (opmarket worker --gpu) checks them"
        )
    _audit(check, path, wheel or WheelName.parse(path.name), sandbox)
    return check


def _check_libraries(
    zf: zipfile.ZipFile,
    members: list[zipfile.ZipInfo],
    tmp: Path,
    requirements: list[Requirement],
    bundled: set[str],
    *,
    sandbox: ToolSandbox,
) -> tuple[GpuCheck, bool]:
    """The libraries' findings, and whether their device code could be read."""
    check = GpuCheck(StepStatus.PASSED)
    tool = cuobjdump_path()
    if tool is None:
        check.status = StepStatus.NOT_AVAILABLE
        check.log.append(
            "cuobjdump not found: install the nvidia-cuda-cuobjdump wheel beside the index "
            "(opmarket's web extra does); device code was not read"
        )
    else:
        try:
            version = cuobjdump_version(tool, sandbox)
            check.log.append(f"cuobjdump {version} ({tool}, in the sandbox)")
            check.summary = {"tools": {"cuobjdump": version}}
        except ToolError as exc:
            check.status, tool = StepStatus.NOT_AVAILABLE, None
            check.log.append(str(exc))
    libraries: list[dict[str, Any]] = []
    majors: dict[int, int] = {}  # CUDA major -> lowest minor allowed
    # The ELF reader runs in this process: the wheel's libraries share one library's budget
    # of fatbin entries (about a second of CPU), however many they are.
    budget = EntryBudget(where="in the wheel's libraries")
    for index, member in enumerate(members):
        local = tmp / f"{index}.so"
        with zf.open(member) as src, open(local, "wb") as out:
            while chunk := src.read(1024 * 1024):
                out.write(chunk)
        elf = read_library(local)
        needs = elf.needed
        lib: dict[str, Any] = {"path": member.filename, "needs": [], "sass": [], "ptx": []}
        notes = []
        if elf.problem:  # past the reader's limits (no linker's library is): not read
            check.status = StepStatus.FAILED
            notes.append(f"its ELF headers cannot be read: {elf.problem}")
        for soname in needs:
            match = _CUDART.match(soname)
            if match is None:
                if _OTHER_CUDA.match(soname):
                    lib["needs"].append(soname)
                    notes.append(f"needs {soname} (not checked: only the runtime is)")
                continue
            lib["needs"].append(soname)
            major = int(match.group(1))
            provider, minor, warning = _runtime_provider(requirements, major)
            if soname in bundled:
                notes.append(f"needs {soname}, bundled in the wheel")
                majors.setdefault(major, 0)
            elif provider:
                notes.append(f"needs {soname}, provided by the dependency {provider}")
                majors[major] = minor
                if warning:
                    notes.append(warning)
            else:
                check.status = StepStatus.FAILED
                majors.setdefault(major, 0)
                notes.append(
                    f"needs {soname}, which nothing provides: declare a dependency on "
                    f"nvidia-cuda-runtime>={major},<{major + 1} (or bundle it)"
                )
        if tool is not None:
            try:
                code = _device_code(
                    tool, local, sandbox, notes, unread=bool(elf.problem), budget=budget
                )
                lib["sass"], lib["ptx"] = list(code.sass), list(code.ptx)
            except ToolError as exc:
                check.status = StepStatus.FAILED
                notes.append(f"cuobjdump cannot read it: {exc}")
        if lib["sass"] or lib["ptx"]:
            notes.append(
                f"SASS {', '.join(lib['sass']) or 'none'}; PTX {', '.join(lib['ptx']) or 'none'}"
            )
        elif tool is not None:
            notes.append("no device code")
        libraries.append(lib)
        check.log.append(f"{member.filename}: " + "; ".join(notes or ["no CUDA library needed"]))
    if not any(lib["sass"] or lib["ptx"] for lib in libraries):
        check.summary = None  # no device code: the API says null
        return check, tool is not None
    assert check.summary is not None
    sass = sorted({a for lib in libraries for a in lib["sass"]}, key=lambda a: _arch(a)[1:])
    ptx = sorted({a for lib in libraries for a in lib["ptx"]}, key=lambda a: _arch(a)[1:])
    lowest = _min_capability(libraries)
    runtime = max(majors, default=None)
    check.summary.update(
        {
            "cuda": None if runtime is None else f"{runtime}.{majors[runtime]}",
            "sass": sass,
            "ptx": ptx,
            "min_compute_capability": None if lowest is None else _label(lowest),
            "min_driver": MIN_DRIVER.get(runtime) if runtime is not None else None,
            "manylinux": None,
            "libraries": [lib for lib in libraries if lib["sass"] or lib["ptx"] or lib["needs"]],
        }
    )
    if lowest is None:
        check.log.append("no one GPU runs the device code of every library")
    elif any(_arch(a)[2] == "" for a in ptx):
        check.log.append(
            f"runs on GPUs of compute capability {_label(lowest)} and up (PTX compiled by "
            "the driver where no SASS fits)"
        )
    else:
        families = sorted({_arch(a)[1] // 10 for a in sass})
        check.log.append(
            f"runs on GPUs of compute capability {_label(lowest)} to "
            f"{max(families)}.9 of the SASS families {', '.join(map(str, families))} only: "
            "no PTX for newer GPUs"
        )
    if runtime is None:
        check.log.append(
            "needs no shared CUDA runtime (linked statically?): the minimum driver is unknown"
        )
    elif runtime in MIN_DRIVER:
        check.log.append(
            f"minimum Linux driver {MIN_DRIVER[runtime]} (CUDA {runtime}.x, minor version "
            "compatibility; PTX from a newer toolkit may need a newer driver to compile)"
        )
    return check, True


def _device_code(
    tool: Path,
    library: Path,
    sandbox: ToolSandbox,
    notes: list[str],
    *,
    unread: bool,
    budget: EntryBudget,
) -> DeviceCode:
    """The device code ``cuobjdump`` lists in ``library``, and where it lists less than
    opmarket's ELF reader finds (doctor's and env-check's) or cannot read the library, what
    it lists in the fatbins the reader finds where the runtime finds them, in the loaded
    segments, written one after another to a bare fatbin file. cuobjdump reads the section
    headers, which the loader never does: a library whose headers were stripped loads and
    runs its kernels all the same. ``notes`` says which source was used, and why the reader
    could not read the device code (``unread``: the ELF headers were found unreadable and
    noted already; ``budget``: the fatbin entries the reader may still read for the
    wheel)."""
    found = read_device_code(library, budget)
    if found.problem and not unread:
        notes.append(f"its device code cannot be read: {found.problem}")
    failed: ToolError | None = None
    try:
        listed = list_device_code(tool, library, sandbox)
    except ToolError as exc:
        failed, listed = exc, DeviceCode()
    if not found.has_device_code or _lists_all(listed, found):
        if failed is not None:
            raise failed
        return listed
    fatbin = library.with_suffix(".fatbin")
    with open(library, "rb") as src, open(fatbin, "wb") as out:
        for offset, size in found.fatbins:
            src.seek(offset)
            left = size
            while left and (chunk := src.read(min(left, 1 << 20))):  # a block at a time
                out.write(chunk)
                left -= len(chunk)
            out.write(bytes(-size % 8))  # containers are 8-byte aligned
    try:
        extracted = list_device_code(tool, fatbin, sandbox, inside="/input/device.fatbin")
    finally:
        fatbin.unlink()
    if failed is not None:
        why = f"cannot read the library: {failed}"
    elif listed.has_device_code:
        why = f"lists only {', '.join(listed.sass + listed.ptx)} from its sections"
    else:
        why = "finds none in the library itself"
    count = len(found.fatbins)
    notes.append(
        f"device code listed by cuobjdump from the {count} fatbin{'s' * (count != 1)} "
        f"opmarket's ELF reader found in its loaded segments, as doctor reads them "
        f"(cuobjdump {why}: it reads the section headers, which the loader does not)"
    )
    return DeviceCode(
        tuple(sorted({*listed.sass, *extracted.sass}, key=arch_key)),
        tuple(sorted({*listed.ptx, *extracted.ptx}, key=arch_key)),
    )


def _lists_all(listed: DeviceCode, found: DeviceCode) -> bool:
    """Whether ``listed`` (cuobjdump's) has every architecture ``found`` (the ELF
    reader's, which has no ``a``/``f`` suffixes) has, SASS and PTX."""
    return all(
        {arch_key(a)[0] for a in mine} <= {arch_key(a)[0] for a in theirs}
        for mine, theirs in ((found.sass, listed.sass), (found.ptx, listed.ptx))
    )


def _audit(check: GpuCheck, path: Path, wheel: WheelName, sandbox: ToolSandbox) -> None:
    assert check.summary is not None
    try:
        found = auditwheel_show(path, wheel.base, sandbox)
    except ToolError as exc:
        check.log.append(f"manylinux policy: not available ({exc})")
        return
    check.summary["manylinux"] = found.policy
    check.summary["tools"]["auditwheel"] = found.version
    check.log.append(
        f"auditwheel {found.version}: {found.policy} with {', '.join(AUDITWHEEL_EXCLUDE)} "
        f"excluded (its symbol versions allow {found.symbol_policy})"
        + (f"; other external libraries: {', '.join(found.external)}" if found.external else "")
    )
