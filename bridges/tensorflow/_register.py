"""opmarket ops and kernels as TensorFlow ops and kernels, registered through TensorFlow's C
op and kernel API by the shim; the Python side of the shim's callbacks (shape functions and
Python-bodied kernels)."""

from __future__ import annotations

import atexit
import ctypes
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opmarket._bridge import (
    BridgeError,
    KernelPlan,
    bridged_ops,
    c_array,
    flatten_outputs,
    group_inputs,
    output_shapes,
    prepare,
    readonly_array,
    registry,
)
from opmarket.sdk import (
    DType,
    InvalidArgumentError,
    KernelSpec,
    NotFoundError,
    OpDef,
    OpmarketError,
    Shape,
    as_dtype,
)
from opmarket.tensorflow import _attrs, _gpu
from opmarket.tensorflow._build import shim
from opmarket.tensorflow._callbacks import (
    COMPUTE_CB,
    CREATE_CB,
    DELETE_CB,
    MAX_DIMS,
    SHAPE_CB,
    TF_INTERNAL,
    TF_INVALID_ARGUMENT,
    TF_NOT_FOUND,
    TF_OK,
    TensorInfo,
    hinted,
)
from opmarket.tensorflow._labels import labelled_name, targets

__all__ = [
    "OpRecord",
    "ensure_op",
    "register_all",
    "register_derived_op",
    "registered",
]


@dataclass
class OpRecord:
    """An opmarket op as TensorFlow knows it: registered by opmarket (``own``) or TensorFlow's
    own op of the same name and definition."""

    op_def: OpDef
    own: bool
    kernels: list[KernelPlan] = field(default_factory=list)
    #: an op the bridge derives from an opmarket op (a gradient op), not an opmarket op
    derived: bool = False
    #: label -> the op eager calls with that label run (``_labels.labelled_name``)
    labelled: dict[str, str] = field(default_factory=dict)


_lock = threading.RLock()
_records: dict[str, OpRecord] = {}
#: A kernel's body: the flat input arrays and the node's attrs in, the flat outputs out.
Runner = Callable[[list[np.ndarray[Any, Any]], dict[str, Any]], list[Any]]
#: A kernel's body for one node's attrs (made when TensorFlow creates the kernel): the flat
#: input arrays in, the flat outputs out.
Body = Callable[[list[np.ndarray[Any, Any]]], list[Any]]
#: What a kernel slot makes a body from: the node's attrs.
MakeBody = Callable[[dict[str, Any]], Body]
#: A shape function: the input shapes and the attrs known, each output's shape (or None).
ShapeFn = Callable[[list[Shape], dict[str, Any]], "Sequence[Shape] | None"]

_shape_slots: list[tuple[OpDef, ShapeFn]] = []
_kernel_slots: list[tuple[OpDef, MakeBody]] = []
_instances: dict[int, tuple[OpDef, Body]] = {}
_handles = itertools.count(1)
_callbacks: tuple[Any, ...] = ()


def registered() -> Mapping[str, OpRecord]:
    """The ops bridged so far, by name."""
    return dict(_records)


# --- the callbacks ----------------------------------------------------------------------------


def _status_fail(status: int, code: int, message: str) -> None:
    shim().TF_SetStatus(ctypes.c_void_p(status), code, message.encode())


def _shape_cb(slot: int, ctx: int, status: int) -> None:
    try:
        op, shape_fn = _shape_slots[slot]
        lib = shim()
        n = lib.opm_tf_num_inputs(ctypes.c_void_p(ctx))
        dims = (ctypes.c_int64 * MAX_DIMS)()
        shapes: list[Shape] = []
        for i in range(n):
            rank = lib.opm_tf_input_shape(
                ctypes.c_void_p(ctx), i, dims, MAX_DIMS, ctypes.c_void_p(status)
            )
            shapes.append(
                None
                if rank < 0
                else tuple(None if dims[k] < 0 else int(dims[k]) for k in range(rank))
            )
        attrs: dict[str, Any] = {}
        attrs.update(hinted(op.name))
        complete = True
        for a in op.attrs:
            if a.name in attrs:
                continue
            if a.type == "type":
                t = lib.opm_tf_shape_attr_type(ctypes.c_void_p(ctx), a.name.encode())
                if t > 0:
                    attrs[a.name] = DType(t)
                    continue
            complete = False
        try:
            out = shape_fn(shapes, attrs)
        except (InvalidArgumentError, KeyError, TypeError, IndexError) as exc:
            if complete:
                _status_fail(status, TF_INVALID_ARGUMENT, str(exc))
            return  # attrs the C API cannot read: the outputs stay unknown
        for i, shape in enumerate(out or ()):
            if shape is None:
                continue
            arr = (ctypes.c_int64 * max(len(shape), 1))(*[-1 if d is None else d for d in shape])
            lib.opm_tf_set_output_shape(
                ctypes.c_void_p(ctx), i, len(shape), arr, ctypes.c_void_p(status)
            )
    except Exception as exc:  # an exception must not cross into TensorFlow
        _status_fail(status, TF_INTERNAL, f"opmarket shape function: {exc!r}")


