"""TensorFlow's OpDef protobuf schema, declared in code so no protoc step is needed.

Field names and numbers follow tensorflow/core/framework/{types,tensor_shape,resource_handle,
tensor,attr_value,full_type,op_def}.proto. The message classes are built on first use, and
protobuf is imported then too: most users of the SDK (a plugin declaring its ops, the
validation sandbox loading one) never build a message, and its import costs tens of ms.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from opmarket.sdk._dtypes import DType

if TYPE_CHECKING:
    from google.protobuf import descriptor_pb2

__all__ = ["FULL_TYPE_IDS", "messages"]

_PKG = "tensorflow"

# FullTypeId (full_type.proto): name -> number.
FULL_TYPE_IDS: dict[str, int] = {
    "TFT_UNSET": 0,
    "TFT_VAR": 1,
    "TFT_ANY": 2,
    "TFT_PRODUCT": 3,
    "TFT_NAMED": 4,
    "TFT_FOR_EACH": 20,
    "TFT_CALLABLE": 100,
    "TFT_TENSOR": 1000,
    "TFT_ARRAY": 1001,
    "TFT_OPTIONAL": 1002,
    "TFT_LITERAL": 1003,
    "TFT_ENCODED": 1004,
    "TFT_SHAPE_TENSOR": 1005,
    "TFT_BOOL": 200,
    "TFT_UINT8": 201,
    "TFT_UINT16": 202,
    "TFT_UINT32": 203,
    "TFT_UINT64": 204,
    "TFT_INT8": 205,
    "TFT_INT16": 206,
    "TFT_INT32": 207,
    "TFT_INT64": 208,
    "TFT_HALF": 209,
    "TFT_FLOAT": 210,
    "TFT_DOUBLE": 211,
    "TFT_BFLOAT16": 215,
    "TFT_COMPLEX64": 212,
    "TFT_COMPLEX128": 213,
    "TFT_STRING": 214,
    "TFT_DATASET": 10102,
    "TFT_RAGGED": 10103,
    "TFT_ITERATOR": 10104,
    "TFT_MUTEX_LOCK": 10202,
    "TFT_LEGACY_VARIANT": 10203,
}

# Scalar field types: the names of FieldDescriptorProto's TYPE_* values.
_T = {
    "string": "TYPE_STRING",
    "bytes": "TYPE_BYTES",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "float": "TYPE_FLOAT",
    "double": "TYPE_DOUBLE",
    "bool": "TYPE_BOOL",
}

# message name -> [(field, number, type, repeated, oneof index or None)]
# A type that is not a scalar names a message (".tensorflow.X") or enum ("enum:.tensorflow.X").
_Field = tuple[str, int, str, bool, int | None]
_MESSAGES: dict[str, list[_Field]] = {
    "TensorShapeProto": [
        ("dim", 2, ".tensorflow.TensorShapeProto.Dim", True, None),
        ("unknown_rank", 3, "bool", False, None),
    ],
    "TensorShapeProto.Dim": [("size", 1, "int64", False, None), ("name", 2, "string", False, None)],
    "ResourceHandleProto": [
        ("device", 1, "string", False, None),
        ("container", 2, "string", False, None),
        ("name", 3, "string", False, None),
        ("hash_code", 4, "uint64", False, None),
        ("maybe_type_name", 5, "string", False, None),
        ("dtypes_and_shapes", 6, ".tensorflow.ResourceHandleProto.DtypeAndShape", True, None),
    ],
    "ResourceHandleProto.DtypeAndShape": [
        ("dtype", 1, "enum:.tensorflow.DataType", False, None),
        ("shape", 2, ".tensorflow.TensorShapeProto", False, None),
    ],
    "TensorProto": [
        ("dtype", 1, "enum:.tensorflow.DataType", False, None),
        ("tensor_shape", 2, ".tensorflow.TensorShapeProto", False, None),
        ("version_number", 3, "int32", False, None),
        ("tensor_content", 4, "bytes", False, None),
        ("half_val", 13, "int32", True, None),
        ("float_val", 5, "float", True, None),
        ("double_val", 6, "double", True, None),
        ("int_val", 7, "int32", True, None),
        ("string_val", 8, "bytes", True, None),
        ("scomplex_val", 9, "float", True, None),
        ("int64_val", 10, "int64", True, None),
        ("bool_val", 11, "bool", True, None),
        ("dcomplex_val", 12, "double", True, None),
        ("resource_handle_val", 14, ".tensorflow.ResourceHandleProto", True, None),
        ("variant_val", 15, ".tensorflow.VariantTensorDataProto", True, None),
        ("uint32_val", 16, "uint32", True, None),
        ("uint64_val", 17, "uint64", True, None),
        ("float8_val", 18, "bytes", False, None),
    ],
    "VariantTensorDataProto": [
        ("type_name", 1, "string", False, None),
        ("metadata", 2, "bytes", False, None),
        ("tensors", 3, ".tensorflow.TensorProto", True, None),
    ],
    "AttrValue": [
        ("s", 2, "bytes", False, 0),
        ("i", 3, "int64", False, 0),
        ("f", 4, "float", False, 0),
        ("b", 5, "bool", False, 0),
        ("type", 6, "enum:.tensorflow.DataType", False, 0),
        ("shape", 7, ".tensorflow.TensorShapeProto", False, 0),
        ("tensor", 8, ".tensorflow.TensorProto", False, 0),
        ("list", 1, ".tensorflow.AttrValue.ListValue", False, 0),
        ("func", 10, ".tensorflow.NameAttrList", False, 0),
        ("placeholder", 9, "string", False, 0),
    ],
    "AttrValue.ListValue": [
        ("s", 2, "bytes", True, None),
        ("i", 3, "int64", True, None),
        ("f", 4, "float", True, None),
        ("b", 5, "bool", True, None),
        ("type", 6, "enum:.tensorflow.DataType", True, None),
        ("shape", 7, ".tensorflow.TensorShapeProto", True, None),
        ("tensor", 8, ".tensorflow.TensorProto", True, None),
        ("func", 9, ".tensorflow.NameAttrList", True, None),
    ],
    "NameAttrList": [
        ("name", 1, "string", False, None),
        ("attr", 2, ".tensorflow.NameAttrList.AttrEntry", True, None),
    ],
    "NameAttrList.AttrEntry": [
        ("key", 1, "string", False, None),
        ("value", 2, ".tensorflow.AttrValue", False, None),
    ],
    "FullTypeDef": [
        ("type_id", 1, "enum:.tensorflow.FullTypeId", False, None),
        ("args", 2, ".tensorflow.FullTypeDef", True, None),
        ("s", 3, "string", False, 0),
        ("i", 4, "int64", False, 0),
    ],
    "OpDef": [
        ("name", 1, "string", False, None),
        ("input_arg", 2, ".tensorflow.OpDef.ArgDef", True, None),
        ("output_arg", 3, ".tensorflow.OpDef.ArgDef", True, None),
        ("control_output", 20, "string", True, None),
        ("attr", 4, ".tensorflow.OpDef.AttrDef", True, None),
        ("deprecation", 8, ".tensorflow.OpDeprecation", False, None),
        ("summary", 5, "string", False, None),
        ("description", 6, "string", False, None),
        ("is_commutative", 18, "bool", False, None),
        ("is_aggregate", 16, "bool", False, None),
        ("is_stateful", 17, "bool", False, None),
        ("allows_uninitialized_input", 19, "bool", False, None),
        ("is_distributed_communication", 21, "bool", False, None),
    ],
    "OpDef.ArgDef": [
        ("name", 1, "string", False, None),
        ("description", 2, "string", False, None),
        ("type", 3, "enum:.tensorflow.DataType", False, None),
        ("type_attr", 4, "string", False, None),
        ("number_attr", 5, "string", False, None),
        ("type_list_attr", 6, "string", False, None),
        ("handle_data", 7, ".tensorflow.ResourceHandleProto.DtypeAndShape", True, None),
        ("is_ref", 16, "bool", False, None),
        ("experimental_full_type", 17, ".tensorflow.FullTypeDef", False, None),
    ],
    "OpDef.AttrDef": [
        ("name", 1, "string", False, None),
        ("type", 2, "string", False, None),
        ("default_value", 3, ".tensorflow.AttrValue", False, None),
        ("description", 4, "string", False, None),
        ("has_minimum", 5, "bool", False, None),
        ("minimum", 6, "int64", False, None),
        ("allowed_values", 7, ".tensorflow.AttrValue", False, None),
    ],
    "OpDeprecation": [
        ("version", 1, "int32", False, None),
        ("explanation", 2, "string", False, None),
    ],
    "OpList": [("op", 1, ".tensorflow.OpDef", True, None)],
}
_ONEOFS = {"AttrValue": "value", "FullTypeDef": "attr"}
_PACKED = {("TensorProto", "half_val")} | {
    ("AttrValue.ListValue", f) for f in ("i", "f", "b", "type")
}


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    from google.protobuf import descriptor_pb2

    field = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="opmarket/tensorflow_opdef.proto", package=_PKG, syntax="proto3"
    )
    enum = fdp.enum_type.add(name="DataType")
    for dt in DType:
        enum.value.add(name=dt.tf_name, number=dt.value)
    fti = fdp.enum_type.add(name="FullTypeId")
    for name, number in FULL_TYPE_IDS.items():
        fti.value.add(name=name, number=number)

    protos: dict[str, descriptor_pb2.DescriptorProto] = {}
    for full in _MESSAGES:  # parents are listed before their nested messages
        parent, _, leaf = full.rpartition(".")
        container = protos[parent].nested_type if parent else fdp.message_type
        protos[full] = container.add(name=leaf)
    for full, fields in _MESSAGES.items():
        msg = protos[full]
        if full in _ONEOFS:
            msg.oneof_decl.add(name=_ONEOFS[full])
        if full.endswith("AttrEntry"):
            msg.options.map_entry = True
        for name, number, ftype, repeated, oneof in fields:
            f = msg.field.add(name=name, number=number, json_name=name)
            f.label = field.LABEL_REPEATED if repeated else field.LABEL_OPTIONAL
            if ftype in _T:
                f.type = field.Type.Value(_T[ftype])
            elif ftype.startswith("enum:"):
                f.type = field.TYPE_ENUM
                f.type_name = ftype[len("enum:") :]
            else:
                f.type = field.TYPE_MESSAGE
                f.type_name = ftype
            if oneof is not None:
                f.oneof_index = oneof
            if (full, name) in _PACKED:
                f.options.packed = True
    return fdp


@cache
def messages() -> dict[str, Any]:
    """Message classes by name: ``OpDef``, ``OpList``, ``AttrValue``, ``TensorProto``, ..."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    out: dict[str, Any] = {}
    for full in _MESSAGES:
        desc = pool.FindMessageTypeByName(f"{_PKG}.{full}")
        out[full] = message_factory.GetMessageClass(desc)
    return out
