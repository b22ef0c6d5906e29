"""Run time: op and kernel registries, dispatch, generated wrappers, graphs, gradients,
resolvers, custom calls and conformance (see docs/runtime.md).

Names are imported on first use: importing one module of the package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmarket.sdk._lazy import Moved, lazy_exports

if TYPE_CHECKING:
    from opmarket.registry._bounded import BoundedCache as BoundedCache
    from opmarket.registry._builtins import BUILTIN_OPS as BUILTIN_OPS
    from opmarket.registry._capi_bridge import capi_bridge as capi_bridge
    from opmarket.registry._capi_bridge import capi_bridge_include as capi_bridge_include
    from opmarket.registry._capi_bridge import native_kernel_handle as native_kernel_handle
    from opmarket.registry._capi_bridge import native_shape_fn_handle as native_shape_fn_handle
    from opmarket.registry._conformance import ConformanceReport as ConformanceReport
    from opmarket.registry._conformance import ConformanceResult as ConformanceResult
    from opmarket.registry._conformance import ConformanceStatus as ConformanceStatus
    from opmarket.registry._conformance import check_conformance as check_conformance
    from opmarket.registry._custom_call import custom_call as custom_call
    from opmarket.registry._custom_call import (
        register_custom_call_target as register_custom_call_target,
    )
    from opmarket.registry._device import DEVICE_PREFERENCE as DEVICE_PREFERENCE
    from opmarket.registry._device import current_device as current_device
    from opmarket.registry._device import device as device
    from opmarket.registry._discovery import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
    from opmarket.registry._discovery import parse_entry_points as parse_entry_points
    from opmarket.registry._errors import AmbiguousOpNameError as AmbiguousOpNameError
    from opmarket.registry._errors import InvalidGraphError as InvalidGraphError
    from opmarket.registry._errors import KernelError as KernelError
    from opmarket.registry._errors import KernelNotFoundError as KernelNotFoundError
    from opmarket.registry._errors import LibraryError as LibraryError
    from opmarket.registry._errors import RegistrationError as RegistrationError
    from opmarket.registry._executor import infer_graph_shapes as infer_graph_shapes
    from opmarket.registry._executor import run_graph as run_graph
    from opmarket.registry._gradients import check_gradient as check_gradient
    from opmarket.registry._gradients import compute_gradient as compute_gradient
    from opmarket.registry._gradients import gradients as gradients
    from opmarket.registry._gradients import max_error as max_error
    from opmarket.registry._graph import GRAPH_FORMAT as GRAPH_FORMAT
    from opmarket.registry._graph import PRODUCER_VERSION as PRODUCER_VERSION
    from opmarket.registry._graph import Graph as Graph
    from opmarket.registry._graph import Node as Node
    from opmarket.registry._graph import dumps_graph as dumps_graph
    from opmarket.registry._graph import graph_from_json as graph_from_json
    from opmarket.registry._graph import graph_to_json as graph_to_json
    from opmarket.registry._graph import load_graph as load_graph
    from opmarket.registry._graph import parse_input as parse_input
    from opmarket.registry._graph import save_graph as save_graph
    from opmarket.registry._graph_validation import GraphProblem as GraphProblem
    from opmarket.registry._graph_validation import fill_defaults as fill_defaults
    from opmarket.registry._graph_validation import graph_problems as graph_problems
    from opmarket.registry._graph_validation import topological_order as topological_order
    from opmarket.registry._graph_validation import validate_graph as validate_graph
    from opmarket.registry._manifest import MANIFEST as MANIFEST
    from opmarket.registry._manifest import find_manifest as find_manifest
    from opmarket.registry._manifest import manifest_locations as manifest_locations
    from opmarket.registry._native import OpLibrary as OpLibrary
    from opmarket.registry._native import load_library as load_library
    from opmarket.registry._plugins import PluginInfo as PluginInfo
    from opmarket.registry._plugins import PluginStatus as PluginStatus
    from opmarket.registry._plugins import load_plugins_from as load_plugins_from
    from opmarket.registry._prepare import prepare as prepare
    from opmarket.registry._registry import Registry as Registry
    from opmarket.registry._resolver import OpResolver as OpResolver
    from opmarket.registry._resolver import selective_resolver as selective_resolver
    from opmarket.registry._runtime import get_registry as get_registry
    from opmarket.registry._runtime import isolated_registry as isolated_registry
    from opmarket.registry._runtime import load_plugins as load_plugins
    from opmarket.registry._runtime import new_registry as new_registry
    from opmarket.registry._runtime import plugins as plugins
    from opmarket.registry._runtime import register as register
    from opmarket.registry._signature import inferred_attrs as inferred_attrs

# module -> its public names: __all__ and the names' loading on first use come from here
# (tests/test_exports.py checks the imports above against it).
EXPORTS = {
    "opmarket.registry._bounded": ("BoundedCache",),
    "opmarket.registry._builtins": ("BUILTIN_OPS",),
    "opmarket.registry._capi_bridge": (
        "capi_bridge",
        "capi_bridge_include",
        "native_kernel_handle",
        "native_shape_fn_handle",
    ),
    "opmarket.registry._conformance": (
        "ConformanceReport",
        "ConformanceResult",
        "ConformanceStatus",
        "check_conformance",
    ),
    "opmarket.registry._custom_call": ("custom_call", "register_custom_call_target"),
    "opmarket.registry._device": ("DEVICE_PREFERENCE", "current_device", "device"),
    "opmarket.registry._discovery": ("ENTRY_POINT_GROUP", "parse_entry_points"),
    "opmarket.registry._errors": (
        "AmbiguousOpNameError",
        "InvalidGraphError",
        "KernelError",
        "KernelNotFoundError",
        "LibraryError",
        "RegistrationError",
    ),
    "opmarket.registry._executor": ("infer_graph_shapes", "run_graph"),
    "opmarket.registry._gradients": (
        "check_gradient",
        "compute_gradient",
        "gradients",
        "max_error",
    ),
    "opmarket.registry._graph": (
        "GRAPH_FORMAT",
        "PRODUCER_VERSION",
        "Graph",
        "Node",
        "dumps_graph",
        "graph_from_json",
        "graph_to_json",
        "load_graph",
        "parse_input",
        "save_graph",
    ),
    "opmarket.registry._graph_validation": (
        "GraphProblem",
        "fill_defaults",
        "graph_problems",
        "topological_order",
        "validate_graph",
    ),
    "opmarket.registry._manifest": ("MANIFEST", "find_manifest", "manifest_locations"),
    "opmarket.registry._native": ("OpLibrary", "load_library"),
    "opmarket.registry._plugins": ("PluginInfo", "PluginStatus", "load_plugins_from"),
    "opmarket.registry._prepare": ("prepare",),
    "opmarket.registry._registry": ("Registry",),
    "opmarket.registry._resolver": ("OpResolver", "selective_resolver"),
    "opmarket.registry._runtime": (
        "get_registry",
        "isolated_registry",
        "load_plugins",
        "new_registry",
        "plugins",
        "register",
    ),
    "opmarket.registry._signature": ("inferred_attrs",),
}
# Old public names (opmarket 0.1; errors are named *Error since 0.2): still there, with a
# DeprecationWarning that says when they go.
DEPRECATED = {
    "AmbiguousOpName": Moved("AmbiguousOpNameError", "1.0"),
    "InvalidGraph": Moved("InvalidGraphError", "1.0"),
    "KernelNotFound": Moved("KernelNotFoundError", "1.0"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, EXPORTS, DEPRECATED)
