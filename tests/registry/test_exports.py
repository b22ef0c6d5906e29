"""The public surface of opmarket.registry and of the opmarket facade, pinned."""

from __future__ import annotations

import opmarket
import opmarket.registry


def test_registry_exports() -> None:
    assert opmarket.registry.__all__ == [
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
    for name in opmarket.registry.__all__:
        assert getattr(opmarket.registry, name) is not None


def test_facade_exports() -> None:
    assert opmarket.__all__ == [
        "device",
        "hookimpl",
        "kernel",
        "load_library",
        "load_plugins",
        "op",
        "ops",
        "register",
    ]
    from opmarket.sdk import hookimpl, kernel, op

    assert (opmarket.op, opmarket.kernel, opmarket.hookimpl) == (op, kernel, hookimpl)
    assert opmarket.register is opmarket.registry.register
    assert opmarket.load_plugins is opmarket.registry.load_plugins
    assert opmarket.device is opmarket.registry.device
    assert opmarket.load_library is opmarket.registry.load_library
    assert "ops" in dir(opmarket)
