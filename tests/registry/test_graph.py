from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from opmarket.registry import (
    BUILTIN_OPS,
    Graph,
    Node,
    dumps_graph,
    fill_defaults,
    graph_from_json,
    graph_to_json,
    load_graph,
    parse_input,
    save_graph,
    topological_order,
    validate_graph,
)
from opmarket.registry._attrvalues import tensor_value
from opmarket.sdk import (
    DocumentError,
    DType,
    FuncValue,
    OpDef,
    OpSet,
    TaggedValue,
    TensorShape,
    op,
)


@pytest.fixture
def ops(zero_out_def: OpDef, add_def: OpDef) -> dict[str, OpDef]:
    return {zero_out_def.name: zero_out_def, add_def.name: add_def}


def zero_out_graph() -> Graph:
    g = Graph()
    x = g.placeholder(np.float32, [3], name="x")
    c = g.constant(np.array([5, 4, 3], np.int32), name="c")
    g.add("Opm>ZeroOut", x, name="zx", T=np.float32, preserve_index=1)
    g.add("Opm>ZeroOut", c, name="zc", T="int32")
    g.add("Opm>Concat", "zx:0", "zx", name="cat", N=2, T=DType.FLOAT)
    return g


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [("x:1", ("x", 1)), ("x", ("x", 0)), ("^x", ("x", -1)), ("ns/a:b:2", ("ns/a:b", 2))],
)
def test_parse_input(ref: str, parsed: tuple[str, int]) -> None:
    assert parse_input(ref) == parsed


def test_built_graph_is_valid_and_round_trips(tmp_path: Path, ops: dict[str, OpDef]) -> None:
    g = zero_out_graph()
    assert validate_graph(g, ops) == []
    path = tmp_path / "g.json"
    save_graph(g, path)
    loaded = load_graph(path)
    assert loaded == g
    assert dumps_graph(loaded) == path.read_text()


def test_saved_attrs_are_readable(tmp_path: Path) -> None:
    """Each attr is {type, value} in the op-set's encoding (one attr codec)."""
    data = graph_to_json(zero_out_graph())
    assert data["format_version"] == 3
    by_name = {n["name"]: n for n in data["nodes"]}
    assert by_name["x"]["attrs"] == {
        "dtype": {"type": "type", "value": "float"},
        "shape": {"type": "shape", "value": [3]},
    }
    assert by_name["c"]["attrs"]["value"] == {
        "type": "tensor",
        "value": {"dtype": "int32", "shape": [3], "tensor_content": "BQAAAAQAAAADAAAA"},
    }
    assert by_name["zx"]["attrs"] == {
        "T": {"type": "type", "value": "float"},
        "preserve_index": {"type": "int", "value": 1},
    }
    assert by_name["cat"]["inputs"] == ["zx:0", "zx:0"]
    assert data["versions"] == {"producer": 1, "min_consumer": 0}


def test_saving_stores_every_default(tmp_path: Path, ops: dict[str, OpDef]) -> None:
    """As TensorFlow's NodeDefs: a saved node carries the defaults of the release it was saved
    with, so a later default change does not change what the graph computes."""
    path = tmp_path / "g.json"
    save_graph(zero_out_graph(), path, ops=ops)
    saved = json.loads(path.read_text())["nodes"]
    zc = next(n for n in saved if n["name"] == "zc")
    assert zc["attrs"]["preserve_index"] == {"type": "int", "value": 0}
    loaded = load_graph(path)
    assert loaded["zc"].attrs["preserve_index"] == 0
    assert not loaded.relies_on_defaults
    assert loaded == fill_defaults(zero_out_graph(), ops)


@pytest.mark.parametrize("version", [1, 2])
def test_graphs_saved_without_defaults_are_marked(version: int) -> None:
    doc = {
        "format": "opmarket.graph",
        "format_version": version,
        "nodes": [{"name": "x", "op": "Placeholder", "inputs": [], "attrs": {}}],
    }
    graph = graph_from_json(doc)
    assert graph.relies_on_defaults
    assert fill_defaults(graph, {}).relies_on_defaults  # a copy keeps the mark


