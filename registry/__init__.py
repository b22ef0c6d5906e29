"""Run time: op and kernel registries, dispatch, generated wrappers, graphs, gradients,
resolvers, custom calls and conformance (see docs/runtime.md)."""

from opmarket.registry._builtins import BUILTIN_OPS
from opmarket.registry._capi_bridge import (
    capi_bridge,
    capi_bridge_include,
    native_kernel_handle,
    native_shape_fn_handle,
)
from opmarket.registry._conformance import (
    ConformanceReport,
    ConformanceResult,
    check_conformance,
)
from opmarket.registry._custom_call import custom_call, register_custom_call_target
from opmarket.registry._discovery import ENTRY_POINT_GROUP, parse_entry_points
from opmarket.registry._dispatch import DEVICE_PREFERENCE, current_device, device
from opmarket.registry._errors import (
    AmbiguousOpName,
    InvalidGraph,
    KernelError,
    KernelNotFound,
    LibraryError,
    RegistrationError,
)
from opmarket.registry._executor import infer_graph_shapes, run_graph
from opmarket.registry._gradients import (
    check_gradient,
    compute_gradient,
    gradients,
    max_error,
)
from opmarket.registry._graph import (
    GRAPH_FORMAT,
    PRODUCER_VERSION,
    Graph,
    GraphProblem,
    Node,
    dumps_graph,
    fill_defaults,
    graph_from_json,
    graph_problems,
    graph_to_json,
    load_graph,
    parse_input,
    save_graph,
    topological_order,
    validate_graph,
)
from opmarket.registry._manifest import MANIFEST, find_manifest, manifest_locations
from opmarket.registry._native import OpLibrary, load_library
from opmarket.registry._plugins import PluginInfo, load_plugins_from
from opmarket.registry._registry import Registry
from opmarket.registry._resolver import OpResolver, selective_resolver
from opmarket.registry._runtime import (
    get_registry,
    isolated_registry,
    load_plugins,
    new_registry,
    plugins,
    register,
)
from opmarket.registry._signature import inferred_attrs

__all__ = [
    "BUILTIN_OPS",
    "DEVICE_PREFERENCE",
    "ENTRY_POINT_GROUP",
    "GRAPH_FORMAT",
    "MANIFEST",
    "PRODUCER_VERSION",
    "AmbiguousOpName",
    "ConformanceReport",
    "ConformanceResult",
    "Graph",
    "GraphProblem",
    "InvalidGraph",
    "KernelError",
    "KernelNotFound",
    "LibraryError",
    "Node",
    "OpLibrary",
    "OpResolver",
    "PluginInfo",
    "RegistrationError",
    "Registry",
    "capi_bridge",
    "capi_bridge_include",
    "check_conformance",
    "check_gradient",
    "compute_gradient",
    "current_device",
    "custom_call",
    "device",
    "dumps_graph",
    "fill_defaults",
    "find_manifest",
    "get_registry",
    "gradients",
    "graph_from_json",
    "graph_problems",
    "graph_to_json",
    "infer_graph_shapes",
    "inferred_attrs",
    "isolated_registry",
    "load_graph",
    "load_library",
    "load_plugins",
    "load_plugins_from",
    "manifest_locations",
    "max_error",
    "native_kernel_handle",
    "native_shape_fn_handle",
    "new_registry",
    "parse_entry_points",
    "parse_input",
    "plugins",
    "register",
    "register_custom_call_target",
    "run_graph",
    "save_graph",
    "selective_resolver",
    "topological_order",
    "validate_graph",
]
