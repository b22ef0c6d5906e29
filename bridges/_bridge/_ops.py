"""An opmarket op as a framework sees it: parameters, output shapes, kernels, gradients.

A :class:`BridgeOp` is built from an OpDef. Its parameters follow ``opmarket.ops``: inputs
positional, attrs inferred from the inputs absent, a type attr that cannot be inferred
(Bitcast's ``type``) a keyword-only dtype, every other attr keyword-only with its default.
Output shapes come from the op's shape function; an output whose shape depends on the
input values (an unknown dim for known inputs) cannot be traced, and says so.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from opmarket._bridge import _registry
from opmarket._bridge._shapes import output_shapes
from opmarket.sdk import (
    DType,
    GradientOp,
    InvalidArgumentError,
    NotFoundError,
    OpDef,
    format_shape,
)
from opmarket.sdk.torch_schema import (
    Param,
    ParamKind,
    framework_namespace,
    parameters,
    unsupported,
)

__all__ = [
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

_Array = np.ndarray[Any, Any]
Dim = Any  # an int, or a framework's symbolic int (torch.SymInt) while tracing


def require_framework(module: str, extra: str) -> None:
    """ImportError naming the extra to install when ``module`` cannot be imported."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"opmarket.{extra} needs {module}, which cannot be imported ({exc}): "
            f"pip install 'opmarket[{extra}]'"
        ) from None


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """One output's shape (dims may be symbolic while tracing) and numpy dtype."""

    shape: tuple[Dim, ...]
    dtype: np.dtype[Any]


def c_array(value: Any) -> _Array:
    """``value`` as a C-contiguous numpy array of its own shape, copied only when it is not
    one already. Unlike ``np.ascontiguousarray``, a 0-d array stays 0-d: what every bridge
    uses on a kernel's outputs."""
    array = np.asarray(value)
    return array if array.flags.c_contiguous else array.copy(order="C")


