"""Saved graphs: nodes with inputs as ``node:index``, JSON files, validation against OpDefs."""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from opmarket.registry._attrvalues import coerce_attr, normalize_attr, tensor_value
from opmarket.registry._builtins import BUILTIN_OPS
from opmarket.registry._graph_v1 import decode_v1_attr
from opmarket.registry._signature import args_dtypes, attrs_with_defaults
from opmarket.sdk import (
    DocumentError,
    DType,
    OpDef,
    OpSet,
    TensorShape,
    UnknownDType,
    check_attr_value,
    snake_case,
)
from opmarket.sdk._attrcodec import tagged_from_json, tagged_to_json

__all__ = [
    "GRAPH_FORMAT",
    "PRODUCER_VERSION",
    "Graph",
    "GraphProblem",
    "Node",
    "OpLookup",
    "dumps_graph",
    "fill_defaults",
    "graph_from_json",
    "graph_problems",
    "graph_to_json",
    "load_graph",
    "parse_input",
    "save_graph",
    "topological_order",
    "validate_graph",
]

#: The ``format`` field of a saved graph.
GRAPH_FORMAT = "opmarket.graph"
#: The ``versions.producer`` this release writes (TensorFlow's GraphDef producer version).
PRODUCER_VERSION = 1
_FORMAT_VERSION = 2  # 2: attrs as {type, value} (sdk's codec); 1 still loads

#: Where graph functions look ops up: a name -> OpDef mapping, or an OpSet.
OpLookup = Mapping[str, OpDef] | OpSet

_NODE_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_>./\-]*")


@dataclass(frozen=True, slots=True)
class Node:
    """One op instance: its unique name, op name, inputs (``"x:0"``, ``"^y"`` for control
    inputs), attr values and device (``""`` for any)."""

    name: str
    op: str
    inputs: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    device: str = ""

    def output(self, index: int = 0) -> str:
        """The input string that refers to output ``index`` of this node."""
        return f"{self.name}:{index}"

    @property
    def data_inputs(self) -> tuple[str, ...]:
        """The inputs that carry tensors, as written (``"x:0"``, ``"x"``); not control inputs."""
        return tuple(i for i in self.inputs if not i.startswith("^"))

    @property
    def control_inputs(self) -> tuple[str, ...]:
        """The nodes this one must run after: its ``^name`` inputs, without the ``^``."""
        return tuple(i[1:] for i in self.inputs if i.startswith("^"))


def parse_input(ref: str) -> tuple[str, int]:
    """``"x:1"`` -> ``("x", 1)``; ``"x"`` -> ``("x", 0)``; ``"^x"`` -> ``("x", -1)`` (control)."""
    if ref.startswith("^"):
        return ref[1:], -1
    name, sep, index = ref.rpartition(":")
    if sep and index.isdigit():
        return name, int(index)
    return ref, 0


def _canonical(ref: str) -> str:
    name, index = parse_input(ref)
    return ref if index < 0 else f"{name}:{index}"


