"""``opmarket env-check``'s question: does this wheel load in this environment? Answered from
the files alone, never loading the wheel's code: its tags against the interpreter's, its
extension modules' suffixes, and each native library as the dynamic linker would load it
after the frameworks the wheel uses were imported (:mod:`._linker`): libraries needed,
symbol versions, undefined symbols, and its CUDA code against this machine's GPUs (doctor's
:func:`~._doctor.gpu_fit`).

The frameworks imported first are those the wheel declares (``Requires-Dist``) or whose
libraries one of its libraries needs by name. A declared dependency that is not installed
under its name, or not at a version it allows, is a note: pip would change the environment,
but what decides is whether the files load with what is there.
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from opmarket.registry._elf import needed_libraries, read_library
from opmarket.registry._environment import Environment, Framework
from opmarket.registry._gpubinary import read_device_code
from opmarket.registry._linker import Problem, Process
from opmarket.registry._machine import CudaRuntime, Machine
from opmarket.registry._wheelzip import UNREADABLE, BadWheel, describe, open_wheel, read_member

__all__ = [
    "UNPACK_LIMIT",
    "FileReport",
    "check_installed",
    "check_wheel",
    "installed_problems",
    "report_json",
    "report_text",
]

_METADATA_LIMIT = 16 * 1024 * 1024
#: The most bytes of native libraries unpacked from one wheel (TensorFlow's are 1 GiB).
UNPACK_LIMIT = 8 * 1024**3
_ELF = b"\x7fELF"


@dataclass(slots=True)
class FileReport:
    """One file's answer: ``works`` when ``problems`` is empty; ``notes`` never decide;
    ``libraries``: the native libraries checked (empty: no native code)."""

    file: str
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)

    @property
    def works(self) -> bool:
        """Whether it loads here."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """``{"file", "works", "problems", "notes"}``."""
        return {
            "file": self.file,
            "works": self.works,
            "problems": [p.to_json() for p in self.problems],
            "notes": [n.to_json() for n in self.notes],
        }


def report_json(env: Environment, reports: list[FileReport]) -> dict[str, Any]:
    """The JSON document of ``opmarket env-check --format json``."""
    return {"environment": env.to_json(), "files": [r.to_json() for r in reports]}


def report_text(reports: list[FileReport]) -> str:
    """One line per file, then one per problem (and note), indented."""
    lines: list[str] = []
    for report in reports:
        lines.append(f"{report.file}: {'works' if report.works else 'does not load'}")
        for p in [*report.problems, *report.notes]:
            where = f"{p.library}: " if p.library else ""
            lines.append(f"  {p.kind}: {where}{p.detail}")
    return "\n".join(lines) + "\n"


def _install_path(member: str) -> str | None:
    """Where a wheel member lands relative to site-packages, None for one installed
    elsewhere (scripts, headers, data)."""
    head, _, rest = member.partition("/")
    if head.endswith(".data"):
        kind, _, rest = rest.partition("/")
        return rest if kind in ("purelib", "platlib") else None
    return member


def _requirements(metadata: str, markers: dict[str, str]) -> list[Requirement]:
    """The unconditional Requires-Dist entries of ``metadata`` that apply to ``markers``."""
    parsed = email.parser.Parser().parsestr(metadata, headersonly=True)
    found: list[Requirement] = []
    for line in parsed.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({**markers, "extra": ""}):
                found.append(requirement)
        except (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
            continue
    return found


def _dependency_notes(env: Environment, requirements: list[Requirement]) -> list[Problem]:
    notes: list[Problem] = []
    for requirement in requirements:
        installed = env.distributions.get(canonicalize_name(requirement.name))
        if installed is None:
            instead = [
                f.label
                for f in env.frameworks.values()
                if canonicalize_name(requirement.name) in f.kind.distributions
            ]
            also = f" ({', '.join(instead)} is, with the same package)" if instead else ""
            notes.append(Problem("note", "", f"declares {requirement}, not installed{also}"))
        elif requirement.specifier and not requirement.specifier.contains(
            installed[1], prereleases=True
        ):
            notes.append(
                Problem(
                    "note",
                    "",
                    f"declares {requirement}; {installed[0]} {installed[1]} is installed",
                )
            )
    return notes


def _frameworks(
    env: Environment, requirements: list[Requirement], needed: set[str]
) -> list[Framework]:
    """The installed frameworks this wheel's code runs after: declared, or one of whose
    libraries a library of the wheel needs by name."""
    declared = {canonicalize_name(r.name) for r in requirements}
    base = set(Process(env).loaded)
    return [
        framework
        for framework in env.frameworks.values()
        if declared & set(framework.kind.distributions)
        or needed & (set(Process(env, [framework]).loaded) - base)
    ]


def check_wheel(path: Path, env: Environment, label: str | None = None) -> FileReport:
    """Whether the wheel at ``path`` loads in ``env``; BadWheel (or OSError) when it cannot be
    read as a wheel at all."""
    report = FileReport(label or path.name)
    try:
        _, _, _, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise BadWheel(f"{path.name}: not a wheel's file name: {exc}") from None
    supported = set(env.interpreter.tags)
    if not {str(t) for t in tags} & supported:
        wanted = ".".join(sorted({str(t) for t in tags}))
        newest = env.interpreter.tags[0] if env.interpreter.tags else "no tag"
        report.problems.append(
            Problem(
                "tag",
                "",
                f"built for {wanted}; this Python ({env.interpreter.implementation} "
                f"{env.interpreter.version}) installs {newest} and older",
            )
        )
    with tempfile.TemporaryDirectory(prefix="opmarket-env-check-") as tmp:
        tree = Path(tmp)
        with open_wheel(path) as archive:
            metadata = next(
                (
                    n
                    for n in archive.namelist()
                    if n.endswith(".dist-info/METADATA") and n.count("/") == 1
                ),
                None,
            )
            text = (
                read_member(archive, metadata, _METADATA_LIMIT).decode("utf-8", "replace")
                if metadata
                else ""
            )
            libraries = _unpack_libraries(archive, tree)
        _check_libraries(env, report, text, libraries, (tree, Path(env.interpreter.platlib)))
    return report


def check_installed(
    distribution: importlib.metadata.Distribution, env: Environment, *, cuda: bool = True
) -> FileReport:
    """Whether the installed ``distribution``'s libraries load in ``env``, where they are
    (the report's file is ``NAME VERSION``); ``cuda=False`` leaves its GPU code out."""
    name = distribution.metadata["Name"] or "?"
    report = FileReport(f"{name} {distribution.version}")
    libraries: dict[str, Path] = {}
    for file in distribution.files or ():
        if file.name.endswith(".so") or ".so." in file.name:
            path = Path(str(distribution.locate_file(file)))
            try:
                with open(path, "rb") as f:
                    if f.read(4) == _ELF:
                        libraries[str(file)] = path
            except OSError:
                continue
    text = distribution.read_text("METADATA") or ""
    _check_libraries(env, report, text, libraries, None, cuda=cuda)
    return report


def _check_libraries(
    env: Environment,
    report: FileReport,
    metadata: str,
    libraries: dict[str, Path],
    unpacked: tuple[Path, Path] | None,
    *,
    cuda: bool = True,
) -> None:
    """Add to ``report`` what the libraries (path in the wheel -> file) and the METADATA
    of one distribution say about loading it in ``env``."""
    report.libraries = sorted(libraries)
    requirements = _requirements(metadata, env.interpreter.markers)
    report.notes += _dependency_notes(env, requirements)
    report.problems += _extension_problems(env, libraries)
    needed = {name for lib in libraries.values() for name in needed_libraries(lib)}
    frameworks = _frameworks(env, requirements, needed)
    tree, install = unpacked or (None, None)
    process = Process(env, frameworks, tree, install)
    for member, library in sorted(libraries.items()):
        report.problems += process.check(library, member)
        if cuda:
            _cuda(env, process, library, member, report)


def _unpack_libraries(archive: zipfile.ZipFile, tree: Path) -> dict[str, Path]:
    """Every ELF file the wheel installs into site-packages, unpacked into ``tree`` at the
    path it installs to, by that path; BadWheel past :data:`UNPACK_LIMIT` bytes in all or
    for a member that cannot be read."""
    found: dict[str, Path] = {}
    budget = UNPACK_LIMIT
    for info in archive.infolist():
        target = _install_path(info.filename)
        if target is None or info.is_dir() or ".." in Path(target).parts or target.startswith("/"):
            continue
        if not (target.endswith(".so") or ".so." in Path(target).name):
            continue
        try:
            with archive.open(info) as member:
                if member.read(4) != _ELF:
                    continue
            # zipfile reads no more than the declared size, so the declared sizes bound it.
            budget -= info.file_size
            if budget < 0:
                raise BadWheel(
                    f"its libraries unpack to more than {UNPACK_LIMIT // 2**30} GiB, "
                    "the most env-check unpacks"
                )
            out = tree / target
            out.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as member, open(out, "wb") as f:
                shutil.copyfileobj(member, f)
        except UNREADABLE as exc:
            raise BadWheel(f"{info.filename}: {describe(exc)}") from None
        found[target] = out
    return found


def _extension_problems(env: Environment, libraries: dict[str, Path]) -> list[Problem]:
    """Extension modules this Python would not import: built for another interpreter."""
    problems = []
    suffixes = env.interpreter.extension_suffixes
    for member in sorted(libraries):
        name = Path(member).name
        tagged = any(m in name for m in (".cpython-", ".pypy", ".abi3.", ".graalpy"))
        if tagged and name.endswith(".so") and not name.endswith(suffixes):
            problems.append(
                Problem(
                    "extension",
                    member,
                    f"an extension module for another Python: this one imports only "
                    f"{', '.join(s for s in suffixes if s != '.so')} or .so",
                )
            )
    return problems


def _cuda(
    env: Environment, process: Process, library: Path, member: str, report: FileReport
) -> None:
    from opmarket.registry._doctor import gpu_fit

    code = read_device_code(library)
    if code.problem and not read_library(library).problem:  # that one is reported as "elf"
        report.notes.append(
            Problem("note", member, f"its device code cannot be read: {code.problem}")
        )
    if not code.has_device_code and code.cuda_runtime is None:
        return
    if not env.machine.gpus:
        archs = "/".join(code.sass + code.ptx) or "CUDA"
        report.notes.append(
            Problem("note", member, f"no GPU visible: its {archs} code does not run here")
        )
        return
    order, _, _ = process.closure(library)
    runtimes = tuple(
        CudaRuntime(int(p.name.removeprefix("libcudart.so.").partition(".")[0]), str(p), "found")
        for p in order
        if p.name.startswith("libcudart.so.") and p.name.removeprefix("libcudart.so.")[:1].isdigit()
    )
    fits, why = gpu_fit(replace(env.machine, runtimes=runtimes), [code])
    if not fits:
        report.problems.append(Problem("cuda", member, why))


def installed_problems(metadata_dirs: Iterable[str], machine: Machine | None = None) -> list[str]:
    """One line per reason an installed distribution (by its metadata folder) would not
    load in this interpreter's environment, its GPU code left out (doctor weighs that):
    ``opmarket-x 1.0: would not load: version: x/_lib.so: needs GLIBCXX_3.4.32 ...``."""
    from opmarket.registry._environment import read_environment

    folders = sorted(set(metadata_dirs))
    if not folders:
        return []
    try:
        env = read_environment(machine=machine)
    except ValueError as exc:
        return [f"cannot read this environment: {exc}"]
    lines: list[str] = []
    for folder in folders:
        report = check_installed(importlib.metadata.PathDistribution(Path(folder)), env, cuda=False)
        for p in report.problems:
            where = f"{p.library}: " if p.library else ""
            lines.append(f"{report.file}: would not load: {p.kind}: {where}{p.detail}")
    return lines
