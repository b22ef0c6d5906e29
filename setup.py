"""opmarket's compiled parts.

- The C-ABI host (registry/_capi_host.c), the CPython extension opmarket.registry._capi_host
  through which C-ABI plugins (opmarket/c_api.h) are loaded and run, and framework bridges
  call their kernels (opmarket/capi_bridge.h): against CPython's limited API (an abi3 wheel
  for every CPython >= 3.11) and numpy's C API (numpy >= 2 headers; the binary runs on
  numpy >= 1.23).
- The bridges' native shims (opmarket._bridge._shim_sources.SHIPPED): plain shared libraries
  with no Python in them, against opmarket's own declarations of each framework's stable C
  API, so that they build without the framework and link none (each finds its framework's
  functions in the process when it loads). They take the abi3 file name only to ride in the
  same wheel.

All are built when opmarket is installed, so neither a C-ABI plugin nor a bridge needs a
compiler at run time. Everything else is in pyproject.toml.
"""

import importlib.util
from pathlib import Path

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

LIMITED_API = 0x030B0000  # CPython 3.11: PyType_GetName and the buffer of the stable ABI
ABI_TAG = "cp311"


def _shim_sources():  # the module, loaded by path: opmarket is not importable while it builds
    spec = importlib.util.spec_from_file_location(
        "_shim_sources", "bridges/_bridge/_shim_sources.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHIM_SOURCES = _shim_sources()
# The shims whose source is generated (trampolines): written under build_temp first.
GENERATED = {
    "tensorflow": SHIM_SOURCES.tensorflow_source,
    "torch": SHIM_SOURCES.torch_source,
}


class BuildExt(build_ext):
    """Compile with the warnings on (gcc and clang): the host is kept clean under them. Hidden
    visibility: the host exports PyInit__capi_host and nothing else, each shim its opm_*
    entry points."""

    def build_extensions(self) -> None:
        # None of these links libpython: a run path of the building Python (a pyenv's
        # LDFLAGS carry one) would only point the installed files at the build machine.
        for attr in ("linker_so", "linker_so_cxx"):
            command = getattr(self.compiler, attr, None)
            if command:
                setattr(self.compiler, attr, [a for a in command if not a.startswith("-Wl,-rpath")])
        for ext in self.extensions:
            bridge = ext.name.split(".")[1]
            if bridge in GENERATED:
                # Kept in build/ (an editable install's build_temp is a new folder each time)
                # and written only when it changed: its time tells build_ext whether the shim
                # is out of date, so an unchanged one is not compiled again.
                out = Path("build", "generated", f"{ext.name}.cc")
                out.parent.mkdir(parents=True, exist_ok=True)
                text = GENERATED[bridge](Path("bridges", bridge))
                if not out.is_file() or out.read_text() != text:
                    out.write_text(text)
                ext.sources = [str(out)]
            if self.compiler.compiler_type == "unix":
                std = "-std=c++17" if ext.language == "c++" else "-std=c11"
                ext.extra_compile_args = [
                    std,
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


def _shim(bridge: str, name: str, c_source: str) -> Extension:
    # A generated (C++) source replaces the placeholder in BuildExt.
    source = f"bridges/{bridge}/{c_source}" if c_source else "bridges/_bridge/_shim_sources.py"
    return Extension(
        f"opmarket.{bridge}.{name}",
        sources=[source],
        depends=[str(p) for p in Path("bridges", bridge).glob("_*.[ch]*")],
        include_dirs=["sdk/include", f"bridges/{bridge}"],
        libraries=["dl"],  # dlopen/dlsym: in libc from glibc 2.34, libdl before
        language="c" if c_source else "c++",
        py_limited_api=True,
    )


shims = [_shim(*row) for row in SHIM_SOURCES.SHIPPED]

setup(
    ext_modules=[host, *shims],
    cmdclass={"build_ext": BuildExt},
    options={"bdist_wheel": {"py_limited_api": ABI_TAG}},
)
