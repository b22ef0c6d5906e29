"""A fast edit-compile loop: C++ (and CUDA) kernel sources compiled on the fly against
opmarket's header, cached by content, and registered (``torch.utils.cpp_extension.load``'s
way, for opmarket; see docs/native.md).

Builds go to ``$XDG_CACHE_HOME/opmarket/inline`` (default ``~/.cache/opmarket/inline``),
one folder per content hash; each build happens in a temporary folder renamed into place,
so processes building the same sources at once never see a half-written library.

The sdk imports nothing of the run time: the registry installs how a compiled library is
registered (``install_library_loader``) when it starts; a library compiled before that is
registered then.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from opmarket.sdk._errors import InvalidArgumentError, NotFoundError, OpmarketError
from opmarket.sdk._files import cache_dir
from opmarket.sdk._native import get_include
from opmarket.sdk.build._cuda import find_nvcc
from opmarket.sdk.build._setup import compiler

__all__ = ["InlineBuildError", "cache_root", "install_library_loader", "load", "load_inline"]

# The run time's load_library (opmarket.registry installs it); libraries compiled before.
_loader: list[Callable[[str], Any]] = []
_pending: list[str] = []

_LIBRARY = re.compile(r"OPM_LIBRARY\(\s*(\w+)\s*,")
_CUDA_SUFFIXES = (".cu", ".cuh")


class InlineBuildError(OpmarketError, RuntimeError):
    """The compiler rejected the sources: the message has its command and its output."""


def install_library_loader(loader: Callable[[str], Any]) -> None:
    """Install the run time's ``load_library`` (what ``opmarket.registry`` does when it
    starts) and register the libraries compiled before it was there."""
    _loader[:] = [loader]
    waiting, _pending[:] = list(_pending), []
    for path in waiting:
        loader(path)


def cache_root() -> Path:
    """Where compiled sources are kept: ``inline/`` in opmarket's cache folder
    (``$OPMARKET_CACHE_DIR``, else ``$XDG_CACHE_HOME/opmarket``, else ``~/.cache/opmarket``)."""
    return cache_dir() / "inline"


def _cuda_lib_dirs(nvcc: str) -> list[str]:
    """The folders holding libcudart for ``nvcc`` (which may be a wrapper script elsewhere)."""
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    homes += [str(Path(nvcc).resolve().parent.parent), "/usr/local/cuda"]
    found: list[str] = []
    for home in filter(None, homes):
        for sub in ("lib64", "lib"):
            d = Path(home, sub)
            if any(d.glob("libcudart.so*")) and str(d.resolve()) not in found:
                found.append(str(d.resolve()))
    return found[:1]


def _pybind11_include() -> str:
    try:
        import pybind11
    except ImportError:
        raise NotFoundError(
            "load_inline compiles against pybind11, which is not installed: pip install pybind11"
        ) from None
    return str(pybind11.get_include())


def _header_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(Path(get_include(), "opmarket").glob("*")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _as_list(sources: str | Sequence[str] | None) -> list[str]:
    if sources is None:
        return []
    return [sources] if isinstance(sources, str) else list(sources)


def load_inline(
    name: str,
    cpp_sources: str | Sequence[str],
    cuda_sources: str | Sequence[str] | None = None,
    *,
    functions: Sequence[str] | None = None,
    extra_cflags: Sequence[str] = (),
    extra_cuda_cflags: Sequence[str] = (),
    extra_ldflags: Sequence[str] = (),
    extra_include_paths: Sequence[str] = (),
    build_directory: str | os.PathLike[str] | None = None,
    register: bool = True,
    verbose: bool = False,
) -> ModuleType:
    """Compile C++ source text (and CUDA source text, with nvcc) into the library module
    ``name``, against ``opmarket/kernel.h`` and pybind11, and register the ops and kernels
    its ``OPM_LIBRARY(name, lib)`` declares in the process's registry; the module.

    The C++ sources are joined into one translation unit. Without an ``OPM_LIBRARY`` block,
    one is added that binds the C++ functions named in ``functions``. CUDA sources are
    compiled separately and linked in: declare their host functions in the C++ source.
    The result is cached under :func:`cache_root` (or ``build_directory``) by a hash of the
    sources, flags, opmarket's header, the Python version and the compiler: a second call
    with the same sources, in this process or another, only loads it. InlineBuildError
    carries the compiler's output when it fails. ``register=False`` only compiles and
    imports.
    """
    cpp = "\n".join(_as_list(cpp_sources))
    found = _LIBRARY.findall(cpp)
    if found and found != [name]:
        raise InvalidArgumentError(
            f"load_inline({name!r}): the source declares OPM_LIBRARY({', '.join(found)}, ...); "
            f"the library module must be named {name!r}, as the first argument"
        )
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise InvalidArgumentError(f"load_inline: {name!r} is not a C identifier (module name)")
    if functions:
        if found:
            raise InvalidArgumentError(
                f"load_inline({name!r}): functions= binds functions in an OPM_LIBRARY block "
                "it adds; this source has one already: bind them there with lib.module().def"
            )
        body = "".join(f'  lib.module().def("{f}", &{f});\n' for f in functions)
        cpp += f"\n\nOPM_LIBRARY({name}, lib) {{\n{body}}}\n"
    elif not found:
        cpp += f"\n\nOPM_LIBRARY({name}, lib) {{}}\n"
    cuda = [(f"{name}_cuda_{i}.cu", text) for i, text in enumerate(_as_list(cuda_sources))]
    return _build(
        name,
        [(f"{name}.cc", f'#include <opmarket/kernel.h>\n#line 1 "{name}.cc"\n{cpp}'), *cuda],
        cflags=list(extra_cflags),
        cuda_cflags=list(extra_cuda_cflags),
        ldflags=list(extra_ldflags),
        include_paths=list(extra_include_paths),
        build_directory=build_directory,
        register=register,
        verbose=verbose,
    )


def load(
    name: str,
    sources: Sequence[str | os.PathLike[str]],
    *,
    extra_cflags: Sequence[str] = (),
    extra_cuda_cflags: Sequence[str] = (),
    extra_ldflags: Sequence[str] = (),
    extra_include_paths: Sequence[str] = (),
    build_directory: str | os.PathLike[str] | None = None,
    register: bool = True,
    verbose: bool = False,
) -> ModuleType:
    """:func:`load_inline` for source files: ``.cu`` files go to nvcc, the others to the C++
    compiler (one of them declares ``OPM_LIBRARY(name, lib)``). Each file's folder is on
    the include path; the cache key is the files' contents (not the headers they include:
    list those folders' changes in ``extra_cflags`` or clear the cache)."""
    files: list[tuple[str, str]] = []
    include_paths = list(extra_include_paths)
    for source in sources:
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise NotFoundError(
                f"load({name!r}): cannot read source {str(path)!r}: {exc}"
            ) from None
        files.append((path.name, text))
        include_paths.append(str(path.resolve().parent))
    declared = [m for n, t in files if not n.endswith(_CUDA_SUFFIXES) for m in _LIBRARY.findall(t)]
    if declared != [name]:
        raise InvalidArgumentError(
            f"load({name!r}): the C++ sources must declare OPM_LIBRARY({name}, lib) once; "
            f"they declare {declared or 'none'}"
        )
    if len({n for n, _ in files}) != len(files):
        raise InvalidArgumentError(f"load({name!r}): two sources share a file name: {files}")
    return _build(
        name,
        files,
        cflags=list(extra_cflags),
        cuda_cflags=list(extra_cuda_cflags),
        ldflags=list(extra_ldflags),
        include_paths=list(dict.fromkeys(include_paths)),
        build_directory=build_directory,
        register=register,
        verbose=verbose,
    )