def test_format_1_graphs_still_load() -> None:
    """Graphs saved by opmarket 0.1 (format_version 1, or no version at all) keep loading."""
    old = {
        "format": "opmarket.graph",
        "format_version": 1,
        "nodes": [
            {
                "name": "x",
                "op": "Placeholder",
                "inputs": [],
                "attrs": {"dtype": {"dtype": "float"}, "shape": {"shape": [-1]}},
            },
            {
                "name": "c",
                "op": "Const",
                "inputs": [],
                "attrs": {
                    "dtype": {"dtype": "int32"},
                    "value": {"tensor": {"dtype": "int32", "shape": [3], "values": [5, 4, 3]}},
                },
            },
            {
                "name": "z",
                "op": "Opm>ZeroOut",
                "inputs": ["x:0"],
                "device": "CPU",
                "attrs": {"T": {"dtype": "float"}, "preserve_index": 1, "f": {"float": "inf"}},
            },
        ],
    }
    for doc in (old, {k: v for k, v in old.items() if k != "format_version"}):
        g = graph_from_json(doc)
        assert g["x"].attrs == {"dtype": DType.FLOAT, "shape": TensorShape((-1,))}
        assert g["z"].attrs == {"T": DType.FLOAT, "preserve_index": 1, "f": float("inf")}
        assert g["c"].attrs["value"] == tensor_value(np.array([5, 4, 3], np.int32))


def test_inferred_attrs_are_filled_in(ops: dict[str, OpDef]) -> None:
    g = Graph(
        [
            Node("x", "Placeholder", attrs={"dtype": DType.FLOAT}),
            Node("c", "Opm>Concat", ("x:0", "x:0", "^x")),
        ]
    )
    assert fill_defaults(g, ops)["c"].attrs == {"N": 2, "T": DType.FLOAT}
    assert validate_graph(g, ops) == []


def test_defaults_are_filled_in(ops: dict[str, OpDef]) -> None:
    g = Graph(
        [Node("x", "Placeholder", attrs={"dtype": DType.INT32}), Node("z", "Opm>ZeroOut", ("x:0",))]
    )
    assert validate_graph(g, ops) == []
    filled = fill_defaults(g, ops)
    assert filled["z"].attrs == {"T": DType.INT32, "preserve_index": 0}
    assert filled["x"].attrs["shape"] == TensorShape(None)
    assert "T" not in g["z"].attrs  # the original is unchanged


def test_validates_against_an_opset(zero_out_def: OpDef) -> None:
    g = Graph(
        [Node("x", "Placeholder", attrs={"dtype": DType.INT32}), Node("z", "Opm>ZeroOut", ("x:0",))]
    )
    assert validate_graph(g, OpSet.of([zero_out_def])) == []
    assert validate_graph(g, OpSet.of([])) == ["node 'z': op 'Opm>ZeroOut' is not registered"]


@pytest.mark.parametrize(
    ("node", "problem"),
    [
        (
            Node("z", "Opm>ZeroOut", ("x:0",), {"preserve_index": -1}),
            "node 'z' (Opm>ZeroOut): attr 'preserve_index' is -1, below its minimum of 0",
        ),
        (
            Node("z", "Opm>ZeroOut", ("x:0",), {"preserve_index": "one"}),
            "node 'z' (Opm>ZeroOut): attr 'preserve_index': expected int, got 'one'",
        ),
        (
            Node("z", "Opm>ZeroOut", ("x:0",), {"colour": 1}),
            "node 'z' (Opm>ZeroOut): unknown attr 'colour'; "
            "Opm>ZeroOut has attrs T, preserve_index",
        ),
        (
            Node("z", "Opm>ZeroOut", ("x:0",), {"T": DType.INT64}),
            "node 'z' (Opm>ZeroOut): attr 'T' may not be int64; allowed: float, double, int32",
        ),
        (
            Node("z", "Opm>ZeroOut", ("x:0", "x:0")),
            "node 'z' (Opm>ZeroOut): expects 1 input(s), got 2",
        ),
        (
            Node("z", "Opm>ZeroOut", ("y:0",)),
            "node 'z' (Opm>ZeroOut): input 'y:0' names no node in the graph",
        ),
        (
            Node("z", "Opm>ZeroOut", ("x:3",)),
            "node 'z' (Opm>ZeroOut): input 'x:3': node 'x' has 1 output(s)",
        ),
        (
            Node("z", "Opm>ZeroOut", ("x:0",), {"T": DType.FLOAT}),
            "node 'z' (Opm>ZeroOut): input 0 ('x:0') is int32, expected float",
        ),
        (
            Node("z", "Opm>ZeroOut", ("^x", "x:0")),
            "node 'z' (Opm>ZeroOut): a data input follows a control input",
        ),
        (
            Node("z", "Opm>ZeroOot", ("x:0",)),
            "node 'z': op 'Opm>ZeroOot' is not registered (did you mean 'Opm>ZeroOut'?)",
        ),
        (
            Node("z", "Placeholder"),
            "node 'z' (Placeholder): missing attr 'dtype' of type type (it has no default)",
        ),
        (
            Node("z", "Opm>Concat", ("x:0", "x:0"), {"N": 3}),
            "node 'z' (Opm>Concat): expects 3 input(s), got 2",
        ),
        (Node("z z", "NoOp"), "node 'z z': invalid node name"),
    ],
)
def test_problems_name_the_node(node: Node, problem: str, ops: dict[str, OpDef]) -> None:
    g = Graph([Node("x", "Placeholder", attrs={"dtype": DType.INT32}), node])
    assert validate_graph(g, ops) == [problem]


