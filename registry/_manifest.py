"""Plugin manifests: the ``opmarket.opset.json`` a plugin ships beside its entry point
module, read without importing the plugin, and made from what its code registers.

The convention (shared with ``opmarket.compat``'s wheel and distribution sources): the
package of the entry point's module holds ``opmarket.opset.json``, the canonical op-set
JSON of the ops and kernels the plugin registers.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from opmarket.registry._capi import load_declarations
from opmarket.registry._discovery import EntryPointRecord
from opmarket.registry._plugins import (
    collect,
    is_library_entry,
    kernel_def,
    library_path,
    plugin_manager,
)
from opmarket.sdk import DocumentError, OpSet, opset_from_json
from opmarket.sdk._kernel import KernelSpec

__all__ = ["MANIFEST", "manifest_path", "opset_from_code", "read_manifest"]

MANIFEST = "opmarket.opset.json"


def _candidates(base: str, parts: list[str]) -> list[Path]:
    # The module's own folder when it is a package, else the folder of its package.
    return [Path(base, *parts[:depth], MANIFEST) for depth in (len(parts), len(parts) - 1)
            if depth > 0]


def manifest_path(entry: EntryPointRecord) -> Path | None:
    """Where the entry point's package keeps its manifest, found without importing it."""
    parts = entry.module.split(".")
    # An installed wheel: the package lies beside the .dist-info folder.
    for candidate in _candidates(os.path.dirname(entry.metadata_dir), parts):
        if candidate.is_file():
            return candidate
    # Editable and other installs: where the import system finds the top-level package
    # (find_spec on a top-level name does not run it).
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    rel = parts[1:]
    for base in spec.submodule_search_locations:
        for candidate in (Path(base, *rel, MANIFEST), Path(base, *rel[:-1], MANIFEST)):
            if candidate.is_file():
                return candidate
    return None


def read_manifest(entry: EntryPointRecord) -> OpSet:
    """The op-set the entry point's manifest lists; DocumentError when it has none or it
    cannot be read."""
    label = f"plugin {entry.name} ({entry.distribution} {entry.version})"
    path = manifest_path(entry)
    if path is None:
        raise DocumentError(label, f"entry point module {entry.module!r} ships no {MANIFEST}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(str(path), f"unreadable: {exc}") from None
    opset = opset_from_json(text, source=str(path))
    return OpSet(opset.ops, opset.kernels, name=entry.distribution, version=entry.version)


def opset_from_code(module: str) -> OpSet:
    """What the plugin module's ``register`` hook registers, as an op-set (imports it): the
    manifest a plugin should ship. ``module`` may be a library entry point's value
    (``package:libname.so``): the library's declarations, then its package's hook."""
    from opmarket.registry._runtime import new_registry  # _runtime reads manifests

    items: list[Any] = []
    if is_library_entry(module):
        items.extend(load_declarations(library_path(module)))
        module = module.partition(":")[0].strip()
        imported = importlib.import_module(module)
        if hasattr(imported, "register"):
            items.extend(collect(plugin_manager(), imported, module))
    else:
        items = collect(plugin_manager(), importlib.import_module(module), module)
    reg = new_registry()
    reg.register(*items, source=module)  # validates, as loading the plugin would
    # Its own kernels, also those for another plugin's (or a built-in) op.
    kernels = tuple(kernel_def(k) for k in items if isinstance(k, KernelSpec))
    return OpSet(reg.snapshot(source=module).ops, kernels)


def _write(module: str, target: str) -> None:
    """Write ``module``'s manifest to ``target``, keeping the committed manifest's kernels
    for devices the code registered none for here (a GPU kernel on a machine without one)."""
    from opmarket.sdk import opset_to_json

    opset = opset_from_code(module)
    path = Path(target)
    if path.is_file():
        old = opset_from_json(path.read_text(encoding="utf-8"), source=target)
        devices = {k.device for k in opset.kernels}
        kept = tuple(k for k in old.kernels
                     if k.device not in devices and k.op in opset and k.device != "CPU")
        opset = OpSet(opset.ops, opset.kernels + kept)
    path.write_text(opset_to_json(opset), encoding="utf-8")
    print(f"{target}: {len(opset.ops)} op(s), {len(opset.kernels)} kernel(s)")


if __name__ == "__main__":  # scripts/manifests
    import sys

    _write(sys.argv[1], sys.argv[2])
