"""Shape inference without running: TensorFlow's InferenceContext and common shape functions.

A shape is a tuple of dims or None (unknown rank); a dim is an int or None (unknown). A
shape function takes an :class:`InferenceContext`, checks the input shapes and sets the
output shapes; it raises InvalidArgumentError when the inputs cannot be right.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar, overload

from opmarket.sdk._errors import InvalidArgumentError
from opmarket.sdk._kernel import declare
from opmarket.sdk._opdef import OpDef

__all__ = [
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
]

Dim: TypeAlias = int | None
Shape: TypeAlias = tuple[Dim, ...] | None
ShapeFn: TypeAlias = Callable[["InferenceContext"], None]

F = TypeVar("F", bound=Callable[..., Any])


def format_shape(shape: Shape) -> str:
    """``[2,?]`` for a known rank, ``?`` for an unknown one (TensorFlow's DebugString)."""
    if shape is None:
        return "?"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def parse_shape(text: str) -> Shape:
    """The inverse of :func:`format_shape`: ``"[2,?]"`` -> ``(2, None)``, ``"?"`` -> None."""
    text = text.strip()
    if text == "?":
        return None
    if not (text.startswith("[") and text.endswith("]")):
        raise InvalidArgumentError(f"not a shape: {text!r}")
    body = text[1:-1].strip()
    if not body:
        return ()
    return tuple(None if d.strip() == "?" else int(d) for d in body.split(","))


class InferenceContext:
    """What a shape function sees: input shapes, attrs, and where output shapes go."""

    def __init__(
        self,
        op: OpDef | None,
        input_shapes: Sequence[Shape],
        attrs: Mapping[str, Any] | None = None,
        num_outputs: int | None = None,
    ) -> None:
        self.op = op
        self._inputs = list(input_shapes)
        self._attrs = dict(attrs or {})
        n = num_outputs if num_outputs is not None else (len(op.outputs) if op else 1)
        self._outputs: list[Shape] = [None] * n
        self._set = [False] * n

    # inputs, outputs, attrs
    @property
    def num_inputs(self) -> int:
        """How many input shapes the shape function was given (TensorFlow's num_inputs)."""
        return len(self._inputs)

    @property
    def num_outputs(self) -> int:
        """How many output shapes the shape function is to set (TensorFlow's num_outputs)."""
        return len(self._outputs)

    def input(self, index: int) -> Shape:
        """The shape of input ``index``."""
        if not 0 <= index < len(self._inputs):
            raise InvalidArgumentError(
                f"input index {index} out of range: {len(self._inputs)} inputs"
            )
        return self._inputs[index]

    def set_output(self, index: int, shape: Shape) -> None:
        """Set output ``index``'s shape (TensorFlow's set_output); InvalidArgumentError if
        there is no such output."""
        if not 0 <= index < len(self._outputs):
            raise InvalidArgumentError(
                f"output index {index} out of range: {len(self._outputs)} outputs"
            )
        self._outputs[index] = shape
        self._set[index] = True

    def output(self, index: int) -> Shape:
        """The shape set for output ``index`` so far, None until set (TensorFlow's output);
        InvalidArgumentError if there is no such output."""
        if not 0 <= index < len(self._outputs):
            raise InvalidArgumentError(
                f"output index {index} out of range: {len(self._outputs)} outputs"
            )
        return self._outputs[index]

    @property
    def outputs(self) -> list[Shape]:
        """A copy of every output's shape so far; one not set yet is None (unknown)."""
        return list(self._outputs)

    def get_attr(self, name: str) -> Any:
        """The value of attr ``name``; InvalidArgumentError if the node has none."""
        if name not in self._attrs:
            raise InvalidArgumentError(f"no attr named {name!r}")
        return self._attrs[name]

    # building shapes and dims
    def scalar(self) -> Shape:
        """The shape of a scalar, ``()`` (TensorFlow's Scalar)."""
        return ()

    def vector(self, dim: Dim) -> Shape:
        """A rank-1 shape of ``dim`` elements (TensorFlow's Vector)."""
        return (dim,)

    def matrix(self, rows: Dim, cols: Dim) -> Shape:
        """A rank-2 shape of ``rows`` by ``cols`` (TensorFlow's Matrix)."""
        return (rows, cols)

    def make_shape(self, dims: Sequence[Dim]) -> Shape:
        """A shape of known rank from ``dims``, None for unknown (TensorFlow's MakeShape)."""
        return tuple(dims)

    def unknown(self) -> Shape:
        """A shape of unknown rank."""
        return None

    def unknown_shape_of_rank(self, rank: int) -> Shape:
        """A shape of rank ``rank`` whose dims are all unknown (TensorFlow's UnknownShapeOfRank)."""
        return (None,) * rank

    def unknown_dim(self) -> Dim:
        """A dim of unknown size, None (TensorFlow's UnknownDim)."""
        return None

    # queries
    def rank(self, shape: Shape) -> int | None:
        """The rank of ``shape``, or None when it is unknown (TensorFlow's Rank)."""
        return None if shape is None else len(shape)

    def rank_known(self, shape: Shape) -> bool:
        """Whether ``shape`` has a known rank, whatever its dims (TensorFlow's RankKnown)."""
        return shape is not None

    def dim(self, shape: Shape, index: int) -> Dim:
        """Dim ``index`` of ``shape`` (negative counts from the end); unknown if the rank is."""
        if shape is None:
            return None
        if not -len(shape) <= index < len(shape):
            raise InvalidArgumentError(
                f"dimension index {index} out of range for shape {format_shape(shape)}"
            )
        return shape[index]

    def value(self, dim: Dim) -> int | None:
        """The size ``dim`` stands for, None if unknown (TensorFlow's Value; a dim is its size)."""
        return dim

    def fully_defined(self, shape: Shape) -> bool:
        """Whether ``shape`` has a known rank and every dim known (TensorFlow's FullyDefined)."""
        return shape is not None and all(d is not None for d in shape)

    def num_elements(self, shape: Shape) -> Dim:
        """The element count of ``shape``; None unless fully defined (TensorFlow's NumElements)."""
        if shape is None or any(d is None for d in shape):
            return None
        n = 1
        for d in shape:
            n *= d  # type: ignore[operator]  # all known, checked above
        return n

    # checks
    def with_rank(self, shape: Shape, rank: int) -> Shape:
        """``shape`` as rank ``rank``; InvalidArgumentError if its rank is another."""
        if shape is None:
            return (None,) * rank
        if len(shape) != rank:
            raise InvalidArgumentError(f"Shape must be rank {rank} but is rank {len(shape)}")
        return shape

    def with_rank_at_least(self, shape: Shape, rank: int) -> Shape:
        """``shape``, checked to have rank ``rank`` or more (TensorFlow's WithRankAtLeast).

        InvalidArgumentError if it has fewer dims; an unknown rank passes and stays unknown.
        """
        if shape is not None and len(shape) < rank:
            raise InvalidArgumentError(
                f"Shape must be at least rank {rank} but is rank {len(shape)}"
            )
        return shape

    def with_rank_at_most(self, shape: Shape, rank: int) -> Shape:
        """``shape``, checked to have rank ``rank`` or less (TensorFlow's WithRankAtMost).

        InvalidArgumentError if it has more dims; an unknown rank passes and stays unknown.
        """
        if shape is not None and len(shape) > rank:
            raise InvalidArgumentError(
                f"Shape must be at most rank {rank} but is rank {len(shape)}"
            )
        return shape

    def with_value(self, dim: Dim, value: int) -> Dim:
        """``dim``, known to be ``value`` (TensorFlow's WithValue); InvalidArgumentError if it
        is not."""
        if dim is not None and dim != value:
            raise InvalidArgumentError(f"Dimension must be {value} but is {dim}")
        return value

    def merge_dim(self, a: Dim, b: Dim) -> Dim:
        """The dim that both ``a`` and ``b`` are: the known one, if any (TensorFlow's Merge).

        InvalidArgumentError if both are known and differ.
        """
        if a is None:
            return b
        if b is not None and a != b:
            raise InvalidArgumentError(f"Dimensions must be equal, but are {a} and {b}")
        return a

    def merge(self, a: Shape, b: Shape) -> Shape:
        """The most specific shape compatible with both; InvalidArgumentError if none is."""
        if a is None:
            return b
        if b is None:
            return a
        if len(a) != len(b):
            raise InvalidArgumentError(
                f"Shapes must be equal rank, but are {len(a)} and {len(b)} "
                f"({format_shape(a)} and {format_shape(b)})"
            )
        try:
            return tuple(self.merge_dim(x, y) for x, y in zip(a, b, strict=True))
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"{exc} for shapes {format_shape(a)} and {format_shape(b)}"
            ) from None

    def concatenate(self, a: Shape, b: Shape) -> Shape:
        """``a``'s dims then ``b``'s; unknown rank if either's is (TensorFlow's Concatenate)."""
        return None if a is None or b is None else a + b

    def subshape(self, shape: Shape, start: int, end: int | None = None) -> Shape:
        """Dims ``start`` up to ``end`` of ``shape``, or unknown rank (TensorFlow's Subshape).

        Negative bounds count from the end; bounds outside the rank raise InvalidArgumentError, as
        TensorFlow's do.
        """
        if shape is None:
            return None
        rank = len(shape)
        lo = start + rank if start < 0 else start
        hi = rank if end is None else (end + rank if end < 0 else end)
        if not 0 <= lo <= rank or not 0 <= hi <= rank:
            raise InvalidArgumentError(
                f"Subshape [{start}:{end}] is out of range for shape {format_shape(shape)}"
            )
        return shape[lo : max(lo, hi)]

    # dim arithmetic
    def add(self, a: Dim, b: Dim) -> Dim:
        """``a + b``, unknown if either is (TensorFlow's Add)."""
        return None if a is None or b is None else a + b

    def subtract(self, a: Dim, b: Dim) -> Dim:
        """``a - b``, unknown if either is (TensorFlow's Subtract); InvalidArgumentError if
        ``b > a``."""
        if a is None or b is None:
            return None
        if b > a:
            raise InvalidArgumentError(f"Negative dimension size from subtracting {b} from {a}")
        return a - b

    def multiply(self, a: Dim, b: Dim) -> Dim:
        """``a * b``, unknown if either is, but 0 when either is 0 (TensorFlow's Multiply)."""
        if a == 0 or b == 0:
            return 0
        return None if a is None or b is None else a * b

    def divide(self, a: Dim, b: Dim, evenly: bool = False) -> Dim:
        """``a // b``, unknown if either is (TensorFlow's Divide).

        InvalidArgumentError if ``b`` is not positive, or, with ``evenly``, if it does not
        divide ``a``.
        """
        if b is None:
            return None
        if b <= 0:
            raise InvalidArgumentError(f"Divisor must be positive but is {b}")
        if a is None:
            return None
        if evenly and a % b:
            raise InvalidArgumentError(f"Dimension size {a} must be evenly divisible by {b}")
        return a // b

    def finish(self) -> list[Shape]:
        """The output shapes; outputs the function did not set are of unknown shape."""
        return list(self._outputs)


