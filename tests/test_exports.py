"""The public surface of the SDK, the compat engine and the facade: adding or removing a name
is a decision, made here on purpose (registry and web pin theirs beside their tests)."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

import opmarket
import opmarket.compat
import opmarket.registry
import opmarket.sdk
import opmarket.web

SDK = [
    "DEVICES",
    "NUMBER_TYPES",
    "QUANTIZED_TYPES",
    "REAL_NUMBER_TYPES",
    "ArgDef",
    "AttrDef",
    "AttrType",
    "CudaBuildError",
    "CudaLibrary",
    "CustomCallTarget",
    "DType",
    "Deprecation",
    "Dim",
    "Document",
    "DocumentError",
    "FullType",
    "FuncValue",
    "GradientOp",
    "GradientSpec",
    "InferenceContext",
    "InlineBuildError",
    "InputGeneratorSpec",
    "InvalidArgumentError",
    "InvalidDeclarationError",
    "InvalidOpDefError",
    "Kernel",
    "KernelDef",
    "KernelSpec",
    "NotFoundError",
    "OpBuilder",
    "OpDef",
    "OpSet",
    "OpmarketError",
    "Problem",
    "ReferenceSpec",
    "Shape",
    "ShapeFn",
    "ShapeFnSpec",
    "TaggedValue",
    "TensorShape",
    "TensorValue",
    "UnknownDTypeError",
    "as_dtype",
    "broadcast_shape",
    "broadcasting",
    "build_cuda_library",
    "check_attr_value",
    "custom_call",
    "custom_call_target",
    "finalize_op",
    "find_nvcc",
    "format_shape",
    "get_include",
    "hookimpl",
    "infer_error",
    "infer_ok",
    "input_generator",
    "intra_op_threads",
    "is_valid_op_name",
    "kernel",
    "library_declarations",
    "library_setup",
    "load",
    "load_cuda_library",
    "load_inline",
    "merge_all_inputs",
    "not_differentiable",
    "op",
    "opdefs_from_pbtxt",
    "opdefs_to_pbtxt",
    "opset_from_json",
    "opset_to_json",
    "parse_document",
    "parse_shape",
    "read_document",
    "read_opset",
    "reference",
    "register_gradient",
    "render_document",
    "scalar_shape",
    "set_intra_op_threads",
    "shape_fn",
    "snake_case",
    "unchanged",
    "unknown_shape",
    "validate_opdef",
]
FACADE = ["device", "hookimpl", "kernel", "load_library", "load_plugins", "op", "ops", "register"]


def test_sdk_public_names_are_pinned() -> None:
    assert sorted(opmarket.sdk.__all__) == sorted(SDK)
    for name in SDK:
        assert getattr(opmarket.sdk, name) is not None


def test_facade_public_names_are_pinned_and_lazy() -> None:
    assert sorted(opmarket.__all__) == sorted(FACADE)
    # Importing opmarket loads nothing heavy: no numpy, no plugin, no registry.
    code = (
        "import sys, opmarket\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('numpy', 'google', 'pluggy')"
        " or m.startswith('opmarket.')]\n"
        "print(heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    )
    assert done.stdout.strip() == "[]"


def test_every_error_is_under_opmarket_error() -> None:
    import opmarket.registry

    for module in (opmarket.sdk, opmarket.registry, opmarket.compat):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, Exception):
                assert issubclass(value, opmarket.sdk.OpmarketError), f"{module.__name__}.{name}"


def test_compat_names_exist() -> None:
    assert opmarket.compat.__all__
    for name in opmarket.compat.__all__:
        assert hasattr(opmarket.compat, name), name


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        (opmarket.sdk, "InvalidArgument", "InvalidArgumentError"),
        (opmarket.sdk, "InvalidOpDef", "InvalidOpDefError"),
        (opmarket.sdk, "NotFound", "NotFoundError"),
        (opmarket.sdk, "UnknownDType", "UnknownDTypeError"),
        (opmarket.registry, "AmbiguousOpName", "AmbiguousOpNameError"),
        (opmarket.registry, "InvalidGraph", "InvalidGraphError"),
        (opmarket.registry, "KernelNotFound", "KernelNotFoundError"),
    ],
)
def test_old_error_names_still_work_with_a_deprecation_warning(
    module: ModuleType, old: str, new: str
) -> None:
    """Errors are named ``*Error`` since 0.2; the 0.1 names stay until 1.0, warning."""
    with pytest.warns(DeprecationWarning, match=f"use {module.__name__}.{new}"):
        alias = getattr(module, old)
    assert alias is getattr(module, new)
    assert old not in module.__all__


def test_every_exported_exception_is_named_error() -> None:
    for module in (opmarket.sdk, opmarket.registry, opmarket.compat, opmarket.web):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, Exception):
                assert name.endswith("Error"), f"{module.__name__}.{name}"
