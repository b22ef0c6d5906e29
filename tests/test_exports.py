"""The public surface of each package: ``__all__``, the map it comes from (``EXPORTS``) and
the names the package imports for type checkers agree (as httpx's test_exported_members);
adding or removing a public name is a change to one map, made on purpose."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from types import ModuleType

import pytest

import opmarket
import opmarket.compat
import opmarket.registry
import opmarket.sdk
import opmarket.sdk.build
import opmarket.testing
import opmarket.web
from opmarket.sdk._lazy import all_order

PACKAGES = [
    opmarket.sdk,
    opmarket.sdk.build,
    opmarket.registry,
    opmarket.compat,
    opmarket.web,
    opmarket.testing,
]
FACADE = ["device", "hookimpl", "kernel", "load_library", "load_plugins", "op", "ops", "register"]


def type_checking_imports(module: ModuleType) -> dict[str, str]:
    """name -> module of each ``from M import N as N`` under ``if TYPE_CHECKING:``."""
    found: dict[str, str] = {}
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.unparse(stmt)
                for alias in stmt.names:
                    # `as` the same name: the explicit re-export a strict type checker needs.
                    assert alias.asname == alias.name, ast.unparse(stmt)
                    found[alias.name] = stmt.module
    return found


@pytest.mark.parametrize("package", PACKAGES, ids=lambda m: m.__name__)
def test_all_the_map_and_the_type_checking_imports_agree(package: ModuleType) -> None:
    mapped = {name: module for module, names in package.EXPORTS.items() for name in names}
    assert package.__all__ == sorted(mapped, key=all_order)
    assert type_checking_imports(package) == mapped


@pytest.mark.parametrize("package", PACKAGES, ids=lambda m: m.__name__)
def test_every_public_name_is_where_the_map_says(package: ModuleType) -> None:
    for module, names in package.EXPORTS.items():
        defining = importlib.import_module(module)
        for name in names:
            assert getattr(package, name) is getattr(defining, name), f"{package.__name__}.{name}"


def test_a_name_listed_under_two_modules_is_refused() -> None:
    from opmarket.sdk._lazy import lazy_exports

    with pytest.raises(ValueError, match="a public name is listed under two modules"):
        lazy_exports("fake", {"fake._a": ("x",), "fake._b": ("x",)})


def test_facade_public_names_are_pinned_and_lazy() -> None:
    assert opmarket.__all__ == FACADE
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
    from opmarket.sdk import hookimpl, kernel, op

    assert (opmarket.op, opmarket.kernel, opmarket.hookimpl) == (op, kernel, hookimpl)
    assert opmarket.register is opmarket.registry.register
    assert opmarket.load_plugins is opmarket.registry.load_plugins
    assert opmarket.device is opmarket.registry.device
    assert opmarket.load_library is opmarket.registry.load_library
    assert "ops" in dir(opmarket)


def test_every_error_is_under_opmarket_error() -> None:
    # opmarket.testing's OpCheckError is an AssertionError (pytest shows it as a failure).
    for module in (opmarket.sdk, opmarket.sdk.build, opmarket.registry, opmarket.compat):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, Exception):
                assert issubclass(value, opmarket.sdk.OpmarketError), f"{module.__name__}.{name}"


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
    with pytest.warns(
        DeprecationWarning, match=f"goes in opmarket 1.0; use {module.__name__}.{new}"
    ):
        alias = getattr(module, old)
    assert alias is getattr(module, new)
    assert old not in module.__all__


# Names sdk.build gained after the move: opmarket.sdk never had them.
BUILD_ONLY = {"DeviceEntry", "compiler", "device_entry", "entry_of"}


@pytest.mark.parametrize("name", sorted(set(opmarket.sdk.build.__all__) - BUILD_ONLY))
def test_build_helpers_moved_to_sdk_build_still_work_from_sdk_warning(name: str) -> None:
    with pytest.warns(
        DeprecationWarning,
        match=f"opmarket.sdk.{name} is deprecated and goes in opmarket 1.0; "
        f"use opmarket.sdk.build.{name}",
    ):
        alias = getattr(opmarket.sdk, name)
    assert alias is getattr(opmarket.sdk.build, name)
    assert name not in opmarket.sdk.__all__


def test_the_package_version_is_the_release_its_deprecations_name() -> None:
    """The deprecations above say "since 0.2": the package says it is 0.2."""
    import importlib.metadata

    assert opmarket.__version__ == importlib.metadata.version("opmarket") == "0.2.0"


def test_every_exported_exception_is_named_error() -> None:
    for module in PACKAGES:
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, Exception):
                assert name.endswith("Error"), f"{module.__name__}.{name}"