class Graph:
    """A graph of nodes in insertion order, built from Python or loaded from JSON.

    >>> g = Graph()
    >>> x = g.placeholder("int32", name="x")
    >>> y = g.add("Opm>ZeroOut", x, name="y", preserve_index=1)
    """

    def __init__(
        self,
        nodes: Iterable[Node] = (),
        *,
        producer: int = PRODUCER_VERSION,
        min_consumer: int = 0,
    ) -> None:
        self.producer = producer
        self.min_consumer = min_consumer
        self._nodes: dict[str, Node] = {}
        self._duplicates: list[Node] = []
        for node in nodes:
            self._insert(node)

    def _insert(self, node: Node) -> None:
        if node.name in self._nodes:
            self._duplicates.append(node)  # kept so that validation can name it
        else:
            self._nodes[node.name] = node

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every node in insertion order, then those whose name was taken (kept for validation)."""
        return (*self._nodes.values(), *self._duplicates)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self._nodes) + len(self._duplicates)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def __getitem__(self, name: str) -> Node:
        return self._nodes[name]

    def get(self, name: str) -> Node | None:
        """The node called ``name``, or None (``graph[name]`` raises KeyError instead)."""
        return self._nodes.get(name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (self.nodes, self.producer, self.min_consumer) == (
            other.nodes, other.producer, other.min_consumer,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"<Graph of {len(self)} nodes, producer {self.producer}>"

    def unique_name(self, base: str) -> str:
        """``base`` if no node has it yet, else ``base_1``, ``base_2``, ..."""
        if base not in self._nodes:
            return base
        i = 1
        while f"{base}_{i}" in self._nodes:
            i += 1
        return f"{base}_{i}"

    def add_node(self, node: Node) -> Node:
        """Append ``node`` as it is (no normalization); returns it."""
        self._insert(node)
        return node

    def add(
        self,
        op: str,
        *inputs: Node | str,
        name: str | None = None,
        device: str = "",
        **attrs: Any,
    ) -> Node:
        """Add a node for ``op``: inputs are nodes (their output 0) or ``"node:index"``; attrs
        take plain Python values, numpy dtypes for type attrs and numpy arrays for tensors."""
        refs = tuple(i.output(0) if isinstance(i, Node) else _canonical(i) for i in inputs)
        base = name or snake_case(op.rpartition(">")[2])
        node = Node(
            name=name if name is not None else self.unique_name(base),
            op=op,
            inputs=refs,
            attrs={k: normalize_attr(v) for k, v in attrs.items()},
            device=device,
        )
        return self.add_node(node)

    def placeholder(
        self, dtype: Any, shape: Iterable[int] | None = None, *, name: str | None = None
    ) -> Node:
        """A graph input: a ``Placeholder`` of ``dtype`` and ``shape`` (None: unknown rank,
        -1 for an unknown dim), fed when the graph runs."""
        dims = None if shape is None else tuple(int(d) for d in shape)
        return self.add("Placeholder", name=name or self.unique_name("placeholder"),
                        dtype=dtype, shape=TensorShape(dims))

    def constant(self, value: Any, *, name: str | None = None) -> Node:
        """A ``Const`` node holding ``value`` (a numpy array or anything it takes)."""
        tensor = tensor_value(value)
        return self.add("Const", name=name or self.unique_name("const"),
                        value=tensor, dtype=tensor.dtype)


# --- JSON -------------------------------------------------------------------------------


def graph_to_json(graph: Graph) -> dict[str, Any]:
    """The graph as JSON-ready data (what :func:`save_graph` writes)."""
    nodes: list[dict[str, Any]] = []
    for n in graph:
        entry: dict[str, Any] = {"name": n.name, "op": n.op, "inputs": list(n.inputs)}
        if n.device:
            entry["device"] = n.device
        entry["attrs"] = {k: tagged_to_json(n.attrs[k]) for k in sorted(n.attrs)}
        nodes.append(entry)
    return {
        "format": GRAPH_FORMAT,
        "format_version": _FORMAT_VERSION,
        "versions": {"producer": graph.producer, "min_consumer": graph.min_consumer},
        "nodes": nodes,
    }


def graph_from_json(data: Any, source: str = "<json>") -> Graph:
    """A graph from JSON data; DocumentError listing every problem found."""
    problems: list[str] = []
    if not isinstance(data, dict):
        raise DocumentError(source, "a graph is a JSON object with a 'nodes' list")
    if data.get("format", GRAPH_FORMAT) != GRAPH_FORMAT:
        problems.append(f"format is {data.get('format')!r}, expected {GRAPH_FORMAT!r}")
    fv = data.get("format_version", 1)  # files written before the field existed
    if not isinstance(fv, int) or fv > _FORMAT_VERSION:
        problems.append(
            f"format_version {fv!r} is newer than this opmarket reads ({_FORMAT_VERSION})"
        )
    versions = data.get("versions", {})
    producer = versions.get("producer", PRODUCER_VERSION) if isinstance(versions, dict) else None
    min_consumer = versions.get("min_consumer", 0) if isinstance(versions, dict) else None
    if not isinstance(producer, int) or not isinstance(min_consumer, int):
        problems.append("versions must be {'producer': int, 'min_consumer': int}")
        producer, min_consumer = PRODUCER_VERSION, 0
    elif min_consumer > PRODUCER_VERSION:
        problems.append(
            f"graph needs a consumer of version {min_consumer}; this opmarket reads graphs "
            f"up to version {PRODUCER_VERSION}"
        )
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list):
        problems.append("'nodes' must be a list")
        raw_nodes = []
    nodes: list[Node] = []
    for i, raw in enumerate(raw_nodes):
        node = _node_from_json(raw, f"node #{i}", problems, fv == 1)
        if node is not None:
            nodes.append(node)
    if problems:
        raise DocumentError(source, "\n".join(problems))
    return Graph(nodes, producer=producer, min_consumer=min_consumer)


def _node_from_json(raw: Any, where: str, problems: list[str], v1: bool) -> Node | None:
    if not isinstance(raw, dict):
        problems.append(f"{where}: a node is an object, got {raw!r}")
        return None
    name, op = raw.get("name"), raw.get("op")
    if isinstance(name, str):
        where = f"node {name!r}"
    ok = True
    for key, value in (("name", name), ("op", op), ("device", raw.get("device", ""))):
        if not isinstance(value, str):
            problems.append(f"{where}: {key!r} must be a string, got {value!r}")
            ok = False
    inputs = raw.get("inputs", [])
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        problems.append(f"{where}: 'inputs' must be a list of 'node:index' strings")
        ok = False
    raw_attrs = raw.get("attrs", {})
    attrs: dict[str, Any] = {}
    if not isinstance(raw_attrs, dict):
        problems.append(f"{where}: 'attrs' must be an object")
        ok = False
    else:
        for key, value in raw_attrs.items():
            try:
                attrs[key] = decode_v1_attr(value) if v1 else tagged_from_json(value, key)
            except (ValueError, TypeError, UnknownDType) as exc:
                problems.append(f"{where}: attr {key!r}: {exc}")
                ok = False
    unknown = set(raw) - {"name", "op", "inputs", "attrs", "device"}
    if unknown:
        problems.append(f"{where}: unknown fields {sorted(unknown)}")
    if not ok or not isinstance(name, str) or not isinstance(op, str):
        return None
    return Node(name, op, tuple(inputs), attrs, raw.get("device", ""))


def save_graph(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write ``graph`` as deterministic JSON, one line per node field."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(dumps_graph(graph))


def dumps_graph(graph: Graph) -> str:
    """The text :func:`save_graph` writes: JSON, one line per node field."""
    data = graph_to_json(graph)

    def compact(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))

    lines = ["{"]
    for key in ("format", "format_version", "versions"):
        lines.append(f"  {json.dumps(key)}: {compact(data[key])},")
    lines.append('  "nodes": [')
    for i, node in enumerate(data["nodes"]):
        fields = [f"    {json.dumps(k)}: {compact(v)}" for k, v in node.items()]
        end = "," if i + 1 < len(data["nodes"]) else ""
        lines.append("   {\n" + ",\n".join(fields) + "\n   }" + end)
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def load_graph(path: str | os.PathLike[str]) -> Graph:
    """Read a graph saved by :func:`save_graph`; DocumentError if it cannot be read."""
    source = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise DocumentError(source, exc.strerror or str(exc)) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DocumentError(source, f"not JSON: {exc}") from exc
    return graph_from_json(data, source)


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
        attrs = {k: coerce_attr(v, a.type) if (a := opdef.attr(k)) else v
                 for k, v in node.attrs.items()}
        _infer_from_inputs(opdef, node, attrs, out_types)
        attrs = attrs_with_defaults(opdef, attrs)
        filled[name] = replace(node, attrs=attrs)
        out_types[name] = args_dtypes(opdef.outputs, attrs)
    nodes = [filled[n.name] if filled.get(n.name) is not None and graph.get(n.name) is n else n
             for n in graph]
    return Graph(nodes, producer=graph.producer, min_consumer=graph.min_consumer)


def _infer_from_inputs(op: OpDef, node: Node, attrs: dict[str, Any],
                       out_types: Mapping[str, list[DType] | None]) -> None:
    refs = node.data_inputs
    sizes: list[int | None] = []
    for arg in op.inputs:
        if not arg.is_list:
            sizes.append(1)
            continue
        known = attrs.get(arg.number_attr) if arg.number_attr else attrs.get(arg.type_list_attr)
        sizes.append(known if isinstance(known, int) and not isinstance(known, bool) else
                     len(known) if isinstance(known, tuple) else None)
    unknown = [i for i, n in enumerate(sizes) if n is None]
    if len(unknown) == 1:
        sizes[unknown[0]] = len(refs) - sum(n for n in sizes if n is not None)
    if any(n is None or n < 0 for n in sizes):
        return
    pos = 0
    for arg, n in zip(op.inputs, sizes, strict=True):
        assert n is not None
        types = [_producer_type(r, out_types) for r in refs[pos:pos + n]]
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
        if not _NODE_NAME.fullmatch(node.name):  # TensorFlow's node-name rule, plus '>'
            problems.append(GraphProblem(node.name, node.op, f"{where}: invalid node name"))
        opdef = _lookup(ops, node.op)
        if opdef is None:
            known = [*(ops.keys() if isinstance(ops, Mapping) else (o.name for o in ops))]
            near = difflib.get_close_matches(node.op, [*known, *BUILTIN_OPS], n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            problems.append(GraphProblem(node.name, node.op,
                                         f"{where}: op {node.op!r} is not registered{hint}"))
            continue
        where = f"node {node.name!r} ({node.op})"
        problems.extend(GraphProblem(node.name, node.op, f"{where}: {p}")
                        for p in _node_problems(node, opdef, graph, ops))
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
        produced = args_dtypes(pdef.outputs, attrs_with_defaults(pdef, producer.attrs)) \
            if pdef is not None else None
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
        raise ValueError("the graph has a cycle")
    return order