def test_every_problem_is_reported(ops: dict[str, OpDef]) -> None:
    g = Graph(
        [
            Node("a", "Opm>ZeroOut", ("b:0",), {"T": DType.INT32}),
            Node("b", "Opm>ZeroOut", ("a:0",), {"T": DType.INT32, "preserve_index": -2}),
            Node("a", "NoOp"),
        ]
    )
    problems = validate_graph(g, ops)
    assert problems == [
        "node 'b' (Opm>ZeroOut): attr 'preserve_index' is -2, below its minimum of 0",
        "node 'a': duplicate node name",
        "nodes 'a', 'b' form a cycle",
    ]


def test_deprecated_ops_fail_from_their_version() -> None:
    old = op("Old").output("y: float").deprecated(2, "use New").build()
    g = Graph([Node("o", "Old")], producer=1)
    assert validate_graph(g, {"Old": old}) == []
    g.producer = 2
    assert validate_graph(g, {"Old": old}) == [
        "node 'o' (Old): op is deprecated at graph version 2: use New"
    ]


def test_opset_takes_precedence_over_builtins() -> None:
    mine = op("Identity").input("x: float").output("y: float").build()
    g = Graph(
        [
            Node("c", "Const", attrs={"value": np.int32(1), "dtype": DType.INT32}),
            Node("i", "Identity", ("c:0",)),
        ]
    )
    assert validate_graph(g, {}) == []
    assert fill_defaults(g, {})["i"].attrs == {"T": DType.INT32}  # inferred from its input
    assert validate_graph(g, {"Identity": mine}) == [
        "node 'i' (Identity): input 0 ('c:0') is int32, expected float"
    ]
    assert "Placeholder" in BUILTIN_OPS


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "a graph is a JSON object"),
        ({"nodes": {}}, "'nodes' must be a list"),
        ({"format": "other", "nodes": []}, "format is 'other'"),
        ({"format_version": 9, "nodes": []}, "format_version 9 is newer"),
        (
            {"versions": {"producer": 5, "min_consumer": 4}, "nodes": []},
            "graph needs a consumer of version 4",
        ),
        ({"nodes": [{"name": "a", "op": 3}]}, "node 'a': 'op' must be a string"),
        (
            {"nodes": [{"name": "a", "op": "X", "attrs": {"T": {"dtype": "int33"}}}]},
            "node 'a': attr 'T': unknown dtype 'int33'",
        ),
        (
            {"nodes": [{"name": "a", "op": "X", "attrs": {"T": {"what": 1}}}]},
            "node 'a': attr 'T': unknown attr tag 'what'",
        ),
        ({"nodes": [{"name": "a", "op": "X", "extra": 1}]}, "node 'a': unknown fields ['extra']"),
    ],
)
def test_unreadable_graphs(data: object, message: str) -> None:
    with pytest.raises(DocumentError, match=r"^<json>: ") as info:
        graph_from_json(data)
    assert message in str(info.value)


