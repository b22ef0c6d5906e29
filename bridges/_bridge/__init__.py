"""Framework-independent plumbing of the framework bridges (``opmarket.tensorflow``,
``opmarket.litert``, ``opmarket.jax``, ``opmarket.torch``): which ops a framework sees, how
their attrs become parameters, attr values and dtypes from framework values, output shapes
from the op's shape function, the op's kernels (prepared calls) and gradients on numpy
arrays, the C-ABI kernels' native handles and the native shims (shipped built in the install,
or built on first use). Nothing here imports a framework.

This package is the one place the bridges reach opmarket's run time, and it does so through
``opmarket.registry``'s public names only (:mod:`opmarket._bridge._registry`).
"""

from opmarket._bridge._build import build_shim, shipped_shim
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
from opmarket._bridge._plumbing import (
    NATIVE_PRIORITY_BOOST,
    BridgeError,
    KernelPlan,
    bridged_ops,
    flatten_outputs,
    group_inputs,
    group_outputs,
    is_native,
    kernel_plan,
    normalize_attr,
    normalize_dtype,
    normalize_shape,
)
from opmarket._bridge._readonly import readonly_array
from opmarket._bridge._registry import (
    bind_inputs,
    bridge_include,
    bridge_table,
    device_entry_address,
    load_all,
    native_handle,
    native_shape_handle,
    op_def,
    prepare,
    registry,
)
from opmarket._bridge._shapes import num_outputs, output_shapes
from opmarket._bridge._shim_sources import (
    TENSORFLOW_SLOTS,
    TORCH_SLOTS,
    tensorflow_source,
    torch_source,
)
from opmarket.registry import (
    BoundedCache,
    KernelNotFoundError,
    LibraryError,
    OpResolver,
    RegistrationError,
)

__all__ = [
    "NATIVE_PRIORITY_BOOST",
    "TENSORFLOW_SLOTS",
    "TORCH_SLOTS",
    "BoundedCache",
    "BridgeError",
    "BridgeNamespace",
    "BridgeOp",
    "KernelNotFoundError",
    "KernelPlan",
    "LibraryError",
    "OpResolver",
    "OutputSpec",
    "Param",
    "ParamKind",
    "RegistrationError",
    "bind_inputs",
    "bridge_include",
    "bridge_op",
    "bridge_ops",
    "bridge_table",
    "bridged_ops",
    "build_shim",
    "c_array",
    "device_entry_address",
    "flatten_outputs",
    "freeze_attrs",
    "group_inputs",
    "group_outputs",
    "is_native",
    "kernel_plan",
    "load_all",
    "native_handle",
    "native_shape_handle",
    "normalize_attr",
    "normalize_dtype",
    "normalize_shape",
    "num_outputs",
    "op_def",
    "output_shapes",
    "prepare",
    "readonly_array",
    "registry",
    "require_framework",
    "shipped_shim",
    "tensorflow_source",
    "torch_source",
]
