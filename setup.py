"""opmarket's one compiled part: the C-ABI host (registry/_capi_host.c), the CPython extension
opmarket.registry._capi_host through which C-ABI plugins (opmarket/c_api.h) are loaded and
run, and framework bridges call their kernels (opmarket/capi_bridge.h).

It is built when opmarket is installed, so a C-ABI plugin needs no compiler at run time:
against CPython's limited API (an abi3 wheel for every CPython >= 3.11) and numpy's C API
(numpy >= 2 headers; the binary runs on numpy >= 1.23). Everything else is in pyproject.toml.
"""

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

LIMITED_API = 0x030B0000  # CPython 3.11: PyType_GetName and the buffer of the stable ABI
ABI_TAG = "cp311"


class BuildExt(build_ext):
    """Compile with the warnings on (gcc and clang): the host is kept clean under them. Hidden
    visibility: the module exports PyInit__capi_host and nothing else."""

    def build_extensions(self) -> None:
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                ext.extra_compile_args = [
                    "-std=c11",
                    "-Wall",
                    "-Wextra",
                    "-fvisibility=hidden",
                    *ext.extra_compile_args,
                ]
        super().build_extensions()


# One extension from five files, split by job (registry/_capi_host.h lists them).
SOURCES = [
    "_capi_host.c",
    "_capi_host_load.c",
    "_capi_host_shape.c",
    "_capi_host_kernel.c",
    "_capi_host_numpy.c",
]

host = Extension(
    "opmarket.registry._capi_host",
    sources=[f"registry/{name}" for name in SOURCES],
    depends=[
        "registry/_capi_host.h",
        "sdk/include/opmarket/c_api.h",
        "sdk/include/opmarket/capi_bridge.h",
    ],
    include_dirs=["sdk/include", numpy.get_include()],
    define_macros=[("Py_LIMITED_API", hex(LIMITED_API))],
    py_limited_api=True,
)

setup(
    ext_modules=[host],
    cmdclass={"build_ext": BuildExt},
    options={"bdist_wheel": {"py_limited_api": ABI_TAG}},
)
