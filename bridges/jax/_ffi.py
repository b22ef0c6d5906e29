"""XLA FFI custom calls for C-ABI kernels (filled in when the host's bridge API lands)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opmarket._bridge import BridgeOp, OutputSpec

__all__ = ["call", "native_kernel"]


def native_kernel(op: BridgeOp, attrs: Mapping[str, Any], label: str, device: str) -> Any:
    """The native kernel to call through XLA FFI for ``attrs``, or None (a callback then)."""
    return None


def call(native: Any, op: BridgeOp, attrs: Mapping[str, Any], xs: Sequence[Any],
         specs: Sequence[OutputSpec]) -> list[Any]:
    """The custom call's outputs."""
    raise NotImplementedError