def _create_cb(slot: int, ctx: int) -> int:
    lib = shim()
    try:
        op, make = _kernel_slots[slot]
        status = lib.TF_NewStatus()
        try:
            buf = lib.opm_tf_node_def(ctypes.c_void_p(ctx), ctypes.c_void_p(status))
            if lib.TF_GetCode(ctypes.c_void_p(status)) != TF_OK:
                raise BridgeError(lib.TF_Message(ctypes.c_void_p(status)).decode())
            data = ctypes.string_at(
                lib.opm_tf_buffer_data(ctypes.c_void_p(buf)),
                lib.opm_tf_buffer_length(ctypes.c_void_p(buf)),
            )
            lib.TF_DeleteBuffer(ctypes.c_void_p(buf))
        finally:
            lib.TF_DeleteStatus(ctypes.c_void_p(status))
        body = make(_attrs.node_def_attrs(op, data))
        handle = next(_handles)
        _instances[handle] = (op, body)
        return handle
    except Exception as exc:
        lib.opm_tf_construction_failure(
            ctypes.c_void_p(ctx), TF_INTERNAL, f"opmarket: {exc}".encode()
        )
        return 0


def _code_for(exc: BaseException) -> int:
    if isinstance(exc, InvalidArgumentError):
        return TF_INVALID_ARGUMENT
    if isinstance(exc, NotFoundError):
        return TF_NOT_FOUND
    return TF_INTERNAL


def _compute_cb(handle: int, ctx: int) -> None:
    lib = shim()
    c = ctypes.c_void_p(ctx)
    try:
        op, body = _instances[handle]
        n = lib.opm_tf_num_kernel_inputs(c)
        infos = (TensorInfo * max(n, 1))()
        status = lib.TF_NewStatus()
        try:
            # The kernel reads TensorFlow's input memory in place (read-only views), so the
            # inputs are released only after the outputs are copied out.
            if lib.opm_tf_inputs(c, infos, n, ctypes.c_void_p(status)) != 0:
                raise BridgeError(lib.TF_Message(ctypes.c_void_p(status)).decode())
            arrays: list[Any] = []
            for info in infos[:n]:
                npdt = DType(info.dtype).numpy
                if npdt is None:
                    raise BridgeError(
                        f"{op.name}: a Python kernel cannot take "
                        f"{DType(info.dtype).spec_name} tensors"
                    )
                arrays.append(readonly_array(info.data, info.dims[: info.ndim], npdt))
            for i, value in enumerate(body(arrays)):
                arr = c_array(value)
                dims = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
                lib.opm_tf_set_output(
                    c,
                    i,
                    as_dtype(arr.dtype).value,
                    dims,
                    arr.ndim,
                    arr.ctypes.data_as(ctypes.c_void_p),
                    arr.nbytes,
                    ctypes.c_void_p(status),
                )
                if lib.TF_GetCode(ctypes.c_void_p(status)) != TF_OK:
                    raise BridgeError(lib.TF_Message(ctypes.c_void_p(status)).decode())
        finally:
            lib.opm_tf_release_inputs(infos, n)
            lib.TF_DeleteStatus(ctypes.c_void_p(status))
    except Exception as exc:
        message = str(exc)
        lib.opm_tf_failure(c, _code_for(exc), message.encode())


def _delete_cb(handle: int) -> None:
    _instances.pop(handle, None)


