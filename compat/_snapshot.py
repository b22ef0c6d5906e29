"""Snapshots: the canonical op-set of one release, taken from a wheel, a distribution or a
module, for plugin repos to commit and compat-check to compare against.

A distribution or wheel is read from its manifest (``opmarket.opset.json``) without importing
it. A module is imported and asked, as the run-time registry asks a plugin: its ``register``
hook (or, failing that, the OpSet, OpDef, op builder, KernelDef and declared kernel objects
it defines) goes through :class:`opmarket.registry.Registry`, which validates kernels against
their ops. This is how a plugin's manifest is made.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from opmarket.compat._dists import MANIFEST, opset_from_dist, opset_from_wheel
from opmarket.compat._sources import latest_versions
from opmarket.registry import Registry
from opmarket.registry._plugins import plugin_declarations
from opmarket.sdk import (
    DocumentError,
    KernelDef,
    OpBuilder,
    OpDef,
    OpmarketError,
    OpSet,
    opset_from_json,
)

__all__ = ["opset_from_module", "take_snapshot"]


def _module_items(module: ModuleType) -> tuple[list[Any], list[KernelDef]]:
    """Top-level declarations of a module whose hook registers nothing (or that has none):
    ops, then declared kernels."""
    items: list[Any] = []
    ops: list[OpDef] = []
    kernel_defs: list[KernelDef] = []
    for value in vars(module).values():
        if isinstance(value, OpSet):
            ops.extend(value.ops)
            kernel_defs.extend(value.kernels)
        elif isinstance(value, OpDef):
            ops.append(value)
        elif isinstance(value, OpBuilder):
            ops.append(value.build())
        elif isinstance(value, KernelDef):
            kernel_defs.append(value)
        elif getattr(value, "__opmarket_declarations__", None):
            items.append(value)
    return [*latest_versions(ops), *items], kernel_defs


def _distribution_of(module: str) -> tuple[str, str]:
    """(name, version) of the installed distribution that provides ``module``, if any."""
    top = module.partition(".")[0]
    for dist_name in importlib.metadata.packages_distributions().get(top, []):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return dist.metadata["Name"], dist.version
    return "", ""


def opset_from_module(name: str) -> OpSet:
    """The op-set a module provides, as the registry sees it (see the module docstring); the
    opmarket.opset.json beside it when it declares nothing."""
    try:
        module = importlib.import_module(name)
        items = plugin_declarations(name)  # its register hook's, as loading it would
    except ImportError as exc:
        raise DocumentError(name, f"cannot import it: {exc}") from None
    except (OpmarketError, TypeError, ValueError) as exc:
        raise DocumentError(name, str(exc).splitlines()[0]) from None
    kernel_defs: list[KernelDef] = []
    if not items:
        items, kernel_defs = _module_items(module)
    dist_name, version = _distribution_of(name)
    if items or kernel_defs:
        registry = Registry()
        try:
            registry.register(*items, source=name)
        except (OpmarketError, TypeError, ValueError) as exc:
            raise DocumentError(name, str(exc).splitlines()[0]) from None
        snap = registry.snapshot(source=name)
        if len(snap):
            return OpSet(snap.ops, (*snap.kernels, *kernel_defs), name=dist_name, version=version)
    folder = Path(module.__file__).parent if module.__file__ else None
    if folder is not None and (folder / MANIFEST).is_file():
        text = (folder / MANIFEST).read_text(encoding="utf-8")
        return opset_from_json(text, source=str(folder / MANIFEST))
    raise DocumentError(name, f"the module registers no ops and ships no {MANIFEST}")


def _is_module(target: str) -> bool:
    if "-" in target or "==" in target:
        return False
    try:
        return importlib.util.find_spec(target) is not None
    except (ImportError, ValueError):
        return False


def take_snapshot(target: str, *, version: str | None = None) -> OpSet:
    """The op-set of ``target``: a wheel file, an importable module, or an installed
    distribution (``opmarket_atan`` is the module; ``opmarket-atan`` the distribution)."""
    path = Path(target)
    if path.suffix == ".whl":
        if not path.is_file():
            raise DocumentError(target, "no such file")
        opset = opset_from_wheel(path)
    elif _is_module(target):
        opset = opset_from_module(target)
    else:
        try:
            importlib.metadata.distribution(target)
        except (importlib.metadata.PackageNotFoundError, ValueError):
            raise DocumentError(
                target, "not a wheel, an importable module or an installed distribution"
            ) from None
        opset = opset_from_dist(target)
    if version:
        opset = OpSet(opset.ops, opset.kernels, name=opset.name, version=version)
    return opset