def test_load_graph_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(DocumentError, match=r"broken\.json: not JSON"):
        load_graph(path)
    with pytest.raises(DocumentError, match=r"missing\.json"):
        load_graph(tmp_path / "missing.json")


def test_attr_values_round_trip(tmp_path: Path) -> None:

    attrs = {
        "s": "text",
        "i": -3,
        "f": 0.5,
        "b": True,
        "t": DType.BFLOAT16,
        "nan": float("nan"),
        "shape": TensorShape((2, -1)),
        "unknown": TensorShape(None),
        "li": (1, 2),
        "lt": (DType.FLOAT, DType.INT8),
        "empty": (),
        "fn": FuncValue("F", (("k", TaggedValue("int", 1)),)),
        "tensor": np.array([[1.5, 2.0]], np.float16),
    }
    g = Graph()
    g.add("Any", name="n", **attrs)
    path = tmp_path / "g.json"
    save_graph(g, path)
    back = load_graph(path)["n"].attrs
    saved = json.loads(path.read_text())["nodes"][0]["attrs"]
    assert saved["nan"] == {"type": "float", "value": "nan"}
    assert np.isnan(back.pop("nan"))
    expected = dict(g["n"].attrs)
    expected.pop("nan")
    assert back == expected
    assert back["tensor"].to_numpy().dtype == np.float16


def test_topological_order() -> None:
    g = Graph([Node("b", "Identity", ("a:0",)), Node("a", "NoOp"), Node("c", "NoOp", ("^b",))])
    assert topological_order(g) == ["a", "b", "c"]
    g.add_node(Node("a2", "Identity", ("a2:0",)))
    with pytest.raises(ValueError, match="cycle"):
        topological_order(g)


def test_python_values_are_read_as_their_attr_types() -> None:
    g = Graph(
        [
            Node("c", "Const", attrs={"value": 1.5, "dtype": "float64"}),
            Node("p", "Placeholder", attrs={"dtype": np.int8, "shape": (2, None)}),
            Node("q", "Placeholder", attrs={"dtype": "nonsense"}),
            Node("k", "Const", attrs={"value": "text", "dtype": DType.STRING}),
        ]
    )
    filled = fill_defaults(g, {})
    assert filled["c"].attrs["value"].to_numpy() == np.float64(1.5)
    assert filled["c"].attrs["dtype"] is DType.DOUBLE
    assert filled["p"].attrs == {"dtype": DType.INT8, "shape": TensorShape((2, -1))}
    assert validate_graph(g, {}) == [
        "node 'q' (Placeholder): attr 'dtype': expected type, got 'nonsense'",
        "node 'k' (Const): attr 'value': expected tensor, got 'text'",
    ]


def test_bytes_in_a_string_tensor_attr_are_text(tmp_path: Path) -> None:
    g = Graph(
        [
            Node(
                "k",
                "Const",
                attrs={"value": np.array([b"ab", "c"], dtype=object), "dtype": DType.STRING},
            )
        ]
    )
    path = tmp_path / "g.json"
    save_graph(fill_defaults(g, {}), path)
    saved = json.loads(path.read_text())["nodes"][0]["attrs"]["value"]
    assert saved == {
        "type": "tensor",
        "value": {"dtype": "string", "shape": [2], "string_val": ["ab", "c"]},
    }
    assert load_graph(path)["k"].attrs["value"].to_numpy().tolist() == ["ab", "c"]


def test_graph_problems_name_the_node_and_op(ops: dict[str, OpDef]) -> None:
    from opmarket.registry import GraphProblem, graph_problems

    g = Graph(
        [
            Node("p", "Placeholder", attrs={"dtype": "nonsense"}),
            Node("u", "NoSuchOp"),
            Node("a", "Identity", ("b:0",)),
            Node("b", "Identity", ("a:0",)),
        ]
    )
    problems = graph_problems(g, ops)
    assert [(p.node, p.op) for p in problems] == [
        ("p", "Placeholder"),
        ("u", "NoSuchOp"),
        ("a", "Identity"),
        ("b", "Identity"),
        ("", ""),
    ]
    assert [p.message for p in problems] == validate_graph(g, ops)
    assert all(isinstance(p, GraphProblem) and str(p) == p.message for p in problems)
