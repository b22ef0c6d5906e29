"""Native shims built on first use: a C source compiled into a shared library in opmarket's
cache, named by the hash of everything that goes into it (source, headers, compiler,
framework version), so each build happens once per machine and a changed input builds anew.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from opmarket._bridge import _registry
from opmarket.registry import LibraryError
from opmarket.sdk.build._setup import compiler

__all__ = ["build_shim"]


def build_shim(
    name: str,
    source: Path,
    includes: Sequence[str],
    *,
    key: Sequence[str] = (),
    flags: Sequence[str] = ("-std=c11",),
) -> Path:
    """The shared library built from ``source`` (cached); LibraryError with the compiler's
    output when it cannot be built."""
    digest = hashlib.sha256(source.read_bytes())
    for folder in includes:
        for header in sorted(Path(folder).rglob("*.h")):
            if "opmarket" in header.parts or "ffi" in header.parts:
                digest.update(header.read_bytes())
    for part in (*key, *compiler("c"), *flags):
        digest.update(part.encode())
    target = _registry.cache_dir() / "bridges" / f"{name}-{digest.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{name}-", suffix=".so")
    except OSError:  # an unwritable cache: build for this process only
        target = Path(tempfile.mkdtemp(prefix="opmarket-bridge-"), target.name)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{name}-", suffix=".so")
    os.close(fd)
    command = [
        *compiler("c"),
        "-shared",
        "-fPIC",
        "-O2",
        *flags,
        *(f"-I{i}" for i in includes),
        str(source),
        "-o",
        tmp,
        "-lpthread",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        os.unlink(tmp)
        raise LibraryError(
            f"building {name} needs a C compiler: cannot run {command[0]!r} ({exc}); set CC"
        ) from None
    if done.returncode != 0:
        os.unlink(tmp)
        raise LibraryError(
            f"cannot build {name} with {shlex.join(command)}:\n{done.stderr.strip()[-2000:]}"
        )
    os.replace(tmp, target)
    return target