# --- common shape functions ---------------------------------------------------------------


def unchanged(c: InferenceContext) -> None:
    """Output 0 has input 0's shape (TensorFlow's UnchangedShape)."""
    c.set_output(0, c.input(0))


def scalar_shape(c: InferenceContext) -> None:
    """Output 0 is a scalar (TensorFlow's ScalarShape); other outputs stay unknown."""
    c.set_output(0, ())


def unknown_shape(c: InferenceContext) -> None:
    """Every output is of unknown shape: nothing is inferred (TensorFlow's UnknownShape)."""
    for i in range(c.num_outputs):
        c.set_output(i, None)


def merge_all_inputs(c: InferenceContext) -> None:
    """All inputs have one shape, which the output has (AddN's shape function)."""
    out: Shape = None
    for i in range(c.num_inputs):
        out = c.merge(out, c.input(i))
    c.set_output(0, out)


def broadcast_shape(a: Shape, b: Shape) -> Shape:
    """numpy's broadcasting of two shapes; InvalidArgumentError when they do not broadcast."""
    if a is None or b is None:
        return None
    out: list[Dim] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        elif x == y:
            out.append(x)
        else:
            raise InvalidArgumentError(
                f"Incompatible shapes: {format_shape(a)} vs. {format_shape(b)}"
            )
    return tuple(reversed(out))


