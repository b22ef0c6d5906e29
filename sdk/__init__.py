"""What plugin authors use: the op spec language, dtypes, the OpDef model and its formats."""

from typing import Any

from opmarket.sdk._builder import OpBuilder, finalize_op, op
from opmarket.sdk._canonical import Document
from opmarket.sdk._cuda import (
    CudaBuildError,
    CudaLibrary,
    build_cuda_library,
    find_nvcc,
    load_cuda_library,
)
from opmarket.sdk._custom_call import CustomCallTarget, custom_call, custom_call_target
from opmarket.sdk._documents import (
    opset_from_json,
    opset_to_json,
    parse_document,
    read_document,
    read_opset,
    render_document,
)
from opmarket.sdk._dtypes import (
    NUMBER_TYPES,
    QUANTIZED_TYPES,
    REAL_NUMBER_TYPES,
    DType,
    as_dtype,
)
from opmarket.sdk._errors import (
    DocumentError,
    InvalidArgumentError,
    InvalidDeclarationError,
    InvalidOpDefError,
    NotFoundError,
    OpmarketError,
    Problem,
    UnknownDTypeError,
)
from opmarket.sdk._gradients import (
    GradientOp,
    GradientSpec,
    not_differentiable,
    register_gradient,
)
from opmarket.sdk._hookspecs import hookimpl
from opmarket.sdk._inline import InlineBuildError, load, load_inline
from opmarket.sdk._kernel import DEVICES, Kernel, KernelSpec, kernel
from opmarket.sdk._native import get_include, library_declarations
from opmarket.sdk._opdef import ArgDef, AttrDef, AttrType, Deprecation, OpDef, snake_case
from opmarket.sdk._opset import KernelDef, OpSet
from opmarket.sdk._reference import (
    InputGeneratorSpec,
    ReferenceSpec,
    input_generator,
    reference,
)
from opmarket.sdk._setup import library_setup
from opmarket.sdk._shape_inference import (
    Dim,
    InferenceContext,
    Shape,
    ShapeFn,
    ShapeFnSpec,
    broadcast_shape,
    broadcasting,
    format_shape,
    infer_error,
    infer_ok,
    merge_all_inputs,
    parse_shape,
    scalar_shape,
    shape_fn,
    unchanged,
    unknown_shape,
)
from opmarket.sdk._textformat import opdefs_from_pbtxt, opdefs_to_pbtxt
from opmarket.sdk._threads import intra_op_threads, set_intra_op_threads
from opmarket.sdk._validate import check_attr_value, is_valid_op_name, validate_opdef
from opmarket.sdk._values import (
    FullType,
    FuncValue,
    TaggedValue,
    TensorShape,
    TensorValue,
)

__all__ = [
    "DEVICES",
    "NUMBER_TYPES",
    "QUANTIZED_TYPES",
    "REAL_NUMBER_TYPES",
    "ArgDef",
    "AttrDef",
    "AttrType",
    "CudaBuildError",
    "CudaLibrary",
    "CustomCallTarget",
    "DType",
    "Deprecation",
    "Dim",
    "Document",
    "DocumentError",
    "FullType",
    "FuncValue",
    "GradientOp",
    "GradientSpec",
    "InferenceContext",
    "InlineBuildError",
    "InputGeneratorSpec",
    "InvalidArgumentError",
    "InvalidDeclarationError",
    "InvalidOpDefError",
    "Kernel",
    "KernelDef",
    "KernelSpec",
    "NotFoundError",
    "OpBuilder",
    "OpDef",
    "OpSet",
    "OpmarketError",
    "Problem",
    "ReferenceSpec",
    "Shape",
    "ShapeFn",
    "ShapeFnSpec",
    "TaggedValue",
    "TensorShape",
    "TensorValue",
    "UnknownDTypeError",
    "as_dtype",
    "broadcast_shape",
    "broadcasting",
    "build_cuda_library",
    "check_attr_value",
    "custom_call",
    "custom_call_target",
    "finalize_op",
    "find_nvcc",
    "format_shape",
    "get_include",
    "hookimpl",
    "infer_error",
    "infer_ok",
    "input_generator",
    "intra_op_threads",
    "is_valid_op_name",
    "kernel",
    "library_declarations",
    "library_setup",
    "load",
    "load_cuda_library",
    "load_inline",
    "merge_all_inputs",
    "not_differentiable",
    "op",
    "opdefs_from_pbtxt",
    "opdefs_to_pbtxt",
    "opset_from_json",
    "opset_to_json",
    "parse_document",
    "parse_shape",
    "read_document",
    "read_opset",
    "reference",
    "register_gradient",
    "render_document",
    "scalar_shape",
    "set_intra_op_threads",
    "shape_fn",
    "snake_case",
    "unchanged",
    "unknown_shape",
    "validate_opdef",
]

#: Old public names (opmarket 0.1): still there, with a DeprecationWarning, until 1.0.
_DEPRECATED = {
    "InvalidArgument": "InvalidArgumentError",
    "InvalidOpDef": "InvalidOpDefError",
    "NotFound": "NotFoundError",
    "UnknownDType": "UnknownDTypeError",
}


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        import warnings

        new = _DEPRECATED[name]
        warnings.warn(
            f"opmarket.sdk.{name} is deprecated; use opmarket.sdk.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module 'opmarket.sdk' has no attribute {name!r}")
