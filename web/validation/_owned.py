"""Names the index's own environment owns: project names no uploader may claim, and
top-level import names no plugin wheel may ship.

A project this index serves shadows every other index for its installers: an uploader who
publishes ``numpy 99.0`` here gets it installed beside any plugin whose user points pip at
this index (with or without ``--upstream``). So by default an upload may not claim the name
of a distribution installed where the server runs (opmarket, its dependencies, the server's;
opmarket plugins installed there are plugins, not dependencies, and stay open), a name of
the table shipped in ``_reserved`` (the development environment's distributions: the
dependency closure of opmarket's extras, whatever this server installed), a well-known name
from the list below or one ``PATTERNS`` matches; ``Settings.allowed_names`` opens some
again. The import names of all of them are refused in plugin wheels.

A plugin wheel's files land in the installer's ``site-packages`` beside everything else: one
that ships ``packaging/`` or ``numpy/`` replaces them for every program there, and a ``.pth``
file runs code at every interpreter start. Validation refuses both (``import_problems``),
comparing import names case-insensitively (a case-insensitive file system imports ``Numpy/``
as ``numpy``). Files under a wheel's ``.data/data/`` or ``.data/headers/`` are installed
under the environment's prefix, where a path such as ``lib/python3.11/site-packages/`` or
``bin/`` reaches everything; plugins may ship neither, nor scripts named ``python*``,
``pip*`` or after a script the environment's distributions install.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import re
import threading
import zipfile
from collections.abc import Callable, Iterable
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Generic, TypeVar

from packaging.utils import canonicalize_name

__all__ = [
    "PATTERNS",
    "WELL_KNOWN",
    "WELL_KNOWN_IMPORTS",
    "environment_table",
    "import_problems",
    "others_packages",
    "prefix_problems",
    "read_environment",
    "reserved_names",
    "reserved_problem",
    "top_level_names",
]

#: Names refused even where the server's environment lacks them: the frameworks opmarket's
#: bridges run in, what installers and builds need, and the most installed projects.
WELL_KNOWN = frozenset(
    {
        "pip",
        "setuptools",
        "wheel",
        "packaging",
        "numpy",
        "scipy",
        "pandas",
        "ml-dtypes",
        "pluggy",
        "protobuf",
        "pybind11",
        "torch",
        "tensorflow",
        "tensorflow-cpu",
        "tf-keras",
        "keras",
        "jax",
        "jaxlib",
        "ai-edge-litert",
        "tflite-runtime",
        "requests",
        "urllib3",
        "certifi",
        "idna",
        "charset-normalizer",
        "six",
        "typing-extensions",
        "pyyaml",
        "attrs",
        "click",
        "cryptography",
        "cffi",
        "opmarket",
    }
)
_MODULE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\..*)?$")


#: Import names of the ``WELL_KNOWN`` names (where the shipped table lacks them): a plugin
#: shipping ``torch/`` or ``yaml/`` replaces them wherever they are installed.
WELL_KNOWN_IMPORTS = {
    "pip": ("pip",),
    "setuptools": ("setuptools", "pkg_resources", "_distutils_hack"),
    "wheel": ("wheel",),
    "packaging": ("packaging",),
    "numpy": ("numpy",),
    "scipy": ("scipy",),
    "pandas": ("pandas",),
    "ml-dtypes": ("ml_dtypes",),
    "pluggy": ("pluggy",),
    "pybind11": ("pybind11",),
    "torch": ("torch", "functorch", "torchgen"),
    "torchvision": ("torchvision",),
    "torchaudio": ("torchaudio",),
    "triton": ("triton",),
    "tensorflow": ("tensorflow",),
    "tensorflow-cpu": ("tensorflow",),
    "tf-keras": ("tf_keras",),
    "keras": ("keras",),
    "jax": ("jax",),
    "jaxlib": ("jaxlib",),
    "ai-edge-litert": ("ai_edge_litert",),
    "tflite-runtime": ("tflite_runtime",),
    "requests": ("requests",),
    "urllib3": ("urllib3",),
    "certifi": ("certifi",),
    "idna": ("idna",),
    "charset-normalizer": ("charset_normalizer",),
    "six": ("six",),
    "typing-extensions": ("typing_extensions",),
    "pyyaml": ("yaml", "_yaml"),
    "attrs": ("attr", "attrs"),
    "click": ("click",),
    "cryptography": ("cryptography",),
    "cffi": ("cffi", "_cffi_backend"),
    "sympy": ("sympy",),
    "networkx": ("networkx",),
    "filelock": ("filelock",),
    "fsspec": ("fsspec",),
    "opmarket": ("opmarket",),
}
#: Name patterns refused too: the CUDA wheels torch's and JAX's CUDA builds pull in, from
#: their own indexes (``--extra-index-url``), where pip takes the highest version of all.
PATTERNS = ("nvidia-*", "cuda-*", "triton", "triton-*", "pytorch-triton*", "jax-cuda*")


def _is_plugin(dist: importlib.metadata.Distribution) -> bool:
    return any(ep.group == "opmarket" for ep in dist.entry_points)


def environment_table(
    dists: Iterable[importlib.metadata.Distribution],
) -> dict[str, set[str]]:
    """Each distribution of ``dists`` that is not an opmarket plugin, by normalized name,
    with its top-level import names (what scripts/reserved_names.py writes)."""
    table: dict[str, set[str]] = {}
    for dist in dists:
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name and not _is_plugin(dist):
            tops = {t for t in _dist_tops(dist) if not t.startswith("__editable__")}
            table.setdefault(name, set()).update(tops)
    return table


_T = TypeVar("_T")


class _Once(Generic[_T]):
    """``functools.cache`` for a call without arguments, whose first call runs once:
    threads that ask meanwhile wait for it (the first uploads after a server starts come
    together, and each would read every distribution of the environment)."""

    def __init__(self, func: Callable[[], _T]) -> None:
        self._cached = cache(func)
        self._lock = threading.RLock()
        self.__doc__ = func.__doc__

    def __call__(self) -> _T:
        with self._lock:
            return self._cached()

    def cache_clear(self) -> None:
        """Read it again at the next call."""
        with self._lock:
            self._cached.cache_clear()


@cache
def _shipped() -> dict[str, frozenset[str]]:
    """The shipped table (``_reserved``) and ``WELL_KNOWN_IMPORTS``: distribution ->
    import names."""
    from opmarket.web.validation._reserved import TABLE

    found: dict[str, set[str]] = {n: set(t) for n, t in WELL_KNOWN_IMPORTS.items()}
    for line in TABLE.split("\n"):
        name, *tops = line.split() or [""]
        if name:
            found.setdefault(name, set()).update(tops)
    return {k: frozenset(v) for k, v in found.items()}


@_Once
def _environment() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """The normalized names of the environment's distributions that are not opmarket
    plugins, and each top-level import name with the distributions that ship it."""
    names: set[str] = set()
    owners: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        if not name:
            continue
        if not _is_plugin(dist):
            names.add(name)
        for top in _dist_tops(dist):
            owners.setdefault(top, set()).add(name)
    return frozenset(names), {k: frozenset(v) for k, v in owners.items()}


def _dist_tops(dist: importlib.metadata.Distribution) -> set[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return {line.strip() for line in text.splitlines() if line.strip()}
    return {top for f in dist.files or () if (top := _top(str(f))) is not None}


def _top(member: str) -> str | None:
    """The import name a wheel member is installed under (None: metadata, scripts, data)."""
    parts = member.split("/")
    if parts[0].endswith(".data"):
        if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
            return None
        parts = parts[2:]
    if parts[0].endswith(".dist-info") or parts[0] in ("", "..", "__pycache__"):
        return None
    match = _MODULE.match(parts[0])
    return match.group(1) if match else None


@_Once
def _owners_folded() -> dict[str, frozenset[str]]:
    """``_environment``'s and ``_shipped``'s import names, casefolded: a case-insensitive
    file system (macOS, Windows) imports ``Numpy/`` as ``numpy``."""
    folded: dict[str, set[str]] = {}
    for name, dists in _environment()[1].items():
        folded.setdefault(name.casefold(), set()).update(dists)
    for dist, tops in _shipped().items():
        for top in tops:
            folded.setdefault(top.casefold(), set()).add(dist)
    return {k: frozenset(v) for k, v in folded.items()}


def read_environment() -> None:
    """Read, once per process, what the environment's distributions own (their import
    names and scripts: every validation's inspect step asks): a validation worker does it
    before its first job, which would otherwise pay for it (about 1 s on a busy machine)."""
    _owners_folded()
    _environment_scripts()


def reserved_names(allowed: str = "") -> frozenset[str]:
    """The project names uploads may not claim: the environment's, ``WELL_KNOWN`` and the
    shipped table's (``_reserved``, generated from the development environment), less
    ``allowed`` (names separated by commas or spaces)."""
    names, _ = _environment()
    opened = {canonicalize_name(n) for n in re.split(r"[,\s]+", allowed) if n}
    return frozenset((names | WELL_KNOWN | set(_shipped())) - opened)


def reserved_problem(normalized: str, allowed: str = "") -> str:
    """Why an upload may not create project ``normalized`` ("" when it may): a name of
    ``reserved_names`` or one ``PATTERNS`` matches."""
    opened = {canonicalize_name(n) for n in re.split(r"[,\s]+", allowed) if n}
    matched = normalized not in opened and any(fnmatchcase(normalized, p) for p in PATTERNS)
    if normalized not in reserved_names(allowed) and not matched:
        return ""
    return (
        f"project {normalized!r} is a name this index's own software depends on or a "
        "well-known project: an upload here would be installed in its place by everyone "
        "who uses this index (dependency confusion); choose another name, or ask the "
        "operator to host it (opmarket host) or to allow it (OPMARKET_ALLOWED_NAMES)"
    )


def top_level_names(wheel: Path) -> tuple[set[str], list[str]]:
    """The import names a wheel installs, and its ``.pth`` files."""
    names: set[str] = set()
    pth: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            parts = member.split("/")
            if parts[0].endswith(".data") and parts[1:2] in (["purelib"], ["platlib"]):
                parts = parts[2:]
            if len(parts) == 1 and member.endswith(".pth"):  # installed at the top
                pth.append(member)
            top = _top(member)
            if top is not None:
                names.add(top)
    return names, pth


def _script_names(zf: zipfile.ZipFile) -> list[tuple[str, str]]:
    """(where, name) of each script the wheel installs: ``.data/scripts/`` files and
    console or GUI entry points."""
    found: list[tuple[str, str]] = []
    for member in zf.namelist():
        parts = member.split("/")
        if len(parts) == 3 and parts[0].endswith(".data") and parts[1] == "scripts":
            found.append((member, parts[2]))
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "entry_points.txt":
            parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
            parser.optionxform = str  # type: ignore[assignment,method-assign]
            try:
                parser.read_string(zf.read(member).decode("utf-8", "replace"))
            except configparser.Error:
                continue  # the run-time checks read entry points and report them
            for group in ("console_scripts", "gui_scripts"):
                if parser.has_section(group):
                    found += [(f"{member} [{group}]", key) for key in parser.options(group)]
    return found


@_Once
def _environment_scripts() -> dict[str, frozenset[str]]:
    """The script names (casefolded) this environment's distributions install, each with
    the distributions that install it."""
    owners: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        scripts = {ep.name for ep in dist.entry_points if ep.group.endswith("_scripts")}
        for f in dist.files or ():
            parts = str(f).split("/")
            if len(parts) >= 2 and parts[0] == ".." and parts[-2] in ("bin", "Scripts"):
                scripts.add(parts[-1])
        for script in scripts:
            owners.setdefault(script.casefold(), set()).add(name)
    return {k: frozenset(v) for k, v in owners.items()}


def prefix_problems(wheel: Path, project: str = "") -> list[str]:
    """Members a plugin may not install outside its own packages: ``.data/data/`` and
    ``.data/headers/`` (installed under the environment's prefix, where they can overwrite
    site-packages or anything else there) and scripts that would replace the
    environment's own (``python*``, ``pip*``, or a name an installed distribution uses)."""
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            parts = member.split("/")
            if parts[0].endswith(".data") and parts[1:2] in (["data"], ["headers"]):
                problems.append(
                    f"{member}: installed under the environment's prefix (.data/{parts[1]}), "
                    "where it can overwrite any file there; plugins may not ship one"
                )
        for where, name in _script_names(zf):
            key = name.casefold()
            theirs = _environment_scripts().get(key, frozenset()) - {canonicalize_name(project)}
            if key.startswith(("python", "pip")) or theirs:
                problems.append(
                    f"{where}: script {name!r} would replace the environment's own; "
                    "plugins may not install it"
                )
    return problems