def _install_callbacks() -> None:
    global _callbacks
    if _callbacks:
        return
    lib = shim()
    lib.TF_Message.restype = ctypes.c_char_p
    lib.TF_NewStatus.restype = ctypes.c_void_p
    lib.opm_tf_node_def.restype = ctypes.c_void_p
    lib.opm_tf_buffer_data.restype = ctypes.c_void_p
    lib.opm_tf_buffer_length.restype = ctypes.c_uint64
    lib.opm_tf_input_shape.restype = ctypes.c_int64
    lib.opm_tf_num_inputs.restype = ctypes.c_int64
    lib.opm_tf_set_output.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_uint64,
        ctypes.c_void_p,
    ]
    cbs = (
        SHAPE_CB(_shape_cb),
        CREATE_CB(_create_cb),
        COMPUTE_CB(_compute_cb),
        DELETE_CB(_delete_cb),
    )
    lib.opm_tf_set_callbacks(*cbs)
    _callbacks = cbs
    # Kernels TensorFlow still holds at exit are dropped without calling back.
    atexit.register(lambda: lib.opm_tf_set_callbacks(None, None, None, None))


# --- registration -----------------------------------------------------------------------------


def _specs(items: Any) -> Any:
    arr = (ctypes.c_char_p * (len(items) + 1))(*[s.encode() for s in items], None)
    return arr


def _check_status(lib: ctypes.CDLL, status: int, what: str) -> None:
    if lib.TF_GetCode(ctypes.c_void_p(status)) != TF_OK:
        raise BridgeError(f"{what}: {lib.TF_Message(ctypes.c_void_p(status)).decode()}")


def _prepared(op: OpDef, spec: KernelSpec) -> MakeBody:
    """A node's body: the registry's prepared call of ``spec`` for the node's attrs, made on
    its first run (one per TensorFlow kernel instance: the call path's one cache)."""

    def make(attrs: dict[str, Any]) -> Body:
        prepared: list[Any] = []

        def body(arrays: list[np.ndarray[Any, Any]]) -> list[Any]:
            if not prepared:
                prepared.append(prepare(op, attrs, spec.device, spec.label, kernel=spec))
            result = prepared[0](*group_inputs(op, attrs, arrays))
            return flatten_outputs(op, result)

        return body

    return make


def _opmarket_shapes(op: OpDef) -> ShapeFn:
    return lambda shapes, attrs: output_shapes(op, shapes, attrs)


def _define(name: str, op: OpDef, shape_slot: int) -> None:
    """Register op ``name`` with TensorFlow, with ``op``'s inputs, outputs, attrs and flags."""
    lib = shim()
    flags = (
        (1 if op.is_stateful else 0)
        | (2 if op.is_commutative else 0)
        | (4 if op.is_aggregate else 0)
        | (8 if op.allows_uninitialized_input else 0)
    )
    status = lib.TF_NewStatus()
    try:
        lib.opm_tf_register_op(
            name.encode(),
            _specs([a.spec for a in op.inputs]),
            _specs([a.spec for a in op.outputs]),
            _specs([a.spec for a in op.attrs]),
            flags,
            shape_slot,
            ctypes.c_void_p(status),
        )
        _check_status(lib, status, f"TensorFlow refused op {name}")
    finally:
        lib.TF_DeleteStatus(ctypes.c_void_p(status))


def _register_op(op: OpDef, derived: tuple[ShapeFn, Runner] | None = None) -> OpRecord:
    slot = -1
    if derived is not None or registry().shape_fn(op.name) is not None:
        slot = len(_shape_slots)
        _shape_slots.append((op, derived[0] if derived else _opmarket_shapes(op)))
    _define(op.name, op, slot)
    record = OpRecord(op, own=True)
    if derived is None:
        _register_kernels(record, slot)
    else:
        _register_runner(op, derived[1])
    return record


def _register_runner(op: OpDef, run: Runner) -> None:
    """One CPU kernel for every type: ``run`` in Python."""
    lib = shim()
    slot = len(_kernel_slots)
    _kernel_slots.append((op, lambda attrs: lambda arrays: run(arrays, attrs)))
    status = lib.TF_NewStatus()
    try:
        lib.opm_tf_register_python_kernel(
            f"{op.name}:opmarket:-:".encode(),
            op.name.encode(),
            b"CPU",
            slot,
            (ctypes.c_char_p * 1)(),
            (ctypes.c_int32 * 1)(),
            0,
            b"",
            0,
            ctypes.c_void_p(status),
        )
        _check_status(lib, status, f"TensorFlow refused the kernel of {op.name}")
    finally:
        lib.TF_DeleteStatus(ctypes.c_void_p(status))


def register_derived_op(op: OpDef, shapes: ShapeFn, run: Runner) -> OpRecord:
    """Register ``op``, an op the bridge derives from an opmarket op (its gradient op), with
    TensorFlow once: ``shapes`` its shape function, ``run`` its CPU kernel for every type."""
    with _lock:
        record = _records.get(op.name)
        if record is None:
            _install_callbacks()
            record = _records[op.name] = _register_op(op, (shapes, run))
            record.derived = True
        return record


