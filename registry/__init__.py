"""Run time: op and kernel registries, dispatch, generated wrappers, graphs, gradients,
resolvers, custom calls and conformance (see docs/runtime.md).

Names are imported on first use: importing one module of the package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmarket._lazy import lazy_exports

if TYPE_CHECKING:
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
        ConformanceStatus,
        check_conformance,
    )
    from opmarket.registry._custom_call import custom_call, register_custom_call_target
    from opmarket.registry._device import DEVICE_PREFERENCE, current_device, device
    from opmarket.registry._discovery import ENTRY_POINT_GROUP, parse_entry_points
    from opmarket.registry._errors import (
        AmbiguousOpNameError,
        InvalidGraphError,
        KernelError,
        KernelNotFoundError,
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
        Node,
        dumps_graph,
        graph_from_json,
        graph_to_json,
        load_graph,
        parse_input,
        save_graph,
    )
    from opmarket.registry._graph_validation import (
        GraphProblem,
        fill_defaults,
        graph_problems,
        topological_order,
        validate_graph,
    )
    from opmarket.registry._manifest import MANIFEST, find_manifest, manifest_locations
    from opmarket.registry._native import OpLibrary, load_library
    from opmarket.registry._plugins import PluginInfo, PluginStatus, load_plugins_from
    from opmarket.registry._prepare import prepare
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
    "AmbiguousOpNameError",
    "ConformanceReport",
    "ConformanceResult",
    "ConformanceStatus",
    "Graph",
    "GraphProblem",
    "InvalidGraphError",
    "KernelError",
    "KernelNotFoundError",
    "LibraryError",
    "Node",
    "OpLibrary",
    "OpResolver",
    "PluginInfo",
    "PluginStatus",
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
    "prepare",
    "register",
    "register_custom_call_target",
    "run_graph",
    "save_graph",
    "selective_resolver",
    "topological_order",
    "validate_graph",
]

# name -> the module that defines it (imported when the name is first read)
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AmbiguousOpNameError": "opmarket.registry._errors",
        "BUILTIN_OPS": "opmarket.registry._builtins",
        "ConformanceReport": "opmarket.registry._conformance",
        "ConformanceResult": "opmarket.registry._conformance",
        "ConformanceStatus": "opmarket.registry._conformance",
        "DEVICE_PREFERENCE": "opmarket.registry._device",
        "ENTRY_POINT_GROUP": "opmarket.registry._discovery",
        "GRAPH_FORMAT": "opmarket.registry._graph",
        "Graph": "opmarket.registry._graph",
        "GraphProblem": "opmarket.registry._graph_validation",
        "InvalidGraphError": "opmarket.registry._errors",
        "KernelError": "opmarket.registry._errors",
        "KernelNotFoundError": "opmarket.registry._errors",
        "LibraryError": "opmarket.registry._errors",
        "MANIFEST": "opmarket.registry._manifest",
        "Node": "opmarket.registry._graph",
        "OpLibrary": "opmarket.registry._native",
        "OpResolver": "opmarket.registry._resolver",
        "PRODUCER_VERSION": "opmarket.registry._graph",
        "PluginInfo": "opmarket.registry._plugins",
        "PluginStatus": "opmarket.registry._plugins",
        "RegistrationError": "opmarket.registry._errors",
        "Registry": "opmarket.registry._registry",
        "capi_bridge": "opmarket.registry._capi_bridge",
        "capi_bridge_include": "opmarket.registry._capi_bridge",
        "check_conformance": "opmarket.registry._conformance",
        "check_gradient": "opmarket.registry._gradients",
        "compute_gradient": "opmarket.registry._gradients",
        "current_device": "opmarket.registry._device",
        "custom_call": "opmarket.registry._custom_call",
        "device": "opmarket.registry._device",
        "dumps_graph": "opmarket.registry._graph",
        "fill_defaults": "opmarket.registry._graph_validation",
        "find_manifest": "opmarket.registry._manifest",
        "get_registry": "opmarket.registry._runtime",
        "gradients": "opmarket.registry._gradients",
        "graph_from_json": "opmarket.registry._graph",
        "graph_problems": "opmarket.registry._graph_validation",
        "graph_to_json": "opmarket.registry._graph",
        "infer_graph_shapes": "opmarket.registry._executor",
        "inferred_attrs": "opmarket.registry._signature",
        "isolated_registry": "opmarket.registry._runtime",
        "load_graph": "opmarket.registry._graph",
        "load_library": "opmarket.registry._native",
        "load_plugins": "opmarket.registry._runtime",
        "load_plugins_from": "opmarket.registry._plugins",
        "manifest_locations": "opmarket.registry._manifest",
        "max_error": "opmarket.registry._gradients",
        "native_kernel_handle": "opmarket.registry._capi_bridge",
        "native_shape_fn_handle": "opmarket.registry._capi_bridge",
        "new_registry": "opmarket.registry._runtime",
        "parse_entry_points": "opmarket.registry._discovery",
        "parse_input": "opmarket.registry._graph",
        "plugins": "opmarket.registry._runtime",
        "prepare": "opmarket.registry._prepare",
        "register": "opmarket.registry._runtime",
        "register_custom_call_target": "opmarket.registry._custom_call",
        "run_graph": "opmarket.registry._executor",
        "save_graph": "opmarket.registry._graph",
        "selective_resolver": "opmarket.registry._resolver",
        "topological_order": "opmarket.registry._graph_validation",
        "validate_graph": "opmarket.registry._graph_validation",
    },
    # Old public names (opmarket 0.1): still there, with a DeprecationWarning, until 1.0.
    deprecated={
        "AmbiguousOpName": "AmbiguousOpNameError",
        "InvalidGraph": "InvalidGraphError",
        "KernelNotFound": "KernelNotFoundError",
    },
)
