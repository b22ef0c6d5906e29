"""Snapshots: the canonical op-set of one release, taken from a wheel, a distribution or a
module, for plugin repos to commit and compat-check to compare against."""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from opmarket.compat._sources import MANIFEST, latest_versions, opset_from_dist, opset_from_wheel
from opmarket.sdk import (
    DocumentError,
    KernelDef,
    OpBuilder,
    OpDef,
    OpmarketError,
    OpSet,
    opset_from_json,
)

from opmarket import registry

__all__ = ["opset_from_module", "take_snapshot"]


def _registry_snapshot(module: ModuleType, items: list[Any]) -> OpSet | None:
    """Ops and kernels as the run-time registry sees the module's declarations, when the
    registry offers that (it validates kernels against their ops)."""

    registry_cls = getattr(registry, "Registry", None)
    if registry_cls is None or not items:
        return None
    reg = registry_cls()
    try:
        reg.register(*items, source=module.__name__)
    except OpmarketError as exc:
        raise DocumentError(module.__name__, str(exc).splitlines()[0]) from None
    snap = reg.snapshot()
    return snap if isinstance(snap, OpSet) else None


def opset_from_module(name: str) -> OpSet:
    """The op-set a module provides: the opmarket.opset.json beside it, else the OpSet,
    OpDef, OpBuilder and KernelDef objects (and declared kernels) it defines at top level."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise DocumentError(name, f"not an installed distribution, wheel or importable module "
                                  f"({exc})") from None  # fmt: skip
    for folder in getattr(module, "__path__", ()) or (
        [str(Path(module.__file__).parent)] if module.__file__ else []
    ):
        manifest = Path(folder, MANIFEST)
        if manifest.is_file():
            return opset_from_json(manifest.read_text(encoding="utf-8"), source=str(manifest))
    ops: list[OpDef] = []
    kernels: list[KernelDef] = []
    declared: list[Any] = []
    for value in vars(module).values():
        if isinstance(value, OpSet):
            ops.extend(value.ops)
            kernels.extend(value.kernels)
        elif isinstance(value, OpDef):
            ops.append(value)
        elif isinstance(value, OpBuilder):
            ops.append(value.build())
        elif isinstance(value, KernelDef):
            kernels.append(value)
        elif getattr(value, "__opmarket_declarations__", None):
            declared.append(value)
    if not ops:
        raise DocumentError(name, "the module defines no ops and ships no " + MANIFEST)
    if declared:
        from_registry = _registry_snapshot(module, [*latest_versions(ops), *declared])
        if from_registry is not None:
            kernels.extend(from_registry.kernels)
    return OpSet(tuple(sorted(latest_versions(ops), key=lambda o: o.name)), tuple(kernels))


def take_snapshot(target: str, *, version: str | None = None) -> OpSet:
    """The op-set of ``target``: a wheel file, an installed distribution or a module."""
    path = Path(target)
    if path.suffix == ".whl":
        if not path.is_file():
            raise DocumentError(target, "no such file")
        opset = opset_from_wheel(path)
    else:
        try:
            opset = opset_from_dist(target)
        except DocumentError as dist_error:
            try:
                importlib.metadata.distribution(target)
            except importlib.metadata.PackageNotFoundError:
                opset = opset_from_module(target)
            else:
                raise dist_error from None
    if version:
        opset = OpSet(opset.ops, opset.kernels, name=opset.name, version=version)
    return opset
