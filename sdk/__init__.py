"""What plugin authors use: the op spec language, dtypes, the OpDef model and its formats.

Names are imported on first use (as in ``opmarket.registry``): a plugin that imports
``op``, ``kernel`` and ``hookimpl`` does not pay for the text format readers it never calls.
Build-time helpers (CUDA libraries, ``load_inline``, ``library_setup``) are in
:mod:`opmarket.sdk.build`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmarket.sdk._lazy import Moved, lazy_exports

if TYPE_CHECKING:
    from opmarket.sdk._attrproto import proto_field_for as proto_field_for
    from opmarket.sdk._builder import OpBuilder as OpBuilder
    from opmarket.sdk._builder import finalize_op as finalize_op
    from opmarket.sdk._builder import op as op
    from opmarket.sdk._canonical import Document as Document
    from opmarket.sdk._custom_call import CustomCallTarget as CustomCallTarget
    from opmarket.sdk._custom_call import custom_call as custom_call
    from opmarket.sdk._custom_call import custom_call_target as custom_call_target
    from opmarket.sdk._documents import opset_from_json as opset_from_json
    from opmarket.sdk._documents import opset_to_json as opset_to_json
    from opmarket.sdk._documents import parse_document as parse_document
    from opmarket.sdk._documents import read_document as read_document
    from opmarket.sdk._documents import read_opset as read_opset
    from opmarket.sdk._documents import render_document as render_document
    from opmarket.sdk._dtypes import NUMBER_TYPES as NUMBER_TYPES
    from opmarket.sdk._dtypes import QUANTIZED_TYPES as QUANTIZED_TYPES
    from opmarket.sdk._dtypes import REAL_NUMBER_TYPES as REAL_NUMBER_TYPES
    from opmarket.sdk._dtypes import DType as DType
    from opmarket.sdk._dtypes import as_dtype as as_dtype
    from opmarket.sdk._errors import DocumentError as DocumentError
    from opmarket.sdk._errors import InvalidArgumentError as InvalidArgumentError
    from opmarket.sdk._errors import InvalidDeclarationError as InvalidDeclarationError
    from opmarket.sdk._errors import InvalidOpDefError as InvalidOpDefError
    from opmarket.sdk._errors import NotFoundError as NotFoundError
    from opmarket.sdk._errors import OpmarketError as OpmarketError
    from opmarket.sdk._errors import Problem as Problem
    from opmarket.sdk._errors import UnknownDTypeError as UnknownDTypeError
    from opmarket.sdk._files import cache_dir as cache_dir
    from opmarket.sdk._gradients import GradientOp as GradientOp
    from opmarket.sdk._gradients import GradientSpec as GradientSpec
    from opmarket.sdk._gradients import not_differentiable as not_differentiable
    from opmarket.sdk._gradients import register_gradient as register_gradient
    from opmarket.sdk._hookspecs import hookimpl as hookimpl
    from opmarket.sdk._kernel import DEVICES as DEVICES
    from opmarket.sdk._kernel import Kernel as Kernel
    from opmarket.sdk._kernel import KernelSpec as KernelSpec
    from opmarket.sdk._kernel import kernel as kernel
    from opmarket.sdk._native import get_include as get_include
    from opmarket.sdk._native import library_declarations as library_declarations
    from opmarket.sdk._opdef import ArgDef as ArgDef
    from opmarket.sdk._opdef import AttrDef as AttrDef
    from opmarket.sdk._opdef import AttrType as AttrType
    from opmarket.sdk._opdef import Deprecation as Deprecation
    from opmarket.sdk._opdef import OpDef as OpDef
    from opmarket.sdk._opdef import snake_case as snake_case
    from opmarket.sdk._opset import KernelDef as KernelDef
    from opmarket.sdk._opset import OpSet as OpSet
    from opmarket.sdk._reference import InputGeneratorSpec as InputGeneratorSpec
    from opmarket.sdk._reference import ReferenceSpec as ReferenceSpec
    from opmarket.sdk._reference import input_generator as input_generator
    from opmarket.sdk._reference import reference as reference
    from opmarket.sdk._shape_inference import Dim as Dim
    from opmarket.sdk._shape_inference import InferenceContext as InferenceContext
    from opmarket.sdk._shape_inference import Shape as Shape
    from opmarket.sdk._shape_inference import ShapeFn as ShapeFn
    from opmarket.sdk._shape_inference import ShapeFnSpec as ShapeFnSpec
    from opmarket.sdk._shape_inference import broadcast_shape as broadcast_shape
    from opmarket.sdk._shape_inference import broadcasting as broadcasting
    from opmarket.sdk._shape_inference import format_shape as format_shape
    from opmarket.sdk._shape_inference import infer_error as infer_error
    from opmarket.sdk._shape_inference import infer_ok as infer_ok
    from opmarket.sdk._shape_inference import merge_all_inputs as merge_all_inputs
    from opmarket.sdk._shape_inference import parse_shape as parse_shape
    from opmarket.sdk._shape_inference import scalar_shape as scalar_shape
    from opmarket.sdk._shape_inference import shape_fn as shape_fn
    from opmarket.sdk._shape_inference import unchanged as unchanged
    from opmarket.sdk._shape_inference import unknown_shape as unknown_shape
    from opmarket.sdk._textformat import opdefs_from_pbtxt as opdefs_from_pbtxt
    from opmarket.sdk._textformat import opdefs_to_pbtxt as opdefs_to_pbtxt
    from opmarket.sdk._threads import intra_op_threads as intra_op_threads
    from opmarket.sdk._threads import set_intra_op_threads as set_intra_op_threads
    from opmarket.sdk._validate import check_attr_value as check_attr_value
    from opmarket.sdk._validate import is_valid_op_name as is_valid_op_name
    from opmarket.sdk._validate import validate_opdef as validate_opdef
    from opmarket.sdk._values import FullType as FullType
    from opmarket.sdk._values import FuncValue as FuncValue
    from opmarket.sdk._values import TaggedValue as TaggedValue
    from opmarket.sdk._values import TensorShape as TensorShape
    from opmarket.sdk._values import TensorValue as TensorValue

# module -> its public names: __all__ and the names' loading on first use come from here
# (tests/test_exports.py checks the imports above against it).
EXPORTS = {
    "opmarket.sdk._attrproto": ("proto_field_for",),
    "opmarket.sdk._builder": ("OpBuilder", "finalize_op", "op"),
    "opmarket.sdk._canonical": ("Document",),
    "opmarket.sdk._custom_call": ("CustomCallTarget", "custom_call", "custom_call_target"),
    "opmarket.sdk._documents": (
        "opset_from_json",
        "opset_to_json",
        "parse_document",
        "read_document",
        "read_opset",
        "render_document",
    ),
    "opmarket.sdk._dtypes": (
        "NUMBER_TYPES",
        "QUANTIZED_TYPES",
        "REAL_NUMBER_TYPES",
        "DType",
        "as_dtype",
    ),
    "opmarket.sdk._errors": (
        "DocumentError",
        "InvalidArgumentError",
        "InvalidDeclarationError",
        "InvalidOpDefError",
        "NotFoundError",
        "OpmarketError",
        "Problem",
        "UnknownDTypeError",
    ),
    "opmarket.sdk._files": ("cache_dir",),
    "opmarket.sdk._gradients": (
        "GradientOp",
        "GradientSpec",
        "not_differentiable",
        "register_gradient",
    ),
    "opmarket.sdk._hookspecs": ("hookimpl",),
    "opmarket.sdk._kernel": ("DEVICES", "Kernel", "KernelSpec", "kernel"),
    "opmarket.sdk._native": ("get_include", "library_declarations"),
    "opmarket.sdk._opdef": ("ArgDef", "AttrDef", "AttrType", "Deprecation", "OpDef", "snake_case"),
    "opmarket.sdk._opset": ("KernelDef", "OpSet"),
    "opmarket.sdk._reference": (
        "InputGeneratorSpec",
        "ReferenceSpec",
        "input_generator",
        "reference",
    ),
    "opmarket.sdk._shape_inference": (
        "Dim",
        "InferenceContext",
        "Shape",
        "ShapeFn",
        "ShapeFnSpec",
        "broadcast_shape",
        "broadcasting",
        "format_shape",
        "infer_error",
        "infer_ok",
        "merge_all_inputs",
        "parse_shape",
        "scalar_shape",
        "shape_fn",
        "unchanged",
        "unknown_shape",
    ),
    "opmarket.sdk._textformat": ("opdefs_from_pbtxt", "opdefs_to_pbtxt"),
    "opmarket.sdk._threads": ("intra_op_threads", "set_intra_op_threads"),
    "opmarket.sdk._validate": ("check_attr_value", "is_valid_op_name", "validate_opdef"),
    "opmarket.sdk._values": ("FullType", "FuncValue", "TaggedValue", "TensorShape", "TensorValue"),
}
# Old public names: still there, with a DeprecationWarning that says when they go.
DEPRECATED = {
    # Errors are named *Error since opmarket 0.2.
    "InvalidArgument": Moved("InvalidArgumentError", "1.0"),
    "InvalidOpDef": Moved("InvalidOpDefError", "1.0"),
    "NotFound": Moved("NotFoundError", "1.0"),
    "UnknownDType": Moved("UnknownDTypeError", "1.0"),
    # Build-time helpers moved to opmarket.sdk.build in 0.2.
    "CudaBuildError": Moved("opmarket.sdk.build:CudaBuildError", "1.0"),
    "CudaLibrary": Moved("opmarket.sdk.build:CudaLibrary", "1.0"),
    "InlineBuildError": Moved("opmarket.sdk.build:InlineBuildError", "1.0"),
    "build_cuda_library": Moved("opmarket.sdk.build:build_cuda_library", "1.0"),
    "find_nvcc": Moved("opmarket.sdk.build:find_nvcc", "1.0"),
    "library_setup": Moved("opmarket.sdk.build:library_setup", "1.0"),
    "load": Moved("opmarket.sdk.build:load", "1.0"),
    "load_cuda_library": Moved("opmarket.sdk.build:load_cuda_library", "1.0"),
    "load_inline": Moved("opmarket.sdk.build:load_inline", "1.0"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, EXPORTS, DEPRECATED)
