"""What is installed, from the entry points and the plugins' manifests: the rows of
``opmarket plugins`` and ``opmarket ops``.

:func:`op_rows` never imports plugin code: it reads each plugin's ``opmarket.opset.json``.
:func:`plugin_rows` loads the plugins (unless ``load=False``) to report which load and why
the others fail.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opmarket.registry._discovery import EntryPointRecord, scan
from opmarket.registry._manifest import MANIFEST, MANIFEST_FIX, read_manifest
from opmarket.registry._plugins import discover, plugins_disabled, selected
from opmarket.sdk import DType, KernelDef, OpDef, OpmarketError

__all__ = [
    "OpRow",
    "PluginRow",
    "describe_kernel",
    "describe_kernels",
    "kernel_dtypes",
    "nothing_listed",
    "op_rows",
    "plugin_rows",
    "signature",
]


# --- what is installed ------------------------------------------------------------------


@dataclass(slots=True)
class PluginRow:
    """One plugin as ``opmarket plugins`` shows it."""

    name: str
    distribution: str
    version: str
    module: str
    status: str  # loaded, failed, not loaded
    ops: list[str] = field(default_factory=list)
    kernels: dict[str, int] = field(default_factory=dict)  # device -> count
    errors: list[str] = field(default_factory=list)
    # Kernels the manifest lists on devices for which the loaded plugin registered none
    # (a GPU kernel on a machine without a GPU), by device.
    unavailable: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "status": self.status,
            "ops": self.ops,
            "kernels": self.kernels,
            "unavailable_kernels": self.unavailable,
            "errors": self.errors,
        }

    def describe_kernels(self) -> str:
        shown = [f"{d} {n}" for d, n in self.kernels.items()]
        shown += [f"{d} {n} (unavailable)" for d, n in self.unavailable.items()]
        return ", ".join(shown) or "-"


def _by_device(kernels: Sequence[KernelDef]) -> dict[str, int]:
    return dict(sorted(Counter(k.device for k in kernels).items()))


def plugin_rows(*, load: bool = True) -> list[PluginRow]:
    """Every discovered plugin: its manifest's ops and kernels, and (when ``load``) whether
    it loads, with what it registered."""
    entries = discover()
    rows: list[PluginRow] = []
    for entry in entries:
        row = PluginRow(entry.name, entry.distribution, entry.version, entry.value, "not loaded")
        try:
            manifest = read_manifest(entry)
            row.ops = sorted(o.name for o in manifest.ops)
            row.kernels = _by_device(manifest.kernels)
        except OpmarketError as exc:
            # The table prints each error after the plugin's own label: say it once.
            label = f"plugin {entry.name} ({entry.distribution} {entry.version}): "
            row.errors.append(str(exc).splitlines()[0].removeprefix(label))
        rows.append(row)
    if not load:
        return rows
    from opmarket.registry._runtime import load_plugins

    infos = {info.name: info for info in load_plugins()}
    for row in rows:
        info = infos.get(row.name)
        if info is None:
            continue
        row.status = info.status
        if info.error:
            row.errors.insert(0, info.error)
        if info.status == "loaded":
            if row.ops and row.ops != list(info.ops):
                row.errors.append(
                    f"{MANIFEST} lists {row.ops}, the plugin registers "
                    f"{list(info.ops)}; regenerate the manifest: {MANIFEST_FIX}"
                )
            registered = _by_device(info.kernels)
            row.unavailable = {d: n for d, n in row.kernels.items() if d not in registered}
            row.ops, row.kernels = list(info.ops), registered
    return rows


@dataclass(frozen=True, slots=True)
class OpRow:
    """One op of one plugin, as ``opmarket ops`` shows it."""

    op: OpDef
    entry: EntryPointRecord
    kernels: tuple[KernelDef, ...]

    @property
    def signature(self) -> str:
        return signature(self.op)

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op.name,
            "plugin": self.entry.name,
            "distribution": self.entry.distribution,
            "version": self.entry.version,
            "signature": self.signature,
            "kernels": [_kernel_json(k) for k in self.kernels],
        }


def signature(op: OpDef) -> str:
    """``(to_zero: T) -> (zeroed: T); T: {float, int32} = DT_INT32``: args and attrs as
    REGISTER_OP spec strings."""
    ins = ", ".join(a.spec for a in op.inputs)
    outs = ", ".join(a.spec for a in op.outputs)
    attrs = "; ".join(a.spec for a in op.attrs)
    return f"({ins}) -> ({outs})" + (f"; {attrs}" if attrs else "")


def _kernel_json(k: KernelDef) -> dict[str, Any]:
    return {
        "device": k.device,
        "constraints": {n: [t.spec_name for t in ts] for n, ts in k.constraints},
        "label": k.label,
        "priority": k.priority,
    }


def describe_kernels(kernels: Sequence[KernelDef]) -> str:
    """The kernels, those on one device (label, priority) merged: ``CPU(T: float, int32)``."""
    groups: dict[tuple[str, str, int], dict[str, list[DType]]] = {}
    for k in kernels:
        merged = groups.setdefault((k.device, k.label, k.priority), {})
        for name, types in k.constraints:
            have = merged.setdefault(name, [])
            have.extend(t for t in types if t not in have)
    return (
        ", ".join(
            describe_kernel(
                KernelDef(
                    "",
                    device,
                    tuple((n, tuple(ts)) for n, ts in cons.items()),
                    label=label,
                    priority=priority,
                )
            )
            for (device, label, priority), cons in groups.items()
        )
        or "-"
    )


def describe_kernel(k: KernelDef) -> str:
    """``CPU(T: float, double)``; a label and a priority when they are set."""
    parts = [f"{n}: {', '.join(t.spec_name for t in ts)}" for n, ts in k.constraints]
    if k.label:
        parts.append(f"label {k.label}")
    if k.priority:
        parts.append(f"priority {k.priority}")
    return f"{k.device}({'; '.join(parts)})" if parts else k.device


def kernel_dtypes(op: OpDef, k: KernelDef) -> set[DType] | None:
    """The dtypes a kernel of ``op`` computes with (None: any dtype)."""
    out: set[DType] = set()
    for arg in (*op.inputs, *op.outputs):
        if arg.type is not DType.INVALID:
            out.add(arg.type)
    for attr in op.attrs:
        if attr.base_type != "type":
            continue
        types = k.constraint(attr.name) or attr.allowed_values
        if types is None:
            return None
        out.update(types)
    return out


def op_rows(device: str | None = None, dtype: DType | None = None) -> tuple[list[OpRow], list[str]]:
    """Every op the discovered plugins' manifests list, with the kernels on ``device`` that
    handle ``dtype`` (ops left without a kernel are dropped when a filter is given), and the
    problems met (a plugin without a readable manifest). Imports no plugin."""
    rows: list[OpRow] = []
    problems: list[str] = []
    for entry in discover():
        try:
            manifest = read_manifest(entry)
        except OpmarketError as exc:
            problems.append(str(exc).splitlines()[0])
            continue
        for op in manifest.ops:
            kernels = tuple(
                k
                for k in manifest.kernels_for(op.name)
                if (device is None or k.device == device)
                and (dtype is None or (found := kernel_dtypes(op, k)) is None or dtype in found)
            )
            if kernels or (device is None and dtype is None):
                rows.append(OpRow(op, entry, kernels))
    rows.sort(key=lambda r: (r.op.name, r.entry.name))
    return rows, problems


# --- rendering --------------------------------------------------------------------------


def nothing_listed(what: str) -> str:
    """Why nothing is listed: discovery off, OPMARKET_PLUGINS matching nothing installed
    (with what is), or nothing installed."""
    if plugins_disabled():
        return "plugin discovery is off (OPMARKET_DISABLE_PLUGINS)"
    if selected() is not None:
        installed = sorted({e.name for e in scan().entries})
        if installed:
            return (
                f"no installed plugin matches OPMARKET_PLUGINS="
                f"{os.environ.get('OPMARKET_PLUGINS', '')!r}; installed: "
                f"{', '.join(installed)}"
            )
    return f"no {what}"
