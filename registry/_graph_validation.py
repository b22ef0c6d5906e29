"""Saved graphs checked against OpDefs: defaults and inferred attrs filled in (as TensorFlow's
AddDefaultAttrsToGraphDef and graph construction do), every problem named by its node, and
the order nodes run in."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from opmarket.registry._attrvalues import coerce_attr
from opmarket.registry._builtins import BUILTIN_OPS
from opmarket.registry._errors import InvalidGraphError
from opmarket.registry._graph import NODE_NAME, Graph, Node, OpLookup, parse_input
from opmarket.registry._signature import args_dtypes, attrs_with_defaults
from opmarket.sdk import (
    DType,
    OpDef,
    check_attr_value,
)

__all__ = ["GraphProblem", "fill_defaults", "graph_problems", "topological_order", "validate_graph"]


# --- validation -------------------------------------------------------------------------


def _lookup(ops: OpLookup, name: str) -> OpDef | None:
    found = ops.get(name)
    return found if found is not None else BUILTIN_OPS.get(name)


def fill_defaults(graph: Graph, ops: OpLookup) -> Graph:
    """A copy of ``graph`` with values coerced to their declared types, the attrs that follow
    from a node's inputs inferred where missing (type attrs from the producers' dtypes, list
    lengths from the input count, as graph construction does) and every other missing attr
    that has a default filled in (TensorFlow's AddDefaultAttrsToGraphDef)."""
    filled: dict[str, Node] = {}
    out_types: dict[str, list[DType] | None] = {}
    order = topological_order(graph, strict=False)
    order += [n.name for n in graph if n.name not in set(order)]
    for name in order:
        node = graph[name]
        opdef = _lookup(ops, node.op)
        if opdef is None:
            filled[name] = node
            continue
        attrs = {
            k: coerce_attr(v, a.type) if (a := opdef.attr(k)) else v for k, v in node.attrs.items()
        }
        _infer_from_inputs(opdef, node, attrs, out_types)
        attrs = attrs_with_defaults(opdef, attrs)
        filled[name] = replace(node, attrs=attrs)
        out_types[name] = args_dtypes(opdef.outputs, attrs)
    nodes = [
        filled[n.name] if filled.get(n.name) is not None and graph.get(n.name) is n else n
        for n in graph
    ]
    return Graph(
        nodes,
        producer=graph.producer,
        min_consumer=graph.min_consumer,
        relies_on_defaults=graph.relies_on_defaults,
    )


def _infer_from_inputs(
    op: OpDef, node: Node, attrs: dict[str, Any], out_types: Mapping[str, list[DType] | None]
) -> None:
    refs = node.data_inputs
    sizes: list[int | None] = []
    for arg in op.inputs:
        if not arg.is_list:
            sizes.append(1)
            continue
        known = attrs.get(arg.number_attr) if arg.number_attr else attrs.get(arg.type_list_attr)
        sizes.append(
            known
            if isinstance(known, int) and not isinstance(known, bool)
            else len(known)
            if isinstance(known, tuple)
            else None
        )
    unknown = [i for i, n in enumerate(sizes) if n is None]
    if len(unknown) == 1:
        sizes[unknown[0]] = len(refs) - sum(n for n in sizes if n is not None)
    if any(n is None or n < 0 for n in sizes):
        return
    pos = 0
    for arg, n in zip(op.inputs, sizes, strict=True):
        assert n is not None
        types = [_producer_type(r, out_types) for r in refs[pos : pos + n]]
        pos += n
        if arg.number_attr and arg.number_attr not in attrs:
            attrs[arg.number_attr] = n
        if arg.type_list_attr and arg.type_list_attr not in attrs and all(types):
            attrs[arg.type_list_attr] = tuple(t for t in types if t is not None)
        if arg.type_attr and arg.type_attr not in attrs and types and types[0] is not None:
            attrs[arg.type_attr] = types[0]


def _producer_type(ref: str, out_types: Mapping[str, list[DType] | None]) -> DType | None:
    src, index = parse_input(ref)
    types = out_types.get(src)
    return types[index] if types is not None and 0 <= index < len(types) else None


@dataclass(frozen=True, slots=True)
class GraphProblem:
    """One problem :func:`graph_problems` found: the node and its op ("" for a problem of
    the whole graph, a cycle) and the message, the line :func:`validate_graph` gives."""

    node: str
    op: str
    message: str

    def __str__(self) -> str:
        return self.message


def validate_graph(graph: Graph, ops: OpLookup) -> list[str]:
    """Every problem of ``graph`` against ``ops`` (plus the built-in ``Placeholder``, ``Const``,
    ``Identity``, ...), each naming its node; an empty list when the graph is valid.

    Defaults are filled in first; unknown ops, deprecated ops, unknown, missing or ill-typed
    attrs, wrong input counts, dangling inputs, dtype mismatches on edges and cycles are
    reported.
    """
    return [p.message for p in graph_problems(graph, ops)]


def graph_problems(graph: Graph, ops: OpLookup) -> list[GraphProblem]:
    """What :func:`validate_graph` reports, with the node and op of each problem as fields,
    for tools that group problems by op (compat-check's graph replay)."""
    graph = fill_defaults(graph, ops)
    problems: list[GraphProblem] = []
    seen: set[str] = set()
    for node in graph:
        where = f"node {node.name!r}"
        if node.name in seen:
            problems.append(GraphProblem(node.name, node.op, f"{where}: duplicate node name"))
        seen.add(node.name)
        if not NODE_NAME.fullmatch(node.name):  # TensorFlow's node-name rule, plus '>'
            problems.append(GraphProblem(node.name, node.op, f"{where}: invalid node name"))
        opdef = _lookup(ops, node.op)
        if opdef is None:
            known = [*(ops.keys() if isinstance(ops, Mapping) else (o.name for o in ops))]
            near = difflib.get_close_matches(node.op, [*known, *BUILTIN_OPS], n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            problems.append(
                GraphProblem(node.name, node.op, f"{where}: op {node.op!r} is not registered{hint}")
            )
            continue
        where = f"node {node.name!r} ({node.op})"
        problems.extend(
            GraphProblem(node.name, node.op, f"{where}: {p}")
            for p in _node_problems(node, opdef, graph, ops)
        )
    problems.extend(GraphProblem("", "", p) for p in _cycle_problems(graph))
    return problems


def _node_problems(node: Node, op: OpDef, graph: Graph, ops: OpLookup) -> list[str]:
    out: list[str] = []
    if op.deprecation is not None and graph.producer >= op.deprecation.version:
        out.append(
            f"op is deprecated at graph version {op.deprecation.version}: "
            f"{op.deprecation.explanation}"
        )
    attrs_ok = True
    for key in node.attrs:
        if op.attr(key) is None and not key.startswith("_"):
            out.append(f"unknown attr {key!r}" + _known(op))
    for a in op.attrs:
        if a.name not in node.attrs:
            out.append(f"missing attr {a.name!r} of type {a.type} (it has no default)")
            attrs_ok = False
            continue
        problem = check_attr_value(node.attrs[a.name], a)
        if problem is not None:
            out.append(problem)
            attrs_ok = False
    data = node.data_inputs
    first_control = next((k for k, i in enumerate(node.inputs) if i.startswith("^")), None)
    if first_control is not None and any(
        not i.startswith("^") for i in node.inputs[first_control:]
    ):
        out.append("a data input follows a control input")
    expected = args_dtypes(op.inputs, node.attrs) if attrs_ok else None
    if expected is not None and len(expected) != len(data):
        out.append(f"expects {len(expected)} input(s), got {len(data)}")
        expected = None
    k = -1
    for ref in node.inputs:
        src, index = parse_input(ref)
        k += index >= 0
        producer = graph.get(src)
        if producer is None:
            out.append(f"input {ref!r} names no node in the graph")
            continue
        if index < 0:
            continue
        pdef = _lookup(ops, producer.op)
        produced = (
            args_dtypes(pdef.outputs, attrs_with_defaults(pdef, producer.attrs))
            if pdef is not None
            else None
        )
        if produced is None:
            continue
        if index >= len(produced):
            out.append(f"input {ref!r}: node {src!r} has {len(produced)} output(s)")
        elif expected is not None and produced[index].base != expected[k].base:
            out.append(
                f"input {k} ({ref!r}) is {produced[index].spec_name}, "
                f"expected {expected[k].spec_name}"
            )
    return out


def _known(op: OpDef) -> str:
    names = ", ".join(a.name for a in op.attrs)
    return f"; {op.name} has attrs {names}" if names else f"; {op.name} has no attrs"


def _cycle_problems(graph: Graph) -> list[str]:
    ordered = set(topological_order(graph, strict=False))
    left = [n.name for n in graph if n.name not in ordered]
    return [f"nodes {', '.join(map(repr, sorted(set(left))))} form a cycle"] if left else []


def topological_order(graph: Graph, strict: bool = True) -> list[str]:
    """Node names so that every node comes after its inputs; ValueError on a cycle when
    ``strict`` (else the nodes that can be ordered)."""
    deps: dict[str, set[str]] = {}
    for node in graph._nodes.values():
        deps[node.name] = {parse_input(i)[0] for i in node.inputs} & graph._nodes.keys()
    users: dict[str, list[str]] = {n: [] for n in deps}
    for name, ds in deps.items():
        for d in ds:
            users[d].append(name)
    ready = [n for n, ds in deps.items() if not ds]
    remaining = {n: len(ds) for n, ds in deps.items()}
    order: list[str] = []
    while ready:
        n = ready.pop(0)
        order.append(n)
        for u in users[n]:
            remaining[u] -= 1
            if remaining[u] == 0:
                ready.append(u)
    if strict and len(order) != len(deps):
        raise InvalidGraphError(["the graph has a cycle"])
    return order
