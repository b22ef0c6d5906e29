"""The intra-op threads setting: how many threads a native kernel's ``shard`` uses.

TensorFlow's ``intra_op_parallelism_threads``. It starts from ``OPMARKET_INTRA_OP_THREADS``
(a positive integer, read on first use; anything else warns and counts as unset) or,
without it, the CPUs this process may run on, and changes with :func:`set_intra_op_threads`.
The value lives in one C int that native libraries built with ``opmarket/kernel.h`` read
directly, so a change applies to their next ``shard``.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from opmarket.sdk._errors import InvalidArgumentError

__all__ = ["ENV_VAR", "intra_op_threads", "set_intra_op_threads"]

#: The environment variable read when this module is first imported.
ENV_VAR = "OPMARKET_INTRA_OP_THREADS"


def _default() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def _check(n: object, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgumentError(f"{what} must be a positive number of threads, got {n!r}")
    return n


def _initial() -> int:
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return _default()
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        # A bad setting must not break every native library's import: say so, use the default.
        default = _default()
        warnings.warn(
            f"{ENV_VAR}={text!r} is not a positive number of threads; using {default}",
            RuntimeWarning,
            stacklevel=3,
        )
        return default
    return value


_setting: Any = None  # a ctypes.c_int, made on first use


def _cell() -> Any:
    global _setting
    if _setting is None:
        import ctypes  # lazy: importing opmarket.sdk stays light

        _setting = ctypes.c_int(_initial())
    return _setting


def intra_op_threads() -> int:
    """The number of threads native kernels shard their work over (the caller included)."""
    return int(_cell().value)


def set_intra_op_threads(n: int | None) -> int:
    """Set the intra-op threads (None: back to the environment's or the CPU count); returns
    the previous value, so that ``set_intra_op_threads(old)`` restores it."""
    new = _initial() if n is None else _check(n, "intra-op threads")
    cell = _cell()
    old = int(cell.value)
    cell.value = new
    return old


def _setting_address() -> int:
    """Where native libraries read the setting (opmarket/kernel.h, at import)."""
    import ctypes

    return ctypes.addressof(_cell())