def _compilers(cuda: bool) -> tuple[list[str], str | None]:
    cxx = compiler("c++")
    nvcc = find_nvcc() if cuda else None
    if cuda and nvcc is None:
        raise NotFoundError(
            "load_inline: CUDA sources need nvcc, which is not in $CUDA_HOME/bin (when set), "
            "on PATH or in /usr/local/cuda/bin"
        )
    return cxx, nvcc


def _build(
    name: str,
    files: list[tuple[str, str]],
    *,
    cflags: list[str],
    cuda_cflags: list[str],
    ldflags: list[str],
    include_paths: list[str],
    build_directory: str | os.PathLike[str] | None,
    register: bool,
    verbose: bool,
) -> ModuleType:
    has_cuda = any(n.endswith(_CUDA_SUFFIXES) for n, _ in files)
    cxx, nvcc = _compilers(has_cuda)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    includes = [get_include(), _pybind11_include(), sysconfig.get_paths()["include"]]
    includes += include_paths
    key = hashlib.sha256()
    for part in (
        name,
        sys.version,
        suffix,
        _header_digest(),
        " ".join(cxx),
        nvcc or "",
        *cflags,
        "\0",
        *cuda_cflags,
        "\0",
        *ldflags,
        "\0",
        *includes,
    ):
        key.update(part.encode() + b"\0")
    for file_name, text in files:
        key.update(file_name.encode() + b"\0" + text.encode() + b"\0")
    root = Path(build_directory) if build_directory is not None else cache_root()
    final = root / f"{name}-{key.hexdigest()[:16]}"
    library = final / f"{name}{suffix}"
    if not library.is_file():
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
        try:
            _compile(
                staging,
                name,
                suffix=suffix,
                files=files,
                cxx=cxx,
                nvcc=nvcc,
                includes=includes,
                cflags=cflags,
                cuda_cflags=cuda_cflags,
                ldflags=ldflags,
                verbose=verbose,
            )
            try:
                staging.rename(final)  # atomic; fails when another process was first
            except OSError:
                if not library.is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    module = _import(name, library)
    if register:
        if _loader:
            _loader[0](str(library))
        else:
            _pending.append(str(library))
    return module


