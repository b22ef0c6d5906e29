"""The bridges' native shims: the one opmarket's wheel carries (built by setup.py from the
same source, against no framework), else one built on first use.

A shim built on first use is a C or C++ source compiled into a shared library in opmarket's
cache, named by the hash of everything that goes into it (source, opmarket's headers,
compiler, flags, framework version), so each build happens once per machine and a changed
input builds anew. Every bridge's shim (TensorFlow's kernels, JAX's FFI handler) is built
here."""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from opmarket.registry import LibraryError
from opmarket.sdk import cache_dir
from opmarket.sdk.build import compiler

__all__ = ["build_shim", "shipped_shim"]


#: Set to 0 to build every shim from source at first use rather than load the shipped ones.
SHIPPED_ENV = "OPMARKET_SHIPPED_SHIMS"


def shipped_shim(folder: Path, name: str) -> tuple[Path | None, str]:
    """The shim ``name`` that opmarket's install carries in the bridge package ``folder``
    (setup.py builds it as an abi3 extension file with no Python in it) and "", or None and
    why there is none: a source tree that was not built, a platform the wheel was not built
    for, or ``OPMARKET_SHIPPED_SHIMS=0``."""
    if os.environ.get(SHIPPED_ENV, "").strip() == "0":
        return None, f"{SHIPPED_ENV}=0"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"{name}{suffix}"
        if path.is_file():
            return path, ""
    return None, "this opmarket install carries none"


def build_shim(
    name: str,
    source: Path | str,
    includes: Sequence[str],
    *,
    key: Sequence[str] = (),
    flags: Sequence[str] = ("-std=c11",),
    link: Sequence[str] = ("-lpthread",),
    language: str = "c",
    announce: str = "",
) -> Path:
    """The shared library built from ``source`` (a file, or the source text itself) in
    ``language`` (``c`` or ``c++``), cached; ``announce`` is printed on stderr before a build
    (one that takes long). LibraryError with the compiler's output when it cannot be built."""
    text = source.read_bytes() if isinstance(source, Path) else source.encode()
    digest = hashlib.sha256(text)
    for folder in includes:
        for header in sorted(Path(folder).rglob("*.h")):
            if "opmarket" in header.parts or "ffi" in header.parts:
                digest.update(header.read_bytes())
    cc = compiler(language)
    for part in (*key, *cc, *flags, *link):
        digest.update(part.encode())
    target = cache_dir() / "bridges" / f"{name}-{digest.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    if announce:
        print(f"opmarket: {announce}", file=sys.stderr, flush=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # an unwritable cache: build for this process only
        target = Path(tempfile.mkdtemp(prefix="opmarket-bridge-"), target.name)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as work:
        src = source
        if not isinstance(src, Path):
            src = Path(work, f"{name}{'.c' if language == 'c' else '.cc'}")
            src.write_bytes(text)
        command = [
            *compiler(language),
            "-shared",
            "-fPIC",
            "-O2",
            *flags,
            *(f"-I{i}" for i in includes),
            str(src),
            "-o",
            str(Path(work, f"{name}.so")),
            *link,
        ]
        _compile(name, command, language)
        os.replace(Path(work, f"{name}.so"), target)  # atomic: a concurrent builder sees one
    return target


def _compile(name: str, command: list[str], language: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise LibraryError(
            f"building {name} needs a compiler: cannot run {command[0]!r} ({exc}); "
            f"set {'CC' if language == 'c' else 'CXX'}"
        ) from None
    if done.returncode != 0:
        raise LibraryError(
            f"cannot build {name} with {shlex.join(command)}:\n{done.stderr.strip()[-2000:]}"
        )
