"""Test wheels with real device code: a tiny CUDA kernel compiled once per session with
nvcc into a shared library (SASS for sm_80 and sm_90, PTX for compute_75, the CUDA runtime
linked shared), packed into hand-made plugin wheels."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from .plugins import handmade_wheel, manifest_for, plugin_source

NVCC = shutil.which("nvcc") or (
    "/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None
)

_KERNEL = """\
extern "C" __global__ void opm_twice(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
extern "C" int opm_launch_twice(float* x, int n) {
    opm_twice<<<(n + 255) / 256, 256>>>(x, n);
    return (int)cudaGetLastError();
}
"""

#: What the library is built for: the API's ``gpu`` lists must say the same.
GENCODE = (
    "-gencode",
    "arch=compute_80,code=sm_80",
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_75,code=compute_75",
)

RUNTIME = "nvidia-cuda-runtime>=13,<14"


def build_cuda_library(workdir: Path, *link: str) -> Path:
    """``libopm_twice.so`` with device code, ``link`` passed to the linker (``-z``,
    ``noseparate-code``); needs nvcc (the caller skips without it)."""
    assert NVCC is not None
    source = workdir / "twice.cu"
    source.write_text(_KERNEL)
    library = workdir / "libopm_twice.so"
    subprocess.run(
        [
            NVCC,
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "--cudart",
            "shared",
            *GENCODE,
            *(f"-Xlinker={arg}" for arg in link),
            "-o",
            str(library),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return library


def build_host_library(workdir: Path) -> Path:
    """A shared library without device code (plain C, by the system compiler)."""
    source = workdir / "host.c"
    source.write_text(
        "#include <stdlib.h>\n"
        "int opm_host(int x) { int *p = malloc(sizeof x); *p = 2 * x; x = *p; free(p); "
        "return x; }\n"
    )
    library = workdir / "libopm_host.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    return library


def build_stray_library(workdir: Path, strays: int) -> Path:
    """A C library (the system compiler) whose read-only data holds ``strays`` fatbin
    magics that begin no fatbin (each followed by version 2): it loads, and the ELF
    reader's search for fatbins passes over each."""
    source = workdir / "strays.c"
    words = ", ".join(["0xBA55ED50u, 2u"] * strays)
    source.write_text(f"const unsigned int opm_strays[{2 * strays}] = {{{words}}};\n")
    library = workdir / "libopm_strays.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    return library


def gpu_plugin_wheel(
    workdir: Path,
    dist: str,
    version: str,
    *,
    library: Path | None,
    requires: tuple[str, ...] = (RUNTIME,),
    gpu_kernel: bool = True,
    filename: str = "",
    variant: dict[str, object] | bytes | None = None,
    more: tuple[Path, ...] = (),
) -> Path:
    """A plugin wheel whose CPU kernel is Python and whose manifest also declares a GPU
    kernel (``gpu_kernel``) carried by ``library`` (and ``more`` libraries beside it);
    ``variant``: a variant.json (or its bytes, as given)."""
    package = dist.replace("-", "_")
    op_name = f"Test>{package.title().replace('_', '')}"
    workdir.mkdir(parents=True, exist_ok=True)
    module = workdir / f"{package}_{version}.py"
    module.write_text(plugin_source(op_name, 2))
    manifest = json.loads(manifest_for(module, dist, version))
    if gpu_kernel:
        manifest["kernels"].append(
            {"op": op_name, "device": "GPU", "constraints": {"T": ["float"]}}
        )
    info = f"{package}-{version}.dist-info"
    extra: dict[str, bytes] = {
        f"{package}/__init__.py": module.read_bytes(),
        f"{package}/opmarket.opset.json": json.dumps(manifest, indent=2).encode(),
        f"{info}/entry_points.txt": f"[opmarket]\n{package} = {package}\n".encode(),
    }
    for each in (library, *more) if library is not None else more:
        extra[f"{package}/{each.name}"] = each.read_bytes()
    if variant is not None:
        raw = variant if isinstance(variant, bytes) else json.dumps(variant, indent=2).encode()
        extra[f"{info}/variant.json"] = raw
    metadata = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    out = workdir / (filename or "plain")
    out.mkdir(parents=True, exist_ok=True)
    return handmade_wheel(out, dist, version, extra, metadata=metadata, filename=filename)


def nvidia_variant(label: str) -> dict[str, object]:
    """A variant.json for ``label``: CUDA 13, sm_80 and sm_90, in the structure variantlib
    0.2 checks (a provider per namespace; the plugin itself is a placeholder)."""
    return {
        "$schema": "https://variants-schema.wheelnext.dev/v0.2.0.json",
        "default-priorities": {"namespace": ["nvidia"]},
        "providers": {
            "nvidia": {
                "requires": ["nvidia-variant-provider>=0.0.1,<1.0.0"],
                "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
            }
        },
        "variants": {
            label: {
                "nvidia": {
                    "cuda_version_lower_bound": ["13.0"],
                    "sm_arch": ["80_real", "90_real"],
                }
            }
        },
    }