def others_packages(
    wheel: Path, project: str, projects: Callable[[set[str]], set[str]]
) -> list[str]:
    """The wheel's import names that are another project's name on this index (its
    package, by the usual convention: ``opmarket_zero_out`` for ``opmarket-zero-out``);
    ``projects`` says which of a set of normalized names are projects there."""
    names, _ = top_level_names(wheel)
    own = canonicalize_name(project)
    by_project = {str(canonicalize_name(n)): n for n in names if canonicalize_name(n) != own}
    taken = projects(set(by_project))
    return [
        f"{by_project[name]}: the package of project {name!r} on this index; a plugin would "
        "replace it for everyone who installs both"
        for name in sorted(taken)
    ]


def import_problems(wheel: Path, project: str) -> list[str]:
    """Why the wheel of ``project`` may not be installed beside others: import names
    that distributions of this environment own, and ``.pth`` files ([] when none)."""
    owners = _owners_folded()
    names, pth = top_level_names(wheel)
    own = canonicalize_name(project)
    problems = [
        f"{name}: an import name that {', '.join(sorted(owners[key]))} "
        "installs; a plugin would replace it for every program beside it"
        for name in sorted(names)
        if (key := name.casefold()) in owners and own not in owners[key]
    ]
    problems += [
        f"{member}: a .pth file runs code at every interpreter start; plugins may not ship one"
        for member in pth
    ]
    return problems + prefix_problems(wheel, project)
