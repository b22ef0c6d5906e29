"""The two outside tools the static GPU checks run: NVIDIA's ``cuobjdump`` (from the
``nvidia-cuda-cuobjdump`` wheel) and ``auditwheel``, their output parsed here.

Both parse an uploaded, untrusted file, so both run in the validation sandbox
(:func:`opmarket.web.sandbox._run.run_sandboxed`: bubblewrap, no network, an unprivileged user,
the file bound read-only under ``/input``) with a tighter time, memory and process limit
than a plugin's own validation gets. A parser bug in either tool is then no way out.

``cuobjdump --list-elf --list-ptx LIB`` prints one line per embedded cubin (SASS) and PTX::

    ELF file    1: libk.1.sm_80.cubin
    PTX file    1: libk.1.sm_75.ptx

and, for a file without device code, ``cuobjdump info : File '...' does not contain device
code`` with exit status 255. An architecture ends in ``a`` (sm_90a: that GPU only) or
``f`` (family-specific) where the build asked for one; cuobjdump 13.5 lists ``sm_100f``
cubins as ``sm_100``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opmarket.registry._gpubinary import DeviceCode, arch_key
from opmarket.web.sandbox._run import Limits, SandboxUnavailableError, run_sandboxed

__all__ = [
    "AuditwheelResult",
    "DeviceCode",
    "ToolError",
    "ToolSandbox",
    "auditwheel_show",
    "cuobjdump_path",
    "cuobjdump_version",
    "list_device_code",
]

_LINE = re.compile(r"^(ELF|PTX) file\s+\d+:\s*(\S+)$")
_ARCH = re.compile(r"\.(sm|compute)_(\d+)([af]?)\.(cubin|ptx)$")
_VERSION = re.compile(r"\bV(\d+\.\d+\.\d+)\b")
_NO_DEVICE_CODE = "does not contain device code"
#: The libraries a GPU wheel may leave to the machine (the driver) or to its dependencies
#: (the CUDA runtime wheel), as PyTorch and JAX do when they run auditwheel repair.
AUDITWHEEL_EXCLUDE = ("libcuda.so.1", "libcudart.so.*")


class ToolError(RuntimeError):
    """A tool could not run or said something that cannot be read."""


@dataclass(frozen=True, slots=True)
class ToolSandbox:
    """Where the tools run: the sandbox of ``limits`` (validation's own, so an index that
    allows unsandboxed validation allows it here too) with at most a minute, 2 GiB and 32
    processes; ``interpreter``, ``private`` and ``shown`` as for :func:`run_sandboxed`."""

    limits: Limits = field(default_factory=Limits)
    interpreter: str = sys.executable
    private: Sequence[Path] = ()
    shown: Sequence[str] = ()

    def run(self, argv: list[str], inputs: Mapping[str, Path] | None = None) -> _Done:
        """Run ``argv``, where each key of ``inputs`` (a path under /input) stands for the
        host file it maps to; ToolError when it cannot run or was stopped."""
        limits = dataclasses.replace(
            self.limits,
            timeout_s=min(self.limits.timeout_s, 60.0),
            memory_mb=min(self.limits.memory_mb, 2048),
            max_pids=min(self.limits.max_pids, 32),
            max_output_bytes=1024 * 1024,
            devices=(),
        )
        try:
            outcome = run_sandboxed(
                argv,
                limits=limits,
                interpreter=self.interpreter,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                binds=inputs,
                private=self.private,
                shown=self.shown,
            )
        except (OSError, SandboxUnavailableError) as exc:
            raise ToolError(f"{Path(argv[0]).name}: {exc}") from None
        if outcome.problem:
            raise ToolError(f"{Path(argv[0]).name}: {outcome.problem}")
        text = functools.partial(bytes.decode, encoding="utf-8", errors="replace")
        return _Done(outcome.returncode, text(outcome.stdout), text(outcome.stderr))


@dataclass(frozen=True, slots=True)
class _Done:
    returncode: int
    stdout: str
    stderr: str


def cuobjdump_path() -> Path | None:
    """The ``cuobjdump`` of the ``nvidia-cuda-cuobjdump`` wheel installed beside this
    Python (``site-packages/nvidia/cu*/bin/cuobjdump``), else one on PATH or in
    /usr/local/cuda; None when there is none."""
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    roots = (spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        found = sorted(Path(root).glob("cu*/bin/cuobjdump"), reverse=True)
        if found:
            return found[0]
    on_path = shutil.which("cuobjdump") or shutil.which("cuobjdump", path="/usr/local/cuda/bin")
    return Path(on_path) if on_path else None


def cuobjdump_version(tool: Path, sandbox: ToolSandbox | None = None) -> str:
    """The version ``cuobjdump --version`` reports (``13.5.37``)."""
    done = (sandbox or ToolSandbox()).run([str(tool), "--version"])
    found = _VERSION.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise ToolError(f"cuobjdump --version said: {(done.stdout + done.stderr).strip()!r}")
    return found.group(1)


def list_device_code(
    tool: Path, library: Path, sandbox: ToolSandbox | None = None, *, inside: str = ""
) -> DeviceCode:
    """What ``cuobjdump --list-elf --list-ptx`` finds in ``library`` (a shared library, or
    a bare fatbin file: fat binary containers one after another, which cuobjdump reads as
    it reads a library's ``.nv_fatbin`` section), seen in the sandbox as ``inside``
    (default ``/input/library.so``); empty lists for a file without device code.
    ToolError for anything else it says."""
    inside = inside or "/input/library.so"
    done = (sandbox or ToolSandbox()).run(
        [str(tool), "--list-elf", "--list-ptx", inside], {inside: library}
    )
    if done.returncode != 0:
        if _NO_DEVICE_CODE in done.stdout + done.stderr:
            return DeviceCode((), ())
        raise ToolError(
            f"cuobjdump exited with {done.returncode}: {(done.stdout + done.stderr).strip()!r}"
        )
    sass: set[str] = set()
    ptx: set[str] = set()
    for line in done.stdout.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            continue
        arch = _ARCH.search(match.group(2))
        if arch is None:
            raise ToolError(f"cuobjdump listed {match.group(2)!r}, which names no architecture")
        number, suffix = arch.group(2), arch.group(3)
        if match.group(1) == "ELF":
            sass.add(f"sm_{number}{suffix}")
        else:  # a PTX file is named for its virtual architecture: compute_XY
            ptx.add(f"compute_{number}{suffix}")
    return DeviceCode(tuple(sorted(sass, key=arch_key)), tuple(sorted(ptx, key=arch_key)))


@dataclass(frozen=True, slots=True)
class AuditwheelResult:
    """The platform policy a wheel meets with the CUDA driver and runtime excluded
    (``manylinux_2_17_x86_64``, or ``linux_x86_64`` when it meets none), the policy its
    symbol versions alone allow, and the external libraries it needs; the tool's version."""

    policy: str
    symbol_policy: str
    external: tuple[str, ...]
    version: str


# auditwheel's own analysis, as ``auditwheel repair --exclude`` runs it: ``show`` has no
# --exclude, and the CUDA runtime must not count against the policy.
_AUDIT = """
import json, sys
from importlib.metadata import version
from pathlib import Path
from auditwheel.wheel_abi import analyze_wheel_abi
from auditwheel.wheeltools import get_wheel_architecture, get_wheel_libc
path, name, exclude = Path(sys.argv[1]), sys.argv[2], frozenset(sys.argv[3:])
try:
    arch = get_wheel_architecture(name)
except Exception:
    arch = None
try:
    libc = get_wheel_libc(name)
except Exception:
    libc = None
info = analyze_wheel_abi(libc, arch, path, exclude, disable_isa_ext_check=False,
                         allow_graft=False)
libs = info.external_refs[info.overall_policy.name].libs
print(json.dumps({"policy": info.overall_policy.name, "sym": info.sym_policy.name,
                  "external": sorted(libs), "version": version("auditwheel")}))
"""


def auditwheel_show(
    wheel: Path, filename: str, sandbox: ToolSandbox | None = None
) -> AuditwheelResult:
    """The manylinux (or musllinux) policy the wheel at ``wheel``, named ``filename``
    without a variant label, meets with :data:`AUDITWHEEL_EXCLUDE` excluded.
    ToolError when auditwheel is missing or fails."""
    sandbox = sandbox or ToolSandbox()
    inside = "/input/" + Path(filename).name
    done = sandbox.run(
        [sandbox.interpreter, "-I", "-c", _AUDIT, inside, filename, *AUDITWHEEL_EXCLUDE],
        {inside: wheel},
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolError(f"auditwheel: {last}")
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
        return AuditwheelResult(
            str(data["policy"]),
            str(data["sym"]),
            tuple(str(lib) for lib in data["external"]),
            str(data["version"]),
        )
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ToolError(f"auditwheel said {done.stdout[-200:]!r}: {exc}") from None
