"""Builds and loads the TensorFlow shim (``_shim.cc``, then generated trampolines, then
``_shim_native.cc``): compiled on first use against the
installed TensorFlow's headers into opmarket's cache folder, one file per shim source,
opmarket C header and TensorFlow version; later processes load it at once."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
import threading
from importlib import resources
from pathlib import Path

from opmarket.sdk import get_include
from opmarket.sdk._files import cache_dir
from opmarket.sdk.build._setup import compiler
from opmarket.tensorflow._plumbing import BridgeError

__all__ = ["SLOTS", "shim"]

#: Trampolines of each kind (shape functions, kernel creates) the shim has: at most this
#: many ops with a shape function, and this many Python-bodied kernels, per process.
SLOTS = 1024

_lock = threading.Lock()
_shim: ctypes.CDLL | None = None


def _trampolines() -> str:
    """C for SLOTS shape and create trampolines and the two tables that hand them out."""
    lines = []
    for i in range(SLOTS):
        lines.append(
            f"static void opm_shape_{i}(TF_ShapeInferenceContext* c, TF_Status* s) "
            f"{{ shape_common({i}, c, s); }}"
        )
        lines.append(
            f"static void* opm_create_{i}(TF_OpKernelConstruction* c) "
            f"{{ return create_common({i}, c); }}"
        )
    shapes = ", ".join(f"opm_shape_{i}" for i in range(SLOTS))
    creates = ", ".join(f"opm_create_{i}" for i in range(SLOTS))
    lines += [
        "typedef void (*opm_shape_fn)(TF_ShapeInferenceContext*, TF_Status*);",
        "typedef void* (*opm_create_fn)(TF_OpKernelConstruction*);",
        f"static const opm_shape_fn opm_shapes[{SLOTS}] = {{{shapes}}};",
        f"static const opm_create_fn opm_creates[{SLOTS}] = {{{creates}}};",
        "static void (*shape_trampoline(int32_t slot))(TF_ShapeInferenceContext*, TF_Status*) {",
        f"  return slot >= 0 && slot < {SLOTS} ? opm_shapes[slot] : NULL;",
        "}",
        "static void* (*create_trampoline(int32_t slot))(TF_OpKernelConstruction*) {",
        f"  return slot >= 0 && slot < {SLOTS} ? opm_creates[slot] : NULL;",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _source() -> str:
    files = resources.files("opmarket.tensorflow")
    head = files.joinpath("_shim.cc").read_text()
    native = files.joinpath("_shim_native.cc").read_text()
    # The trampolines go between the Python part and the native part, inside extern "C".
    return (
        f"#define OPM_TF_SLOTS {SLOTS}\n"
        + head
        + "\n/* ---- generated trampolines ---- */\n"
        + _trampolines()
        + "\n"
        + native
        + '\n}  /* extern "C" */\n'
    )


def _tf_flags() -> tuple[list[str], list[str], str]:
    import tensorflow as tf

    return (
        list(tf.sysconfig.get_compile_flags()),
        list(tf.sysconfig.get_link_flags()),
        str(tf.version.VERSION),
    )


def _build(target: Path, source: str, cflags: list[str], ldflags: list[str]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    lib_dirs = [f[2:] for f in ldflags if f.startswith("-L")]
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp, "opm_tf_shim.cc")
        src.write_text(source)
        out = Path(tmp, target.name)
        cmd = [
            *compiler("c++"),
            *cflags,
            "-O2",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            f"-I{get_include()}",
            str(src),
            "-o",
            str(out),
            *ldflags,
            *[f"-Wl,-rpath,{d}" for d in lib_dirs],
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise BridgeError(
                f"opmarket.tensorflow needs a C compiler to build its shim: {cmd[0]!r}: {exc}"
            ) from None
        if done.returncode != 0:
            raise BridgeError(
                "opmarket.tensorflow could not build its shim:\n"
                f"{shlex.join(cmd)}\n{done.stderr.strip()}"
            )
        os.replace(out, target)  # atomic: a concurrent builder sees the old or the new


def shim() -> ctypes.CDLL:
    """The loaded shim, built first if this TensorFlow and source have none yet."""
    global _shim
    if _shim is not None:
        return _shim
    with _lock:
        if _shim is None:
            cflags, ldflags, version = _tf_flags()
            source = _source()
            headers = [
                Path(get_include(), "opmarket", h).read_text() for h in ("c_api.h", "capi_bridge.h")
            ]
            key = hashlib.sha256("\0".join([source, *headers, version, *cflags, *ldflags]).encode())
            target = cache_dir() / "tensorflow" / f"opm_tf_shim-{version}-{key.hexdigest()[:16]}.so"
            if not target.exists():
                # Tens of seconds, once per TensorFlow version: say so rather than hang.
                print(
                    "opmarket: building the TensorFlow bridge's shim (once, ~20 s)...",
                    file=sys.stderr,
                    flush=True,
                )
                _build(target, source, cflags, ldflags)
            _shim = ctypes.CDLL(str(target), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        return _shim
