"""Running graphs with the registered kernels, and inferring their shapes without running."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from opmarket.registry._errors import InvalidGraphError
from opmarket.registry._graph import Graph, Node, parse_input
from opmarket.registry._graph_validation import fill_defaults, topological_order, validate_graph
from opmarket.registry._registry import Registry
from opmarket.registry._runtime import registry_or_default
from opmarket.registry._signature import arg_dtypes
from opmarket.sdk import DType, InvalidArgumentError, OpDef
from opmarket.sdk._kernel import KernelSpec
from opmarket.sdk._shape_inference import InferenceContext, Shape, format_shape

if TYPE_CHECKING:
    from opmarket.registry._resolver import OpResolver

__all__ = ["execute", "infer_graph_shapes", "prepare_graph", "run_graph", "structure"]


def prepare_graph(graph: Graph, registry: Registry) -> Graph:
    """``graph`` with defaults filled in, after validating it; InvalidGraphError otherwise."""
    problems = validate_graph(graph, registry.op_defs)
    if problems:
        raise InvalidGraphError(problems)
    return fill_defaults(graph, registry.op_defs)


def needed(graph: Graph, targets: Sequence[str]) -> list[str]:
    """The nodes ``targets`` depend on (themselves included), in execution order."""
    want: set[str] = set()
    stack = [parse_input(t)[0] for t in targets]
    while stack:
        name = stack.pop()
        if name in want:
            continue
        if name not in graph:
            raise InvalidArgumentError(f"no node named {name!r} in the graph")
        want.add(name)
        stack.extend(parse_input(i)[0] for i in graph[name].inputs)
    return [n for n in topological_order(graph) if n in want]


def structure(
    op: OpDef, flat: Sequence[Any], attrs: Mapping[str, Any], args: str = "inputs"
) -> list[Any]:
    """Flat tensors grouped per argument of ``op`` (a list for a list argument)."""
    out: list[Any] = []
    i = 0
    for arg in getattr(op, args):
        if arg.is_list:
            types = arg_dtypes(arg, attrs)
            n = len(types) if types is not None else 0
            out.append(list(flat[i : i + n]))
            i += n
        else:
            out.append(flat[i])
            i += 1
    return out


def _flatten(op: OpDef, result: Any) -> list[Any]:
    if not op.outputs:
        return []
    items = (result,) if len(op.outputs) == 1 else result
    flat: list[Any] = []
    for arg, value in zip(op.outputs, items, strict=True):
        flat.extend(value if arg.is_list else (value,))
    return flat


def _feed(node: Node, feeds: Mapping[str, Any]) -> np.ndarray[Any, Any]:
    for key in (node.name, f"{node.name}:0"):
        if key in feeds:
            value = feeds[key]
            break
    else:
        raise InvalidArgumentError(f"placeholder {node.name!r} needs a value in feeds")
    dtype: DType = node.attrs["dtype"]
    array = np.asarray(value, dtype=dtype.numpy) if not isinstance(value, np.ndarray) else value
    if array.dtype != dtype.numpy:
        raise InvalidArgumentError(
            f"placeholder {node.name!r} is {dtype.spec_name}, fed {array.dtype}"
        )
    dims = node.attrs["shape"].dims
    if dims is not None and (
        len(dims) != array.ndim
        or any(d >= 0 and d != s for d, s in zip(dims, array.shape, strict=False))
    ):
        want = format_shape(tuple(None if d < 0 else d for d in dims))
        raise InvalidArgumentError(
            f"placeholder {node.name!r} has shape {want}, fed {format_shape(array.shape)}"
        )
    return array


def execute(
    graph: Graph,
    feeds: Mapping[str, Any],
    targets: Sequence[str],
    registry: Registry,
    *,
    resolver: OpResolver | None = None,
    on_node: Callable[[Node, list[Any], list[Any]], None] | None = None,
) -> dict[str, list[Any]]:
    """Run the nodes ``targets`` need on a prepared graph; every node's outputs by name.
    ``on_node(node, inputs, outputs)`` sees each node run (gradients keep them)."""
    values: dict[str, list[Any]] = {}
    for name in needed(graph, targets):
        node = graph[name]
        flat_in = []
        for ref in node.inputs:
            src, index = parse_input(ref)
            if index >= 0:
                flat_in.append(values[src][index])
        if node.op == "Placeholder":
            values[name] = [_feed(node, feeds)]
            if on_node is not None:
                on_node(node, flat_in, values[name])
            continue
        dispatcher = registry.dispatcher(node.op)
        op = dispatcher.op_def
        kernel: KernelSpec | None = None
        if resolver is not None:
            kernel = resolver.find(node.op, int(node.attrs.get("_version", 1)))
        attrs = {k: v for k, v in node.attrs.items() if k not in ("_kernel", "_version")}
        try:
            result = dispatcher.call(
                structure(op, flat_in, node.attrs),
                attrs,
                device=node.device or None,
                label=str(node.attrs.get("_kernel", "")),
                kernel=kernel,
            )
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"node {name!r}: {exc}") from None
        values[name] = _flatten(op, result)
        if on_node is not None:
            on_node(node, flat_in, values[name])
    return values


def run_graph(
    graph: Graph,
    feeds: Mapping[str, Any],
    fetches: str | Sequence[str],
    *,
    registry: Registry | None = None,
    resolver: OpResolver | None = None,
) -> Any:
    """Run ``graph``: ``feeds`` give placeholders values (by node name), ``fetches`` name
    outputs (``"node:index"``, or ``"node"`` for output 0); one array per fetch, or one
    array when ``fetches`` is a string. The graph is validated and defaults filled first."""
    reg = registry_or_default(registry)
    prepared = prepare_graph(graph, reg)
    names = [fetches] if isinstance(fetches, str) else list(fetches)
    values = execute(prepared, feeds, names, reg, resolver=resolver)
    out = []
    for ref in names:
        src, index = parse_input(ref)
        if index < 0 or index >= len(values[src]):
            raise InvalidArgumentError(
                f"cannot fetch {ref!r}: node {src!r} has {len(values[src])} output(s)"
            )
        out.append(values[src][index])
    return out[0] if isinstance(fetches, str) else out


def infer_graph_shapes(
    graph: Graph,
    *,
    registry: Registry | None = None,
    input_shapes: Mapping[str, Shape] | None = None,
) -> dict[str, list[Shape]]:
    """Every node's output shapes, from placeholder shapes (or ``input_shapes`` by node
    name) and the registered shape functions, without running a kernel. An op without a
    shape function gives unknown shapes; InvalidGraphError lists every node whose shape
    function rejects its inputs."""
    reg = registry_or_default(registry)
    prepared = prepare_graph(graph, reg)
    shapes: dict[str, list[Shape]] = {}
    problems: list[str] = []
    for name in topological_order(prepared):
        node = prepared[name]
        op = reg.op_def(node.op)
        assert op is not None  # validated
        n_out = sum(
            len(t) if (t := arg_dtypes(a, node.attrs)) is not None else 1 for a in op.outputs
        )
        if input_shapes and name in input_shapes:
            shapes[name] = [input_shapes[name]]
            continue
        in_shapes = []
        for ref in node.inputs:
            src, index = parse_input(ref)
            if index >= 0:
                in_shapes.append(shapes[src][index])
        c = InferenceContext(op, in_shapes, node.attrs, num_outputs=n_out)
        spec = reg.shape_fn(node.op)
        if spec is not None:
            try:
                spec.fn(c)
            except InvalidArgumentError as exc:
                problems.append(f"node {name!r} ({node.op}): {exc}")
        shapes[name] = c.finish()
    if problems:
        raise InvalidGraphError(problems)
    return shapes
