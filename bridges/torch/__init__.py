"""opmarket ops as PyTorch custom ops: after ``import opmarket.torch`` every installed op is
``torch.ops.<namespace>.<op>`` (``torch.ops.opm.zero_out``) and
``opmarket.torch.ops.<op>``, with fake tensors, autograd and ``torch.compile`` support (see
docs/frameworks.md, "PyTorch"). Needs ``opmarket[torch]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opmarket._bridge import require_framework

require_framework("torch", "torch")

from opmarket.torch._ops import native_path, native_reason, register_all, torch_op  # noqa: E402  (after the check)

if TYPE_CHECKING:
    from opmarket._bridge import BridgeNamespace

    ops: BridgeNamespace

__all__ = ["native_path", "native_reason", "ops", "register_all", "torch_op"]

register_all()


def __getattr__(name: str) -> Any:
    if name == "ops":
        from opmarket._bridge import BridgeNamespace

        ns = BridgeNamespace(torch_op, "opmarket.torch.ops")
        globals()["ops"] = ns
        return ns
    raise AttributeError(f"module 'opmarket.torch' has no attribute {name!r}")
