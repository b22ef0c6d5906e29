"""Framework-independent plumbing of the framework bridges (``opmarket.jax``,
``opmarket.torch``): which ops a framework sees, how their attrs become parameters, output
shapes from the op's shape function, the op's kernels and gradients on numpy arrays, and
the C-ABI kernels' native handles. Nothing here imports a framework.

This package is the one place the bridges reach opmarket's run time; what it uses that is
not public in ``opmarket.registry`` is wrapped in :mod:`opmarket._bridge._registry`.
"""

from opmarket._bridge._namespace import BridgeNamespace
from opmarket._bridge._ops import (
    BridgeOp,
    OutputSpec,
    Param,
    ParamKind,
    bridge_op,
    bridge_ops,
    c_array,
    freeze_attrs,
    require_framework,
)

__all__ = [
    "BridgeNamespace",
    "BridgeOp",
    "OutputSpec",
    "Param",
    "ParamKind",
    "bridge_op",
    "bridge_ops",
    "c_array",
    "freeze_attrs",
    "require_framework",
]
