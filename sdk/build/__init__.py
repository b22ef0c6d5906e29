"""Build-time helpers for plugin authors: compiling CUDA libraries and loading them, C++/CUDA
compiled on the fly (``load_inline``), the C and C++ compiler commands (``compiler``), and a
setuptools ``setup()`` for a package that carries one plain shared library
(``library_setup``). See docs/native.md and docs/gpu.md.

Until opmarket 1.0 the names that were in ``opmarket.sdk`` before 0.2 are also read from
there (deprecated).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmarket.sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from opmarket.sdk.build._cuda import CudaBuildError as CudaBuildError
    from opmarket.sdk.build._cuda import CudaLibrary as CudaLibrary
    from opmarket.sdk.build._cuda import DeviceEntry as DeviceEntry
    from opmarket.sdk.build._cuda import build_cuda_library as build_cuda_library
    from opmarket.sdk.build._cuda import device_entry as device_entry
    from opmarket.sdk.build._cuda import entry_of as entry_of
    from opmarket.sdk.build._cuda import find_nvcc as find_nvcc
    from opmarket.sdk.build._cuda import load_cuda_library as load_cuda_library
    from opmarket.sdk.build._inline import InlineBuildError as InlineBuildError
    from opmarket.sdk.build._inline import load as load
    from opmarket.sdk.build._inline import load_inline as load_inline
    from opmarket.sdk.build._setup import compiler as compiler
    from opmarket.sdk.build._setup import library_setup as library_setup

# module -> its public names: __all__ and the names' loading on first use come from here.
EXPORTS = {
    "opmarket.sdk.build._cuda": (
        "CudaBuildError",
        "CudaLibrary",
        "DeviceEntry",
        "build_cuda_library",
        "device_entry",
        "entry_of",
        "find_nvcc",
        "load_cuda_library",
    ),
    "opmarket.sdk.build._inline": ("InlineBuildError", "load", "load_inline"),
    "opmarket.sdk.build._setup": ("compiler", "library_setup"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
