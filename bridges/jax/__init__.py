"""opmarket ops inside JAX: ``opmarket.jax.ops.<op>(...)`` on ``jax.Array``s, under
``jax.jit``, ``jax.vmap`` and ``jax.grad`` (see docs/frameworks.md, "JAX").

C-ABI kernels run as XLA FFI custom calls (the jitted program calls them with no Python in
between); so do GPU companions' kernels with a device entry on JAX's CUDA platform (the CUDA
target ``opmarket_cuda``); other kernels run through ``jax.pure_callback``.
``native_path`` and ``native_reason`` say which path an op takes and why. Needs
``opmarket[jax]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opmarket._bridge import require_framework

require_framework("jax", "jax")

from opmarket.jax._ops import jax_op, native_path, native_reason  # noqa: E402  (after the framework check)

if TYPE_CHECKING:
    from opmarket._bridge import BridgeNamespace

    ops: BridgeNamespace

__all__ = ["jax_op", "native_path", "native_reason", "ops"]


def __getattr__(name: str) -> Any:
    if name == "ops":
        from opmarket._bridge import BridgeNamespace

        ns = BridgeNamespace(jax_op, "opmarket.jax.ops")
        globals()["ops"] = ns
        return ns
    raise AttributeError(f"module 'opmarket.jax' has no attribute {name!r}")