def freeze_attrs(attrs: Mapping[str, Any]) -> Any:
    """Bound attrs as a hashable key; values keep their types (1 and 1.0 differ)."""

    def one(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return (type(v), tuple(one(x) for x in v))
        return (type(v), v)

    return tuple(sorted((k, one(v)) for k, v in attrs.items()))


class BridgeOp:
    """One op, described for a framework bridge; see the module's docstring."""

    def __init__(self, op_def: OpDef) -> None:
        self.op_def = op_def
        self.name = op_def.name
        self.python_name = op_def.python_name
        #: The framework namespace: the op's namespace in lower snake case (``opm``),
        #: ``opmarket`` for an op without one.
        self.namespace = framework_namespace(op_def)
        self.input_names, self.params = parameters(op_def)
        self.unsupported = unsupported(op_def)

    def check_supported(self, framework: str) -> None:
        """NotFoundError saying why ``framework`` cannot run this op, if it cannot."""
        if _registry.builtin(self.name):
            raise NotFoundError(
                f"{self.name} is one of opmarket's built-in graph ops; {framework} "
                "has its own, use that"
            )
        if self.unsupported:
            raise NotFoundError(f"{self.name} cannot run in {framework}: {self.unsupported}")

    def __repr__(self) -> str:
        return f"<BridgeOp {self.name}>"

    # --- attrs -----------------------------------------------------------------------------

    def bind(self, dtypes: Sequence[np.dtype[Any]], given: Mapping[str, Any]) -> dict[str, Any]:
        """Every attr for inputs of ``dtypes`` and the keyword values ``given`` (by Python
        parameter name): inferred, defaulted and checked by opmarket's own rules."""
        by_py = {p.name: p.attr.name for p in self.params}
        attrs: dict[str, Any] = {}
        for key, value in given.items():
            name = by_py.get(key)
            if name is None:
                raise InvalidArgumentError(
                    f"{self.name} has no attr {key!r} (it takes {', '.join(by_py) or 'none'})"
                )
            attrs[name] = value
        stand_ins = [np.empty(0, dtype=d) for d in dtypes]
        return _registry.bind(self.op_def, stand_ins, attrs)

    def bind_attrs(
        self, dtypes: Sequence[np.dtype[Any]], attrs: Mapping[str, Any]
    ) -> dict[str, Any]:
        """As :meth:`bind`, for attrs given by their own names (a node's attrs in a saved
        model), inferred ones included (they must agree with ``dtypes``)."""
        stand_ins = [np.empty(0, dtype=d) for d in dtypes]
        return _registry.bind(self.op_def, stand_ins, attrs)

    # --- shapes ----------------------------------------------------------------------------

    def output_dtypes(self, attrs: Mapping[str, Any]) -> list[np.dtype[Any]]:
        """The numpy dtype of each output under bound ``attrs``."""
        out = []
        for arg in self.op_def.outputs:
            dtype = attrs[arg.type_attr] if arg.type_attr else arg.type
            npdt = DType(dtype).numpy
            if npdt is None:
                raise InvalidArgumentError(
                    f"{self.name}: output {arg.name!r} has dtype "
                    f"{DType(dtype).spec_name}, which has no array type"
                )
            out.append(npdt)
        return out

    def output_specs(
        self,
        shapes: Sequence[tuple[Dim, ...]],
        attrs: Mapping[str, Any],
        *,
        allow_unknown: bool = False,
    ) -> list[OutputSpec]:
        """Each output's shape and dtype from the shape function, for inputs of ``shapes``.

        InvalidArgumentError when the op has no shape function or an output's shape depends on
        the input values (unless ``allow_unknown``: such dims are then None)."""
        found = output_shapes(self.op_def, [tuple(s) for s in shapes], attrs)
        if found is None:
            raise InvalidArgumentError(
                f"{self.name} has no shape function, so its output shapes are unknown until "
                "it runs: it cannot be traced (jax.jit, torch.compile); register one with "
                "@shape_fn"
            )
        result = []
        for arg, shape, dtype in zip(
            self.op_def.outputs, found, self.output_dtypes(attrs), strict=True
        ):
            if shape is None or any(d is None for d in shape):
                if not allow_unknown:
                    ins = ", ".join(format_shape(tuple(int(d) for d in s)) for s in shapes)
                    raise InvalidArgumentError(
                        f"{self.name}: output {arg.name!r} has shape "
                        f"{format_shape(shape)} for inputs {ins}: its shape depends on the "
                        "input values, which tracing (jax.jit, torch.compile) does not know"
                    )
                if shape is None:
                    raise InvalidArgumentError(
                        f"{self.name}: the rank of output {arg.name!r} depends on the input values"
                    )
            result.append(OutputSpec(tuple(shape), dtype))
        return result

    # --- kernels and gradients ----------------------------------------------------------

    def compute(
        self,
        inputs: Sequence[_Array],
        attrs: Mapping[str, Any],
        *,
        device: str = "CPU",
        label: str = "",
    ) -> list[_Array]:
        """Run the op's kernel for ``device`` on numpy arrays; one array per output."""
        return self.runner(attrs, device, label)(inputs)

    def runner(
        self, attrs: Mapping[str, Any], device: str = "CPU", label: str = "", kernel: Any = None
    ) -> Callable[[Sequence[_Array]], list[_Array]]:
        """The registry's prepared call for bound ``attrs`` (``opmarket.registry.prepare``:
        kernel chosen and created once, shared with ``opmarket.ops``) as a function of numpy
        arrays that returns one array per output. ``kernel`` runs that KernelSpec instead of
        the one dispatch chooses. Not cached here: a bridge keeps it in its own call cache."""
        call = _registry.prepare(self.op_def, attrs, device, label, kernel=kernel)
        if len(self.op_def.outputs) == 1:

            def one(arrays: Sequence[_Array]) -> list[_Array]:
                return [call(*arrays)]

            return one

        def several(arrays: Sequence[_Array]) -> list[_Array]:
            out = call(*arrays)
            return list(out) if out is not None else []

        return several

    def kernel(self, attrs: Mapping[str, Any], device: str, label: str = "") -> Any:
        """The KernelSpec dispatch chooses on ``device`` (KernelNotFoundError if none)."""
        return _registry.choose_kernel(self.op_def, attrs, device, label)

    def has_kernel(self, attrs: Mapping[str, Any], device: str, label: str = "") -> bool:
        """Whether some kernel serves ``attrs`` on ``device``."""
        from opmarket.registry import KernelNotFoundError

        try:
            self.kernel(attrs, device, label)
        except KernelNotFoundError:
            return False
        return True

    def is_c_abi(self, attrs: Mapping[str, Any], device: str, label: str = "") -> bool:
        """Whether the kernel chosen for ``attrs`` is a C-ABI plugin's with a native handle."""
        return _registry.native_handle(self.kernel(attrs, device, label)) is not None

    @property
    def differentiable(self) -> bool:
        """Whether a gradient is registered (``not_differentiable`` counts as none)."""
        spec = _registry.registry().gradient(self.name)
        return spec is not None and spec.fn is not None

    def gradient(
        self,
        inputs: Sequence[_Array],
        outputs: Sequence[_Array],
        attrs: Mapping[str, Any],
        grads: Sequence[_Array],
    ) -> list[_Array | None]:
        """The registered gradient: d(loss)/d(input) for each input (None where there is
        none), as arrays of the inputs' shapes and dtypes. NotFoundError without a gradient."""
        spec = _registry.registry().gradient(self.name)
        if spec is None:
            raise NotFoundError(
                f"no gradient is registered for op {self.name!r}; register one with "
                "register_gradient, or mark it not_differentiable"
            )
        if spec.fn is None:
            return [None] * len(inputs)
        forward = GradientOp(self.op_def, tuple(inputs), tuple(outputs), dict(attrs))
        result = spec.fn(forward, *grads)
        items = list(result) if isinstance(result, (list, tuple)) else [result]
        if len(items) != len(inputs):
            raise InvalidArgumentError(
                f"the gradient of {self.name} returned {len(items)} value(s) "
                f"for {len(inputs)} input(s)"
            )
        out: list[_Array | None] = []
        for x, item in zip(inputs, items, strict=True):
            if item is None:
                out.append(None)
                continue
            g = np.asarray(item)
            if g.dtype != x.dtype:
                g = g.astype(x.dtype)
            out.append(c_array(np.broadcast_to(g, x.shape)))
        return out


_ops: dict[OpDef, BridgeOp] = {}


def bridge_op(name: str) -> BridgeOp:
    """The BridgeOp of the registered op ``name`` (NotFoundError if it is not registered)."""
    op_def = _registry.op_def(name)
    if op_def is None:
        raise NotFoundError(f"op {name!r} is not registered (no installed plugin has it)")
    found = _ops.get(op_def)
    if found is None:
        found = _ops[op_def] = BridgeOp(op_def)
    return found


def bridge_ops(*, load: bool = True) -> list[BridgeOp]:
    """Every registered op a framework can carry (built-ins and unsupported ones left out),
    after loading every installed plugin when ``load``."""
    if load:
        _registry.load_all()
    out = []
    for op_def in _registry.registry():
        if _registry.builtin(op_def.name):
            continue
        op = bridge_op(op_def.name)
        if op.unsupported is None:
            out.append(op)
    return out
