"""Loads the TensorFlow shim (``_shim.cc``, generated trampolines, ``_shim_native.cc``): the
one opmarket's wheel carries, built by setup.py against opmarket's own declarations of
TensorFlow's C API (``_tf_c_api.h``), so no compiler and no TensorFlow headers are needed at
run time. The shim links no TensorFlow: it finds TensorFlow's C functions in the process's
``libtensorflow_framework.so.2`` when it loads, and a TensorFlow that lacks one is named with
the functions it lacks. Where the install carries no shim (a source tree not built, a
platform the wheel was not built for) or the carried one does not load, the same source is
built on first use by the bridges' one shim builder, with one line on stderr saying so."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any

from opmarket._bridge import (
    TENSORFLOW_SLOTS,
    BridgeError,
    LibraryError,
    bridge_include,
    build_shim,
    shipped_shim,
    tensorflow_source,
)

__all__ = ["SLOTS", "shim"]

#: Trampolines of each kind (shape functions, kernel creates) the shim has: at most this
#: many ops with a shape function, and this many Python-bodied kernels, per process.
SLOTS = TENSORFLOW_SLOTS
#: The library TensorFlow's C API is in, by its soname (OPM_TF_FRAMEWORK in _tf_c_api.h).
FRAMEWORK = "libtensorflow_framework.so.2"
_NAME = "_opm_tf_shim"
_FOLDER = Path(__file__).parent
_lock = threading.Lock()
_shim: ctypes.CDLL | None = None


class _Shim(ctypes.CDLL):
    """The shim's library; TensorFlow's own C functions (``TF_NewStatus``, ``TF_Message``...)
    that Python calls resolve in TensorFlow's library, as they did when the shim linked it."""

    framework: ctypes.CDLL | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("TF_") and self.framework is not None:
            func = getattr(self.framework, name)
            setattr(self, name, func)
            return func
        return super().__getattr__(name)


def _open(path: Path) -> _Shim:
    """The shim at ``path`` with TensorFlow's functions bound; BridgeError naming the ones
    this TensorFlow lacks."""
    import tensorflow as tf

    lib = _Shim(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    lib.framework = ctypes.CDLL(FRAMEWORK, mode=os.RTLD_NOW | os.RTLD_NOLOAD)
    lib.opm_tf_bind.restype = ctypes.c_int32
    lib.opm_tf_bind.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
    missing = ctypes.create_string_buffer(4096)
    lacking = lib.opm_tf_bind(missing, len(missing))
    if lacking < 0:
        raise BridgeError(f"opmarket.tensorflow: TensorFlow's {FRAMEWORK} is not loaded")
    if lacking > 0:
        raise BridgeError(
            f"opmarket.tensorflow cannot run on TensorFlow {tf.version.VERSION}: its "
            f"{FRAMEWORK} lacks {lacking} function(s) of TensorFlow's C API that the bridge's "
            f"shim calls: {missing.value.decode()}"
        )
    return lib


def shim() -> ctypes.CDLL:
    """The loaded shim: the one opmarket carries, else one built for this source first."""
    global _shim
    if _shim is not None:
        return _shim
    with _lock:
        if _shim is None:
            _shim = _load()
        return _shim


def _load() -> _Shim:
    import tensorflow  # noqa: F401  (the shim binds to the TensorFlow it loads)

    shipped, why = shipped_shim(_FOLDER, _NAME)
    if shipped is not None:
        try:
            return _open(shipped)
        except OSError as exc:  # e.g. a C++ runtime older than the build machine's
            why = f"the one it carries does not load: {exc}"
    try:
        target = build_shim(
            "opm_tf_shim",
            tensorflow_source(_FOLDER),
            [bridge_include(), str(_FOLDER)],
            flags=["-std=c++17", "-fvisibility=hidden"],
            link=["-ldl"],
            language="c++",
            # Tens of seconds, once per source: say what and why rather than hang.
            announce=f"building the TensorFlow bridge's shim ({why}; once, ~10 s)...",
        )
        return _open(target)
    except (LibraryError, OSError) as exc:
        raise BridgeError(f"opmarket.tensorflow could not build its shim: {exc}") from None
