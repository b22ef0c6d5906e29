"""The environment a wheel would load in, read without importing anything of it: the
interpreter (its version, the wheel tags it installs, its extension suffixes, ``sys.path``,
asked in a subprocess that imports only ``packaging``), its installed distributions and
frameworks (TensorFlow, PyTorch: which libraries their import loads, and which of those it
loads into the global scope), and this machine's dynamic linker (``ld.so.cache``, default
folders, ``LD_LIBRARY_PATH``), glibc and libstdc++.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from opmarket.registry._elfsymbols import Exports, elf_kind
from opmarket.registry._machine import Machine

__all__ = [
    "FRAMEWORKS",
    "Environment",
    "Framework",
    "Interpreter",
    "LibrarySearch",
    "environment_facts",
    "environment_from_facts",
    "read_environment",
]

# What the interpreter is asked: it imports packaging (or pip's copy of it) and nothing else
# that is installed, so a broken framework cannot break the question.
_PROBE = r"""
import importlib.machinery, json, os, platform, sys, sysconfig
try:
    from packaging import tags
except ImportError:
    try:
        from pip._vendor.packaging import tags
    except ImportError:
        tags = None
impl = sys.implementation
print(json.dumps({
    "executable": os.path.realpath(sys.executable),
    "version": platform.python_version(),
    "implementation": impl.name,
    "tags": [str(t) for t in tags.sys_tags()] if tags else [],
    "extension_suffixes": importlib.machinery.EXTENSION_SUFFIXES,
    "path": [os.path.abspath(p or ".") for p in sys.path],
    "platlib": sysconfig.get_paths()["platlib"],
    "markers": {
        "implementation_name": impl.name,
        "implementation_version": "{0.major}.{0.minor}.{0.micro}".format(impl.version),
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    },
}))
"""

_DEFAULT_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")


@dataclass(frozen=True, slots=True)
class Interpreter:
    """The Python a wheel would be installed for: facts its probe printed."""

    executable: str
    version: str
    implementation: str
    tags: tuple[str, ...]
    extension_suffixes: tuple[str, ...]
    path: tuple[str, ...]
    platlib: str
    markers: dict[str, str]


@dataclass(frozen=True, slots=True)
class FrameworkKind:
    """How one framework loads: its distributions, and the libraries (relative to the
    folder holding its package) that its import loads globally, or locally, with the file
    whose presence makes the local ones global (TensorFlow's static builds)."""

    name: str
    distributions: tuple[str, ...]
    global_libraries: tuple[str, ...]
    local_libraries: tuple[str, ...]
    makes_global: str = ""


#: The frameworks whose import shapes the scope a plugin's library loads into. TensorFlow
#: loads ``_pywrap_tensorflow_internal`` with RTLD_GLOBAL when its package carries
#: ``pywrap_dlopen_global_flags.py`` (so libtensorflow_framework, libtensorflow_cc and the
#: rest of its closure become global); PyTorch loads only ``libtorch_global_deps`` so, and
#: ``torch._C`` (libtorch_python, libtorch_cpu, libc10) locally: a library takes their
#: symbols only through its own DT_NEEDED, matched by soname to the loaded ones.
FRAMEWORKS: tuple[FrameworkKind, ...] = (
    FrameworkKind(
        "tensorflow",
        (
            "tensorflow",
            "tensorflow-cpu",
            "tensorflow-gpu",
            "tensorflow-intel",
            "tensorflow-aarch64",
            "tensorflow-rocm",
            "intel-tensorflow",
            "tf-nightly",
            "tf-nightly-cpu",
        ),
        (),
        ("tensorflow/python/_pywrap_tensorflow_internal.so",),
        "tensorflow/python/pywrap_dlopen_global_flags.py",
    ),
    FrameworkKind(
        "torch",
        ("torch",),
        ("torch/lib/libtorch_global_deps.so",),
        ("torch/_C*.so",),
    ),
)


@dataclass(frozen=True, slots=True)
class Framework:
    """A framework installed in the environment: its kind, the distribution and version
    installed, and the libraries its import loads globally and locally."""

    kind: FrameworkKind
    distribution: str
    version: str
    global_libraries: tuple[Path, ...]
    local_libraries: tuple[Path, ...]

    @property
    def label(self) -> str:
        """``tensorflow-cpu 2.21.0``."""
        return f"{self.distribution} {self.version}"


class LibrarySearch:
    """Where the dynamic linker finds a library by name: run paths, ``LD_LIBRARY_PATH``,
    ``ld.so.cache`` (as ``ldconfig -p`` lists it) and the default folders; a file of
    another ELF kind than ``kind`` is skipped, as the linker skips it. ``cache``: the
    cache as read elsewhere (by name, the paths it lists), instead of asking ``ldconfig``."""

    def __init__(
        self,
        kind: tuple[int, int] | None,
        ld_library_path: str = "",
        cache: dict[str, list[str]] | None = None,
    ) -> None:
        self.kind = kind
        self.ld_library_path = tuple(p for p in ld_library_path.split(":") if p)
        self.cache: dict[str, list[str]] = {} if cache is None else cache
        if cache is None:
            self._read_cache()
        self._found: dict[tuple[str, tuple[str, ...], tuple[str, ...]], Path | None] = {}

    def _read_cache(self) -> None:
        """``ldconfig -p``'s listing, into :attr:`cache`."""
        for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
            try:
                listed = subprocess.run(
                    [ldconfig, "-p"], capture_output=True, text=True, check=False
                ).stdout
            except OSError:
                continue
            for line in listed.splitlines():
                found = re.match(r"\s+(\S+) \(([^)]*)\) => (.+)$", line)
                if found:
                    self.cache.setdefault(found.group(1), []).append(found.group(3))
            break

    def fits(self, path: Path) -> bool:
        """Whether ``path`` is a library of the kind searched for."""
        return path.is_file() and (self.kind is None or elf_kind(path) == self.kind)

    def find(
        self, name: str, rpath: tuple[str, ...] = (), runpath: tuple[str, ...] = ()
    ) -> Path | None:
        """The file the dynamic linker loads for DT_NEEDED ``name`` (folders already
        expanded: no ``$ORIGIN``), or None."""
        key = (name, rpath, runpath)
        if key not in self._found:
            self._found[key] = self._search(name, rpath, runpath)
        return self._found[key]

    def _search(self, name: str, rpath: tuple[str, ...], runpath: tuple[str, ...]) -> Path | None:
        if "/" in name:
            return Path(name) if self.fits(Path(name)) else None
        for folder in (*rpath, *self.ld_library_path, *runpath):
            if self.fits(Path(folder) / name):
                return Path(folder) / name
        for cached in self.cache.get(name, ()):
            if self.fits(Path(cached)):
                return Path(cached)
        for folder in _DEFAULT_DIRS:
            if self.fits(Path(folder) / name):
                return Path(folder) / name
        return None


@dataclass(slots=True)
class Environment:
    """Everything :mod:`._envcheck` decides with."""

    interpreter: Interpreter
    distributions: dict[str, tuple[str, str]]  # canonical name -> (name, version)
    frameworks: dict[str, Framework]  # kind name -> the installed one
    search: LibrarySearch
    glibc: str
    libstdcxx: str  # the newest GLIBCXX_ version the system's libstdc++ defines
    machine: Machine  # read once
    exports: dict[Path, Exports] = field(default_factory=dict)  # read once, shared

    def exported(self, path: Path) -> Exports:
        """The exports of the library at ``path``, read once."""
        found = self.exports.get(path)
        if found is None:
            found = self.exports[path] = Exports(path)
        return found

    def to_json(self) -> dict[str, Any]:
        """The ``environment`` object of ``opmarket env-check --format json``."""
        machine = self.machine.to_json()
        return {
            "python": self.interpreter.executable,
            "python_version": self.interpreter.version,
            "implementation": self.interpreter.implementation,
            "tag": self.interpreter.tags[0] if self.interpreter.tags else None,
            "glibc": self.glibc or None,
            "libstdcxx": self.libstdcxx or None,
            "frameworks": {
                f.distribution: f.version
                for f in sorted(self.frameworks.values(), key=lambda f: f.distribution)
            },
            "gpus": machine["gpus"],
            "driver_cuda": machine["driver_cuda"],
        }

    def summary(self) -> str:
        """One line: the Python, glibc, libstdc++, frameworks, GPUs."""
        parts = [
            f"{self.interpreter.implementation} {self.interpreter.version} "
            f"({self.interpreter.executable})",
            f"glibc {self.glibc or 'unknown'}",
            self.libstdcxx or "no libstdc++",
            *(f.label for f in self.frameworks.values()),
            ", ".join(g.sm for g in self.machine.gpus) or "no GPU",
        ]
        return ", ".join(parts)


def ask_interpreter(python: str) -> Interpreter:
    """The :class:`Interpreter` facts of ``python``, from its probe; ValueError with a
    one-line reason when it cannot answer."""
    try:
        done = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, check=False, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"{python}: cannot run it: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"{python}: not a Python that answers: {last}")
    try:
        facts = json.loads(done.stdout.strip().splitlines()[-1])
        tags = facts["tags"] or _tags_here(facts)
        return Interpreter(
            executable=facts["executable"],
            version=facts["version"],
            implementation=facts["implementation"],
            tags=tuple(tags),
            extension_suffixes=tuple(facts["extension_suffixes"]),
            path=tuple(facts["path"]),
            platlib=facts["platlib"],
            markers=facts["markers"],
        )
    except (ValueError, IndexError, KeyError, TypeError, AttributeError):
        said = done.stdout.strip()[:200]
        raise ValueError(
            f"{python}: not a Python that answers: {repr(said) if said else 'no output'}"
        ) from None


def _tags_here(facts: dict[str, Any]) -> list[str]:
    """The tags of an interpreter without packaging, from its version (CPython's rules and
    this machine's platforms)."""
    from packaging import tags

    major, minor = (int(p) for p in facts["version"].split(".")[:2])
    platforms = list(tags.platform_tags())
    if facts["implementation"] != "cpython":
        return [str(t) for t in tags.compatible_tags((major, minor), None, platforms)]
    found = list(tags.cpython_tags((major, minor), None, platforms))
    found += tags.compatible_tags((major, minor), f"cp{major}{minor}", platforms)
    return [str(t) for t in found]


def _distributions(
    path: tuple[str, ...],
) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for dist in importlib.metadata.distributions(path=list(path)):
        name = dist.metadata["Name"] or ""
        key = canonicalize_name(name) if name else ""
        if key and key not in found:  # the first on the path is the one imported
            found[key] = (name, dist.version)
    return found


def _frameworks(path: tuple[str, ...], dists: dict[str, tuple[str, str]]) -> dict[str, Framework]:
    found: dict[str, Framework] = {}
    for kind in FRAMEWORKS:
        installed = next(((d, dists[d][1]) for d in kind.distributions if d in dists), None)
        if installed is None:
            continue
        for entry in path:
            root = Path(entry)
            if not (root / kind.name).is_dir():
                continue
            everywhere = [*kind.global_libraries, *kind.local_libraries]
            if not any(any(root.glob(pattern)) for pattern in everywhere):
                continue
            made_global = bool(kind.makes_global) and (root / kind.makes_global).is_file()
            globals_ = [p for pattern in kind.global_libraries for p in sorted(root.glob(pattern))]
            locals_ = [p for pattern in kind.local_libraries for p in sorted(root.glob(pattern))]
            if made_global:
                globals_, locals_ = globals_ + locals_, []
            found[kind.name] = Framework(
                kind, installed[0], installed[1], tuple(globals_), tuple(locals_)
            )
            break
    return found


def _newest_glibcxx(search: LibrarySearch, exports: dict[Path, Exports]) -> str:
    path = search.find("libstdc++.so.6")
    if path is None:
        return ""
    exports[path] = found = exports.get(path) or Exports(path)
    versions = [v for v in found.versions if v.startswith("GLIBCXX_")]
    key = lambda v: tuple(int(p) for p in re.findall(r"\d+", v))  # noqa: E731
    return max(versions, key=key, default="")


def read_environment(python: str | None = None, machine: Machine | None = None) -> Environment:
    """The environment of ``python`` (this interpreter when None) on this machine (its
    :class:`~._machine.Machine` facts read now unless given); ValueError with a one-line
    reason when ``python`` cannot be asked."""
    from opmarket.registry._machine import machine_facts

    interpreter = ask_interpreter(python or sys.executable)
    kind = elf_kind(Path(interpreter.executable))
    search = LibrarySearch(kind, os.environ.get("LD_LIBRARY_PATH", ""))
    dists = _distributions(interpreter.path)
    exports: dict[Path, Exports] = {}
    glibc = (os.confstr("CS_GNU_LIBC_VERSION") or "").removeprefix("glibc ")
    return Environment(
        interpreter=interpreter,
        distributions=dists,
        frameworks=_frameworks(interpreter.path, dists),
        search=search,
        glibc=glibc,
        libstdcxx=_newest_glibcxx(search, exports),
        machine=machine or machine_facts(),
        exports=exports,
    )


def environment_facts(env: Environment) -> dict[str, Any]:
    """What was read of ``env`` as JSON-ready data, for :func:`environment_from_facts` in
    another process (the index's sandbox): the interpreter's answers, its distributions and
    frameworks, glibc and libstdc++; not the machine's GPUs, nor any library's exports."""
    return {
        "interpreter": {
            "executable": env.interpreter.executable,
            "version": env.interpreter.version,
            "implementation": env.interpreter.implementation,
            "tags": list(env.interpreter.tags),
            "extension_suffixes": list(env.interpreter.extension_suffixes),
            "path": list(env.interpreter.path),
            "platlib": env.interpreter.platlib,
            "markers": dict(env.interpreter.markers),
        },
        "distributions": {k: list(v) for k, v in env.distributions.items()},
        "frameworks": [
            {
                "kind": f.kind.name,
                "distribution": f.distribution,
                "version": f.version,
                "global_libraries": [str(p) for p in f.global_libraries],
                "local_libraries": [str(p) for p in f.local_libraries],
            }
            for f in env.frameworks.values()
        ],
        "elf_kind": list(env.search.kind) if env.search.kind else None,
        "ld_library_path": ":".join(env.search.ld_library_path),
        "ld_cache": env.search.cache,
        "glibc": env.glibc,
        "libstdcxx": env.libstdcxx,
    }


def environment_from_facts(
    facts: dict[str, Any],
    machine: Machine | None = None,
    exports: dict[Path, Exports] | None = None,
) -> Environment:
    """The :class:`Environment` that :func:`environment_facts` described, on ``machine``
    (default: no GPU), sharing ``exports`` (libraries read once across environments);
    KeyError, TypeError or ValueError for facts of another shape."""
    i = facts["interpreter"]
    interpreter = Interpreter(
        executable=str(i["executable"]),
        version=str(i["version"]),
        implementation=str(i["implementation"]),
        tags=tuple(map(str, i["tags"])),
        extension_suffixes=tuple(map(str, i["extension_suffixes"])),
        path=tuple(map(str, i["path"])),
        platlib=str(i["platlib"]),
        markers={str(k): str(v) for k, v in i["markers"].items()},
    )
    kinds = {kind.name: kind for kind in FRAMEWORKS}
    frameworks = {
        str(f["kind"]): Framework(
            kinds[str(f["kind"])],
            str(f["distribution"]),
            str(f["version"]),
            tuple(Path(p) for p in f["global_libraries"]),
            tuple(Path(p) for p in f["local_libraries"]),
        )
        for f in facts["frameworks"]
    }
    kind = facts["elf_kind"]
    return Environment(
        interpreter=interpreter,
        distributions={str(k): (str(v[0]), str(v[1])) for k, v in facts["distributions"].items()},
        frameworks=frameworks,
        search=LibrarySearch(
            (int(kind[0]), int(kind[1])) if kind else None,
            str(facts["ld_library_path"]),
            {str(k): [str(p) for p in v] for k, v in facts["ld_cache"].items()},
        ),
        glibc=str(facts["glibc"]),
        libstdcxx=str(facts["libstdcxx"]),
        machine=machine or Machine(),
        exports={} if exports is None else exports,
    )
