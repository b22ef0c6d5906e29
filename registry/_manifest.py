"""Plugin manifests: the ``opmarket.opset.json`` a plugin ships beside its entry point
module, read without importing the plugin, and made from what its code registers.

The convention (shared with ``opmarket.compat``'s wheel and distribution sources): the
package of the entry point's module holds ``opmarket.opset.json``, the canonical op-set
JSON of the ops and kernels the plugin registers.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
from pathlib import Path, PurePosixPath

from opmarket.registry._discovery import EntryPointRecord
from opmarket.registry._plugins import plugin_declarations
from opmarket.sdk import DocumentError, OpDef, OpSet, opset_from_json
from opmarket.sdk._files import write_atomic
from opmarket.sdk._kernel import KernelSpec

__all__ = [
    "MANIFEST",
    "MANIFEST_FIX",
    "find_manifest",
    "manifest_locations",
    "manifest_path",
    "manifest_text",
    "op_difference",
    "opset_from_code",
    "read_manifest",
]

#: The file name of a plugin's manifest.
MANIFEST = "opmarket.opset.json"

#: What makes a manifest, as error messages name it.
MANIFEST_FIX = (
    "rebuild the wheel with `opmarket build` (its backend opmarket.build_meta writes the "
    "manifest), or run `opmarket manifest PATH` on the project or the wheel"
)


def manifest_locations(entry_point: str) -> list[PurePosixPath]:
    """Where the manifest of the plugin whose entry point value is ``entry_point``
    (``module``, ``module:attr`` or ``package:library.so``) may lie, first match wins,
    relative to the folder holding its top-level package (site-packages, a wheel's root):
    the module's folder when it is a package, else the folder of its package. A top-level
    plain module has no package, so no place for one."""
    parts = entry_point.partition(":")[0].strip().split(".")
    return [
        PurePosixPath(*parts[:depth], MANIFEST)
        for depth in (len(parts), len(parts) - 1)
        if depth > 0
    ]


def find_manifest(entry_point: str, site: str | os.PathLike[str] | None = None) -> Path | None:
    """The manifest file of the plugin whose entry point value is ``entry_point``, found
    without importing it: under ``site`` (the folder its distribution is installed in), else
    where the import system finds its top-level package (editable installs); None if none."""
    locations = manifest_locations(entry_point)
    if site is not None:
        for rel in locations:
            candidate = Path(site, rel)
            if candidate.is_file():
                return candidate
    if not locations:
        return None
    # find_spec on a top-level name does not run the package.
    try:
        spec = importlib.util.find_spec(locations[0].parts[0])
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:  # the top-level package's own folder(s)
        for rel in locations:
            candidate = Path(base, *rel.parts[1:])
            if candidate.is_file():
                return candidate
    return None


def manifest_path(entry: EntryPointRecord) -> Path | None:
    """Where the entry point's package keeps its manifest, found without importing it (an
    installed wheel's package lies beside its .dist-info folder)."""
    return find_manifest(entry.value, os.path.dirname(entry.metadata_dir))


def read_manifest(entry: EntryPointRecord) -> OpSet:
    """The op-set the entry point's manifest lists; DocumentError when it has none or it
    cannot be read."""
    label = f"plugin {entry.name} ({entry.distribution} {entry.version})"
    path = manifest_path(entry)
    if path is None:
        raise DocumentError(
            label, f"entry point module {entry.module!r} ships no {MANIFEST}; {MANIFEST_FIX}"
        )
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

    items = plugin_declarations(module)
    module = module.partition(":")[0].strip()
    reg = new_registry()
    # Validated as loading the plugin would; kernels for an op of another plugin (a GPU
    # companion's) are listed as they are, their op being unknown here.
    declared = {i.name for i in items if isinstance(i, OpDef)} | {o.name for o in reg}
    reg.register(
        *(i for i in items if isinstance(i, OpDef) or getattr(i, "op", None) in declared),
        source=module,
    )
    # Its own kernels, also those for another plugin's (or a built-in) op.
    kernels = tuple(k.definition for k in items if isinstance(k, KernelSpec))
    return OpSet(reg.snapshot(source=module).ops, kernels)


def manifest_text(module: str, previous: str | None = None) -> str:
    """The manifest of the plugin entry point ``module`` as canonical JSON (imports it),
    keeping from ``previous`` (the manifest it replaces, if any) the kernels for devices the
    code registered none for here (a GPU kernel built on a machine without a GPU)."""
    from opmarket.sdk import opset_to_json

    opset = opset_from_code(module)
    if previous is not None:
        old = opset_from_json(previous, source="the previous manifest")
        devices = {k.device for k in opset.kernels}
        kept = tuple(
            k
            for k in old.kernels
            if k.device not in devices
            and (k.op in opset or k.op not in old)  # its own op, or another plugin's
            and k.device != "CPU"
        )
        opset = OpSet(opset.ops, opset.kernels + kept)
    return opset_to_json(opset)


def op_difference(manifest: object, registered: object, where: str = "") -> str | None:
    """The first field in which two definitions (an op, an arg, an attr) differ, as
    ``attrs['clip_max'].default: the manifest says 6.0, the code 1.0``; None if equal."""
    if manifest == registered:
        return None
    if dataclasses.is_dataclass(manifest) and type(manifest) is type(registered):
        for f in dataclasses.fields(manifest):
            if not f.compare:
                continue
            found = op_difference(
                getattr(manifest, f.name), getattr(registered, f.name), f"{where}.{f.name}"
            )
            if found:
                return found
    elif isinstance(manifest, tuple) and isinstance(registered, tuple):
        names_a = [getattr(x, "name", None) for x in manifest]
        names_b = [getattr(x, "name", None) for x in registered]
        if len(manifest) == len(registered) and names_a == names_b:
            for i, (a, b) in enumerate(zip(manifest, registered, strict=True)):
                found = op_difference(
                    a, b, f"{where}[{names_a[i]!r}]" if names_a[i] else f"{where}[{i}]"
                )
                if found:
                    return found
        elif None not in names_a and None not in names_b:
            return f"{where.lstrip('.')}: the manifest lists {names_a}, the code {names_b}"
    field_name = where.lstrip(".") or "definition"
    return f"{field_name}: the manifest says {manifest!r}, the code {registered!r}"


def _write(module: str, target: str) -> None:
    """Write ``module``'s manifest to ``target`` (see :func:`manifest_text`)."""
    path = Path(target)
    previous = path.read_text(encoding="utf-8") if path.is_file() else None
    text = manifest_text(module, previous)
    write_atomic(path, text)
    opset = opset_from_json(text, source=target)
    print(f"{target}: {len(opset.ops)} op(s), {len(opset.kernels)} kernel(s)")


if __name__ == "__main__":  # opmarket.build_meta runs this on a built wheel
    import sys

    _write(sys.argv[1], sys.argv[2])
