"""Run time: op and kernel registries, dispatch, generated wrappers, graphs, gradients."""

from opmarket.registry._builtins import BUILTIN_OPS
from opmarket.registry._errors import (
    AmbiguousOpName,
    InvalidGraph,
    KernelNotFound,
    RegistrationError,
)
from opmarket.registry._graph import (
    GRAPH_FORMAT,
    PRODUCER_VERSION,
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

__all__ = [
    "BUILTIN_OPS",
    "GRAPH_FORMAT",
    "PRODUCER_VERSION",
    "AmbiguousOpName",
    "Graph",
    "InvalidGraph",
    "KernelNotFound",
    "Node",
    "RegistrationError",
    "dumps_graph",
    "fill_defaults",
    "graph_from_json",
    "graph_to_json",
    "load_graph",
    "parse_input",
    "save_graph",
    "topological_order",
    "validate_graph",
]
