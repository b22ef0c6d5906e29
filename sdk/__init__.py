"""What plugin authors use: the op spec language, dtypes, the OpDef model and its formats."""

from opmarket.sdk._builder import OpBuilder, finalize_op, op
from opmarket.sdk._canonical import Document
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
    InvalidArgument,
    InvalidOpDef,
    NotFound,
    OpmarketError,
    Problem,
    UnknownDType,
)
from opmarket.sdk._opdef import ArgDef, AttrDef, Deprecation, OpDef, snake_case
from opmarket.sdk._opset import KernelDef, OpSet
from opmarket.sdk._textformat import opdefs_from_pbtxt, opdefs_to_pbtxt
from opmarket.sdk._validate import check_attr_value, is_valid_op_name, validate_opdef
from opmarket.sdk._values import (
    FullType,
    FuncValue,
    TaggedValue,
    TensorShape,
    TensorValue,
)

__all__ = [
    "NUMBER_TYPES",
    "QUANTIZED_TYPES",
    "REAL_NUMBER_TYPES",
    "ArgDef",
    "AttrDef",
    "DType",
    "Deprecation",
    "Document",
    "DocumentError",
    "FullType",
    "FuncValue",
    "InvalidArgument",
    "InvalidOpDef",
    "KernelDef",
    "NotFound",
    "OpBuilder",
    "OpDef",
    "OpSet",
    "OpmarketError",
    "Problem",
    "TaggedValue",
    "TensorShape",
    "TensorValue",
    "UnknownDType",
    "as_dtype",
    "check_attr_value",
    "finalize_op",
    "is_valid_op_name",
    "op",
    "opdefs_from_pbtxt",
    "opdefs_to_pbtxt",
    "opset_from_json",
    "opset_to_json",
    "parse_document",
    "read_document",
    "read_opset",
    "render_document",
    "snake_case",
    "validate_opdef",
]
