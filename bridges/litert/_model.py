"""The ``.tflite`` model file as the LiteRT bridge reads it (ai-edge-litert's flatbuffer
schema module): its custom ops, their attrs from each node's custom options, and the
rewrite that gives each distinct attr set of one op a custom code of its own."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from opmarket._bridge import normalize_attr
from opmarket.sdk import InvalidArgumentError, OpDef

__all__ = [
    "SCHEMA_TYPES",
    "attr_sets",
    "attrs_from_options",
    "custom_ops_of",
    "input_dtypes",
    "read_model",
    "text",
]

# The flatbuffer schema's TensorType numbers (not LiteRT's element types) to numpy.
SCHEMA_TYPES: dict[int, Any] = {
    0: np.float32,
    1: np.float16,
    2: np.int32,
    3: np.uint8,
    4: np.int64,
    6: np.bool_,
    7: np.int16,
    8: np.complex64,
    9: np.int8,
    10: np.float64,
    11: np.complex128,
    12: np.uint64,
    15: np.uint32,
    16: np.uint16,
}
_CUSTOM = 32  # BuiltinOperator.CUSTOM


def read_model(content: bytes) -> Any:
    """A ``.tflite`` model as ai-edge-litert's flatbuffer schema objects (``ModelT``)."""
    from ai_edge_litert import schema_py_generated as schema

    return schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(content, 0))


def text(value: Any) -> str:
    """A flatbuffer string (bytes) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _custom_code(code: Any) -> str | None:
    """The custom code of an operator code; None for a builtin operator."""
    builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
    if builtin == _CUSTOM and code.customCode is not None:
        return text(code.customCode)
    return None


def custom_ops_of(content: bytes) -> list[tuple[str, int]]:
    """The (name, version) of every custom op a ``.tflite`` model uses."""
    found = []
    for code in read_model(content).operatorCodes or []:
        name = _custom_code(code)
        if name is not None:
            found.append((name, int(code.version or 1)))
    return sorted(set(found))


def input_dtypes(content: bytes) -> dict[str, list[tuple[np.dtype[Any], ...]]]:
    """Each custom code's distinct tuples of input dtypes over the nodes that use it (a
    ``.tflite`` model's tensor types are static)."""
    model = read_model(content)
    codes = list(model.operatorCodes or [])
    found: dict[str, list[tuple[np.dtype[Any], ...]]] = {}
    for graph in model.subgraphs or []:
        for node in graph.operators or []:
            name = _custom_code(codes[node.opcodeIndex])
            if name is None:
                continue
            inputs = [] if node.inputs is None else [int(i) for i in node.inputs]
            dtypes = tuple(_dtype_or_object(graph.tensors[i].type) for i in inputs if i >= 0)
            rows = found.setdefault(name, [])
            if dtypes not in rows:
                rows.append(dtypes)
    return found


def _dtype_or_object(number: Any) -> np.dtype[Any]:
    """As _numpy_of_schema, with object for a type opmarket has no dtype for (a string):
    its node keeps the Python path, which says so when it runs."""
    try:
        return _numpy_of_schema(number)
    except InvalidArgumentError:
        return np.dtype(object)


def _numpy_of_schema(number: Any) -> np.dtype[Any]:
    if int(number) not in SCHEMA_TYPES:
        raise InvalidArgumentError(f"LiteRT tensor type {number} has no opmarket dtype")
    found: np.dtype[Any] = np.dtype(SCHEMA_TYPES[int(number)])
    return found


def attrs_from_options(op: OpDef, options: bytes) -> dict[str, Any]:
    """A custom op's options as the converter writes them (a flexbuffer map of the node's
    attrs) in opmarket's form (``opmarket._bridge.normalize_attr``)."""
    if not options:
        return {}
    from flatbuffers import flexbuffers

    raw = flexbuffers.Loads(options)
    if not isinstance(raw, dict):
        raise InvalidArgumentError(f"{op.name}: custom options are not a map of attrs")
    attrs: dict[str, Any] = {}
    for a in op.attrs:
        if a.name not in raw:
            continue
        value = raw[a.name]
        if a.base_type == "type":  # the converter writes LiteRT's tensor type numbers
            value = [_numpy_of_schema(v) for v in value] if a.is_list else _numpy_of_schema(value)
        attrs[a.name] = normalize_attr(op, a.name, value)
    return attrs


def attr_sets(content: bytes) -> tuple[bytes, list[tuple[str, str, int, bytes]]]:
    """The model with a custom code of its own for each custom op's distinct custom options
    (``Opm>ZeroOut``, then ``Opm>ZeroOut#1``, ...), and for each: (custom code, op name,
    version, options). LiteRT's custom-op callbacks see their registration, not the node:
    this is how nodes of one op with different attrs each run with their own. The model is
    rewritten only when some op has more than one attr set."""
    model = read_model(content)
    codes = list(model.operatorCodes or [])
    # The nodes of each custom operator code, grouped by their custom options.
    uses: dict[int, dict[bytes, list[Any]]] = {}
    for graph in model.subgraphs or []:
        for node in graph.operators or []:
            if _custom_code(codes[node.opcodeIndex]) is not None:
                options = b"" if node.customOptions is None else bytes(node.customOptions)
                uses.setdefault(node.opcodeIndex, {}).setdefault(options, []).append(node)
    sets: list[tuple[str, str, int, bytes]] = []
    for index, code in enumerate(list(codes)):
        name = _custom_code(code)
        if name is None:
            continue
        version = int(code.version or 1)
        for k, (options, nodes) in enumerate(uses.get(index, {b"": []}).items()):
            if k == 0:
                sets.append((name, name, version, options))
                continue
            renamed = copy.copy(code)
            renamed.customCode = f"{name}#{k}".encode()
            codes.append(renamed)
            for node in nodes:
                node.opcodeIndex = len(codes) - 1
            sets.append((f"{name}#{k}", name, version, options))
    if len(codes) == len(model.operatorCodes or []):
        return content, sets
    import flatbuffers

    model.operatorCodes = codes
    builder = flatbuffers.Builder(len(content) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output()), sets