def broadcasting(c: InferenceContext) -> None:
    """Output 0 is the broadcast of all inputs (BroadcastBinaryOpShapeFn, for any count)."""
    out: Shape = ()
    for i in range(c.num_inputs):
        out = broadcast_shape(out, c.input(i))
    c.set_output(0, out)


@dataclass(frozen=True, slots=True)
class ShapeFnSpec:
    """A shape function declared for an op."""

    op: str
    fn: ShapeFn


@overload
def shape_fn(op: str) -> Callable[[F], F]: ...
@overload
def shape_fn(op: str, fn: ShapeFn) -> ShapeFnSpec: ...


def shape_fn(op: str, fn: ShapeFn | None = None) -> Callable[[F], F] | ShapeFnSpec:
    """Declare the decorated ``fn(c: InferenceContext)`` the shape function of ``op``; with
    ``fn`` given (a shared one such as :func:`unchanged`), return the declaration instead."""
    if fn is not None:
        return ShapeFnSpec(op, fn)

    def decorate(fn: F) -> F:
        declare(fn, ShapeFnSpec(op, fn))
        return fn

    return decorate


# --- test helpers in the spirit of TensorFlow's INFER_OK / INFER_ERROR ---------------------

_DIM_REF = re.compile(r"d(\d+)_(\d+)")


