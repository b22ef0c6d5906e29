"""Builds and loads the TensorFlow shim (``_shim.cc``, then generated trampolines, then
``_shim_native.cc``): compiled on first use against the installed TensorFlow's headers by
the bridges' one shim builder (``opmarket._bridge.build_shim``: opmarket's cache folder, one
file per shim source, opmarket C header and TensorFlow version); later processes load it at
once."""

from __future__ import annotations

import ctypes
import os
import threading
from importlib import resources

from opmarket._bridge import BridgeError, LibraryError, bridge_include, build_shim

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


def shim() -> ctypes.CDLL:
    """The loaded shim, built first if this TensorFlow and source have none yet."""
    global _shim
    if _shim is not None:
        return _shim
    with _lock:
        if _shim is None:
            cflags, ldflags, version = _tf_flags()
            lib_dirs = [f[2:] for f in ldflags if f.startswith("-L")]
            try:
                target = build_shim(
                    "opm_tf_shim",
                    _source(),
                    [bridge_include()],
                    key=[version],
                    flags=[*cflags, "-fvisibility=hidden"],
                    link=[*ldflags, *[f"-Wl,-rpath,{d}" for d in lib_dirs]],
                    language="c++",
                    # Tens of seconds, once per TensorFlow version: say so rather than hang.
                    announce="building the TensorFlow bridge's shim (once, ~20 s)...",
                )
            except LibraryError as exc:
                raise BridgeError(f"opmarket.tensorflow could not build its shim: {exc}") from None
            _shim = ctypes.CDLL(str(target), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        return _shim
