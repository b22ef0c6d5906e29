"""What the catalog shows of a validated file: its ops, signatures and kernels, taken from
(or checked against) the op-set its manifest declares, which the manifest step holds equal
to what registered, never from the plugin's process's own account alone.

The plugin's process writes the report the sandbox sends back: its ops and kernel rows are
only what the plugin's code says of itself. So the ops listed are the manifest's, with
signatures and summaries made here; a kernel row is listed only for an op of the manifest
(or a kernel it declares for its base plugin's op, for a GPU companion), for a device the
run tested, and where the manifest declares kernels for that op, for a declared device;
each (op, device, dtypes) once. A manifest past :data:`MAX_OPS` ops, or rows past
:data:`MAX_KERNEL_ROWS`, fail the step: no real plugin comes near, and a page of 60,000
rows took seconds to render. A manifest (or reported op-set) past :data:`MAX_OPSET_BYTES`
is refused before it is parsed: 1,000 ops fit in about 1 MiB, and a 6.6 MiB one took 81 MiB
of the server's memory to parse. What validation cannot prove is whether a listed row's
``passed`` is true: the plugin's code ran the conformance it reports.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from opmarket.web.validation._steps import KernelRow, OpRow

__all__ = [
    "MAX_KERNEL_ROWS",
    "MAX_OPS",
    "MAX_OPSET_BYTES",
    "manifest_size_problems",
    "not_run",
    "shown_kernels",
    "shown_ops",
    "signature",
]

#: The most ops one file's manifest may declare (TensorFlow itself has about 1,500).
MAX_OPS = 1_000
#: The most bytes one manifest or reported op-set may have: parsed only below this.
MAX_OPSET_BYTES = 4 * 1024 * 1024
#: The most kernel rows (op, device, dtypes) one file may list.
MAX_KERNEL_ROWS = 4_096


def manifest_size_problems(wheel: Path) -> list[str]:
    """The wheel's op-set manifests (``opmarket.opset.json`` anywhere in it) past
    :data:`MAX_OPSET_BYTES`, read from the archive's directory without unpacking them."""
    with zipfile.ZipFile(wheel) as zf:
        return [
            f"{info.filename}: {info.file_size} bytes; a manifest may have at most "
            f"{MAX_OPSET_BYTES // 2**20} MiB (1,000 ops, the most one file may declare, "
            "fit in about 1 MiB)"
            for info in zf.infolist()
            if info.filename.rpartition("/")[2] == "opmarket.opset.json"
            and info.file_size > MAX_OPSET_BYTES
        ]


def signature(op: Any) -> str:
    """``Name(x: T) -> (y: T) [T: {float}]``: an OpDef on one line."""
    ins = ", ".join(a.spec for a in op.inputs)
    outs = ", ".join(a.spec for a in op.outputs)
    attrs = "; ".join(a.spec for a in op.attrs)
    return f"{op.name}({ins}) -> ({outs})" + (f" [{attrs}]" if attrs else "")


def shown_ops(manifest: Any) -> list[OpRow]:
    """The catalog's op rows of the manifest's op-set ``manifest``."""
    return [OpRow(o.name, signature(o), o.summary) for o in manifest.ops]


def shown_kernels(
    manifest: Any, reported: Iterable[KernelRow], devices: tuple[str, ...]
) -> tuple[list[KernelRow], int]:
    """The reported kernel rows the catalog may list (see the module), and how many others
    were left out."""
    allowed = _allowed(manifest)
    kept: list[KernelRow] = []
    seen: set[tuple[str, str, str]] = set()
    left_out = 0
    for row in reported:
        key = (row.op, row.device, row.dtypes)
        if not allowed(row.op, row.device) or row.device not in devices or key in seen:
            left_out += 1
            continue
        seen.add(key)
        kept.append(row)
    return kept, left_out


def _allowed(manifest: Any) -> Callable[[str, str], bool]:
    """Whether the manifest lets an (op, device) kernel be listed (see the module)."""
    own = {o.name for o in manifest.ops}
    declared = {(k.op, k.device) for k in manifest.kernels}
    with_kernels = {op for op, _ in declared}
    return lambda op, device: (op, device) in declared or (op in own and op not in with_kernels)


def not_run(
    kernels: list[KernelRow], registered: Iterable[tuple[str, str]], manifest: Any
) -> list[KernelRow]:
    """Rows ``not run`` for the kernels declared (by the manifest, or reported registered
    where it allows) that ``kernels`` has no row for: devices this worker has not."""
    allowed = _allowed(manifest)
    declared = [(op, device, "") for op, device in registered if allowed(op, device)]
    declared += [
        (
            k.op,
            k.device,
            ", ".join(f"{a}={'|'.join(t.spec_name for t in ts)}" for a, ts in k.constraints),
        )
        for k in manifest.kernels  # its own ops' (which registered: checked by the manifest
        # step), and a companion's kernels for ops its base plugin declares
    ]
    seen = {(k.op, k.device) for k in kernels}
    rows = []
    for op, device, dtypes in declared:
        if (op, device) in seen:
            continue
        seen.add((op, device))
        rows.append(
            KernelRow(
                op,
                device,
                dtypes,
                status=f"{device.lower()}: not run",
                message="no worker with that device validated it",
            )
        )
    return rows[:MAX_KERNEL_ROWS]