def _run(op: OpDef | None, fn: ShapeFn, inputs: str, attrs: Mapping[str, Any]) -> list[Shape]:
    shapes = [parse_shape(s) for s in inputs.split(";")] if inputs.strip() else []
    c = InferenceContext(op, shapes, attrs)
    fn(c)
    return c.finish()


def _expected(token: str, inputs: list[Shape]) -> Shape:
    token = token.strip()
    if token.startswith("in"):
        return inputs[int(token[2:])]
    if token == "?":
        return None
    dims: list[Dim] = []
    for raw in token[1:-1].split(","):
        d = raw.strip()
        if not d:
            continue
        ref = _DIM_REF.fullmatch(d)
        if ref:
            shape = inputs[int(ref.group(1))]
            dims.append(None if shape is None else shape[int(ref.group(2))])
        else:
            dims.append(None if d == "?" else int(d))
    return tuple(dims)


def infer_ok(op: OpDef | None, fn: ShapeFn, inputs: str, expected: str, **attrs: Any) -> None:
    """Assert that ``fn`` infers ``expected`` from ``inputs``.

    Inputs are shapes separated by ``;`` (``"[2,?];?"``); expected outputs likewise, where
    ``inN`` is input N's shape and ``dN_M`` is dim M of input N:
    ``infer_ok(op, fn, "[2,3]", "[d0_0,3]")``.
    """
    in_shapes = [parse_shape(s) for s in inputs.split(";")] if inputs.strip() else []
    got = _run(op, fn, inputs, attrs)
    want = [_expected(t, in_shapes) for t in expected.split(";")] if expected.strip() else []
    if got != want:
        shown = ";".join(format_shape(s) for s in got)
        raise AssertionError(f"inferred {shown!r} from {inputs!r}, expected {expected!r}")


def infer_error(op: OpDef | None, fn: ShapeFn, inputs: str, message: str, **attrs: Any) -> None:
    """Assert that ``fn`` rejects ``inputs`` with an error containing ``message``."""
    try:
        got = _run(op, fn, inputs, attrs)
    except InvalidArgumentError as exc:
        if message not in str(exc):
            raise AssertionError(f"error {str(exc)!r} does not contain {message!r}") from exc
        return
    shown = ";".join(format_shape(s) for s in got)
    raise AssertionError(f"inferred {shown!r} from {inputs!r}, expected an error {message!r}")
