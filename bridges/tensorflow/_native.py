"""C-ABI kernels run natively inside TensorFlow (no Python per call)."""

from __future__ import annotations

from typing import Any

from opmarket.sdk import OpDef
from opmarket.tensorflow._plumbing import KernelPlan

__all__ = ["available", "register_kernel"]


def available() -> bool:
    """Whether C-ABI kernels can be registered natively."""
    return False


def register_kernel(kernel_name: str, op: OpDef, plan: KernelPlan, names: Any, dtypes: Any,
                    n: int, status: int) -> None:
    """Register ``plan``'s C-ABI kernel with TensorFlow under ``kernel_name``."""
    raise NotImplementedError