def _run(command: list[str], cwd: Path, log: list[str], verbose: bool) -> None:
    shown = " ".join(shlex.quote(c) for c in command)
    if verbose:
        print(shown, file=sys.stderr)
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise InlineBuildError(f"cannot run the compiler {command[0]!r}: {exc}") from None
    log += [f"$ {shown}", done.stdout, done.stderr]
    if verbose and (done.stdout or done.stderr):
        print(done.stdout + done.stderr, file=sys.stderr)
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()
        if len(output) > 8000:
            output = "...\n" + output[-8000:]
        raise InlineBuildError(f"compiling failed (exit {done.returncode}):\n$ {shown}\n{output}")


def _compile(
    staging: Path,
    name: str,
    *,
    suffix: str,
    files: list[tuple[str, str]],
    cxx: list[str],
    nvcc: str | None,
    includes: list[str],
    cflags: list[str],
    cuda_cflags: list[str],
    ldflags: list[str],
    verbose: bool,
) -> None:
    for file_name, text in files:
        (staging / file_name).write_text(text, encoding="utf-8")
    inc = [f"-I{d}" for d in includes]
    objects: list[str] = []
    log: list[str] = []
    link: list[str] = []
    for file_name, _ in files:
        if not file_name.endswith(".cu"):
            continue
        assert nvcc is not None
        obj = f"{Path(file_name).stem}.o"
        _run(
            [
                nvcc,
                "-c",
                "-O2",
                "-std=c++17",
                "-Xcompiler",
                "-fPIC,-fvisibility=hidden",
                *inc,
                *cuda_cflags,
                file_name,
                "-o",
                obj,
            ],
            staging,
            log,
            verbose,
        )
        objects.append(obj)
    if objects:
        assert nvcc is not None
        link = [f"-L{d}" for d in _cuda_lib_dirs(nvcc)]
        link += [f"-Wl,-rpath,{d}" for d in _cuda_lib_dirs(nvcc)] + ["-lcudart"]
    sources = [n for n, _ in files if not n.endswith(_CUDA_SUFFIXES)]
    _run(
        [
            *cxx,
            "-O2",
            "-std=c++17",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            *inc,
            *cflags,
            *sources,
            *objects,
            "-o",
            f"{name}{suffix}",
            *link,
            *ldflags,
        ],
        staging,
        log,
        verbose,
    )
    (staging / "build.log").write_text("\n".join(log), encoding="utf-8")


def _import(name: str, library: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(library))
    spec = importlib.util.spec_from_file_location(name, library, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