def _register_kernels(record: OpRecord, shape_slot: int) -> None:
    from opmarket.tensorflow import _native

    lib = shim()
    op = record.op_def
    plans = _native.plans(op.name)
    for label in sorted({p.label for p in plans if p.label}):
        _define_label(record, label, shape_slot)
    for plan in plans:
        slot = _take_slot(op, plan.spec)
        pairs = targets(op.name, plan.label, record.labelled)
        # TensorFlow's C builder takes one dtype per constraint: one registration per
        # combination of the kernel's allowed types.
        axes = [[(attr, t) for t in types] for attr, types in plan.spec.constraints]
        for combo, (tf_op, label) in itertools.product(itertools.product(*axes), pairs):
            names = (ctypes.c_char_p * max(len(combo), 1))(*[a.encode() for a, _ in combo])
            dtypes = (ctypes.c_int32 * max(len(combo), 1))(*[t.value for _, t in combo])
            types = ",".join(f"{a}={t.spec_name}" for a, t in combo)
            kernel_name = f"{tf_op}:{plan.spec.name}:{label or '-'}:{types}"
            status = lib.TF_NewStatus()
            try:
                if plan.native:
                    _native.register_kernel(
                        kernel_name,
                        (tf_op, label),
                        plan,
                        slot,
                        names=names,
                        dtypes=dtypes,
                        n=len(combo),
                        status=status,
                    )
                else:
                    lib.opm_tf_register_python_kernel(
                        kernel_name.encode(),
                        tf_op.encode(),
                        plan.spec.device.encode(),
                        slot,
                        names,
                        dtypes,
                        len(combo),
                        label.encode(),
                        plan.priority,
                        ctypes.c_void_p(status),
                    )
                _check_status(lib, status, f"TensorFlow refused kernel {plan.spec.name} of {tf_op}")
            finally:
                lib.TF_DeleteStatus(ctypes.c_void_p(status))
        record.kernels.append(plan)
    # GPU kernels: a companion's device entry, run by the shim (synchronizing)
    _gpu.register(
        op,
        record.labelled,
        lambda spec: _take_slot(op, spec),
        lambda label: _define_label(record, label, shape_slot),
    )


def _take_slot(op: OpDef, spec: KernelSpec) -> int:
    """A create slot of the shim for kernel ``spec`` (native kernels take one too)."""
    _kernel_slots.append((op, _prepared(op, spec)))
    return len(_kernel_slots) - 1


def _define_label(record: OpRecord, label: str, shape_slot: int) -> None:
    """The op eager calls with ``label`` run, defined unless its name is taken (then eager
    calls with the label run a function)."""
    name = labelled_name(record.op_def.name, label)
    if _tf_op_def(name) is None:
        _define(name, record.op_def, shape_slot)
        record.labelled[label] = name


def _tf_op_def(name: str) -> Any:
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(name)


def ensure_op(op: OpDef) -> OpRecord:
    """``op`` as a TensorFlow op: registered now if TensorFlow has no op of its name, mapped
    to TensorFlow's own when it has one that agrees; BridgeError when it disagrees."""
    with _lock:
        record = _records.get(op.name)
        if record is not None:
            if record.own and _attrs.signature(record.op_def) != _attrs.signature(op):
                raise BridgeError(
                    f"op {op.name} was registered with TensorFlow in this process with "
                    "another definition; TensorFlow cannot replace an op (restart the process)"
                )
            return record
        _install_callbacks()
        theirs = _tf_op_def(op.name)
        if theirs is not None:
            problem = _attrs.disagreement(op, theirs)
            if problem:
                raise BridgeError(
                    f"op {op.name} clashes with TensorFlow's own {op.name}: "
                    f"{problem}; rename it (a namespace such as 'Opm>') to "
                    "bridge it"
                )
            record = OpRecord(op, own=False)
        else:
            record = _register_op(op)
        _records[op.name] = record
        return record


def register_all() -> list[str]:
    """Bridge every installed op; the clashes with TensorFlow's ops, one message each."""
    own, builtin = bridged_ops()
    problems = []
    for op in [*builtin, *own]:
        try:
            ensure_op(op)
        except (BridgeError, OpmarketError) as exc:
            problems.append(str(exc))
    return problems
