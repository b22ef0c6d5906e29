"""The full C/C++ source of each bridge's shim, from its files and generated trampolines.

setup.py builds the shims into opmarket's wheel from these texts, and a bridge builds the same
text at first use where the wheel has no shim for it; so this module imports nothing of
opmarket or of a framework (setup.py loads it by its path)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["SHIPPED", "TENSORFLOW_SLOTS", "TORCH_SLOTS", "tensorflow_source", "torch_source"]

#: Trampolines of each kind (shape functions, kernel creates) the TensorFlow shim has: at
#: most this many ops with a shape function, and this many Python-bodied kernels, per process.
TENSORFLOW_SLOTS = 1024
#: Native overloads one process can register with torch (each takes a trampoline of the shim).
TORCH_SLOTS = 1024

#: The shims opmarket's wheel carries: (bridge folder, library name, C source file, or "" for
#: a C++ source generated here).
SHIPPED = (
    ("tensorflow", "_opm_tf_shim", ""),
    ("litert", "_opm_litert_shim", "_shim.c"),
    ("torch", "_opm_torch_shim", ""),
    ("jax", "_opm_jax_ffi", "_ffi_shim.c"),
)


def _tensorflow_trampolines(slots: int) -> str:
    """C for ``slots`` shape and create trampolines and the two tables that hand them out."""
    lines = []
    for i in range(slots):
        lines.append(
            f"static void opm_shape_{i}(TF_ShapeInferenceContext* c, TF_Status* s) "
            f"{{ shape_common({i}, c, s); }}"
        )
        lines.append(
            f"static void* opm_create_{i}(TF_OpKernelConstruction* c) "
            f"{{ return create_common({i}, c); }}"
        )
    shapes = ", ".join(f"opm_shape_{i}" for i in range(slots))
    creates = ", ".join(f"opm_create_{i}" for i in range(slots))
    lines += [
        "typedef void (*opm_shape_fn)(TF_ShapeInferenceContext*, TF_Status*);",
        "typedef void* (*opm_create_fn)(TF_OpKernelConstruction*);",
        f"static const opm_shape_fn opm_shapes[{slots}] = {{{shapes}}};",
        f"static const opm_create_fn opm_creates[{slots}] = {{{creates}}};",
        "static void (*shape_trampoline(int32_t slot))(TF_ShapeInferenceContext*, TF_Status*) {",
        f"  return slot >= 0 && slot < {slots} ? opm_shapes[slot] : NULL;",
        "}",
        "static void* (*create_trampoline(int32_t slot))(TF_OpKernelConstruction*) {",
        f"  return slot >= 0 && slot < {slots} ? opm_creates[slot] : NULL;",
        "}",
    ]
    return "\n".join(lines) + "\n"


def tensorflow_source(folder: Path) -> str:
    """The TensorFlow shim: ``_shim.cc``, the trampolines, ``_shim_native.cc``,
    ``_shim_device.cc`` (from the bridge's ``folder``; it includes ``_tf_c_api.h`` from there
    too)."""
    head = (folder / "_shim.cc").read_text()
    native = (folder / "_shim_native.cc").read_text() + (folder / "_shim_device.cc").read_text()
    # The trampolines go between the Python part and the native part, inside extern "C".
    return (
        f"#define OPM_TF_SLOTS {TENSORFLOW_SLOTS}\n"
        + head
        + "\n/* ---- generated trampolines ---- */\n"
        + _tensorflow_trampolines(TENSORFLOW_SLOTS)
        + "\n"
        + native
        + '\n}  /* extern "C" */\n'
    )


def torch_source(folder: Path) -> str:
    """The PyTorch shim: ``_shim.cc``, the trampolines and their table, ``_shim_register.cc``."""
    lines = [f"#define OPM_TORCH_SLOTS {TORCH_SLOTS}", (folder / "_shim.cc").read_text()]
    lines += [f"OPM_TRAMPOLINE({i})" for i in range(TORCH_SLOTS)]
    table = ", ".join(f"opm_boxed_{i}" for i in range(TORCH_SLOTS))
    lines.append(f"static const boxed_fn opm_boxed[{TORCH_SLOTS}] = {{{table}}};")
    lines.append((folder / "_shim_register.cc").read_text())
    return "\n".join(lines) + "\n"
