"""Saved graphs: nodes with inputs as ``node:index``, JSON files, validation against OpDefs."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from opmarket.registry._attrvalues import model_attr_value, tensor_value
from opmarket.registry._graph_v1 import decode_v1_attr
from opmarket.sdk import (
    DocumentError,
    OpDef,
    OpSet,
    TensorShape,
    UnknownDTypeError,
    snake_case,
)
from opmarket.sdk._attrcodec import tagged_from_json, tagged_to_json

__all__ = [
    "GRAPH_FORMAT",
    "NODE_NAME",
    "PRODUCER_VERSION",
    "Graph",
    "Node",
    "OpLookup",
    "dumps_graph",
    "graph_from_json",
    "graph_to_json",
    "load_graph",
    "parse_input",
    "save_graph",
]

#: The ``format`` field of a saved graph.
GRAPH_FORMAT = "opmarket.graph"
#: The ``versions.producer`` this release writes (TensorFlow's GraphDef producer version).
PRODUCER_VERSION = 1
# 3: every attr stored, defaults included (TensorFlow's NodeDefs); 2: attrs as {type, value}
# (sdk's codec), defaulted attrs left out; 1: opmarket 0.1's attr spelling. All three load.
_FORMAT_VERSION = 3
_FIRST_WITH_DEFAULTS = 3

#: Where graph functions look ops up: a name -> OpDef mapping, or an OpSet.
OpLookup = Mapping[str, OpDef] | OpSet

NODE_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_>./\-]*")


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
        relies_on_defaults: bool = False,
    ) -> None:
        self.producer = producer
        self.min_consumer = min_consumer
        #: True for a graph read from a file written before attr defaults were stored
        #: (format_version 1 or 2): its nodes take whatever defaults the running release has.
        self.relies_on_defaults = relies_on_defaults
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
            other.nodes,
            other.producer,
            other.min_consumer,
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
            attrs={k: model_attr_value(v) for k, v in attrs.items()},
            device=device,
        )
        return self.add_node(node)

    def placeholder(
        self, dtype: Any, shape: Iterable[int] | None = None, *, name: str | None = None
    ) -> Node:
        """A graph input: a ``Placeholder`` of ``dtype`` and ``shape`` (None: unknown rank,
        -1 for an unknown dim), fed when the graph runs."""
        dims = None if shape is None else tuple(int(d) for d in shape)
        return self.add(
            "Placeholder",
            name=name or self.unique_name("placeholder"),
            dtype=dtype,
            shape=TensorShape(dims),
        )

    def constant(self, value: Any, *, name: str | None = None) -> Node:
        """A ``Const`` node holding ``value`` (a numpy array or anything it takes)."""
        tensor = tensor_value(value)
        return self.add(
            "Const", name=name or self.unique_name("const"), value=tensor, dtype=tensor.dtype
        )


# --- JSON -------------------------------------------------------------------------------


def graph_to_json(graph: Graph) -> dict[str, Any]:
    """The graph as JSON-ready data, its nodes' attrs as they are (:func:`save_graph` first
    fills in every attr that has a default)."""
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
    return Graph(
        nodes,
        producer=producer,
        min_consumer=min_consumer,
        relies_on_defaults=isinstance(fv, int) and fv < _FIRST_WITH_DEFAULTS,
    )


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
            except (ValueError, TypeError, UnknownDTypeError) as exc:
                problems.append(f"{where}: attr {key!r}: {exc}")
                ok = False
    unknown = set(raw) - {"name", "op", "inputs", "attrs", "device"}
    if unknown:
        problems.append(f"{where}: unknown fields {sorted(unknown)}")
    if not ok or not isinstance(name, str) or not isinstance(op, str):
        return None
    return Node(name, op, tuple(inputs), attrs, raw.get("device", ""))


def save_graph(graph: Graph, path: str | os.PathLike[str], *, ops: OpLookup | None = None) -> None:
    """Write ``graph`` as deterministic JSON, one line per node field, every attr stored:
    the values its op's defaults give are filled in (from ``ops``, else the installed
    plugins' ops), so that a later release changing a default does not change what the saved
    graph computes, as TensorFlow's NodeDefs carry their defaults."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(dumps_graph(graph, ops=ops))


def dumps_graph(graph: Graph, *, ops: OpLookup | None = None) -> str:
    """The text :func:`save_graph` writes: JSON, one line per node field."""
    data = graph_to_json(_with_defaults(graph, ops))

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


def _with_defaults(graph: Graph, ops: OpLookup | None) -> Graph:
    # Imported here: graph validation builds on this module.
    from opmarket.registry._graph_validation import fill_defaults

    if ops is None:
        from opmarket.registry._runtime import registry_or_default

        ops = registry_or_default(None).op_defs
    return fill_defaults(graph, ops)


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
