"""The bridges' shims ship compiled in opmarket's install (issue 24, "no compiler at run
time"): built by setup.py against opmarket's own declarations of each framework's C API, they
link no framework and carry no search path of the machine they were built on; the TensorFlow
shim finds TensorFlow's functions when it loads and names the ones a TensorFlow lacks; and
each bridge runs a first-party op in a fresh virtual environment with no compiler on PATH and
an empty cache, from opmarket's wheel."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import NamedTuple

import pytest

import opmarket._bridge
from opmarket._bridge import shipped_shim
from opmarket._bridge._shim_sources import SHIPPED
from opmarket.registry._elf import read_library
from tests.first_party import needs_first_party

BRIDGES = Path(opmarket._bridge.__file__).parent.parent
REPO = Path(__file__).resolve().parents[2]
#: What a shipped shim may link: the C and C++ runtimes, nothing of a framework or a build tree.
SYSTEM_LIBRARIES = {
    "libc.so.6",
    "libdl.so.2",
    "libm.so.6",
    "libpthread.so.0",
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
}


def _dynamic(path: Path) -> tuple[set[str], list[str]]:
    """A shared library's NEEDED names and its RPATH/RUNPATH entries (opmarket's own ELF
    reader, the one env-check and the index use)."""
    library = read_library(path)
    assert library.needed, (path, library.problem)  # every shim needs libc at least
    return set(library.needed), list(library.runpath)


@pytest.mark.parametrize(("bridge", "name"), [(b, n) for b, n, _ in SHIPPED])
def test_the_installed_shims_link_no_framework_and_carry_no_search_path(
    bridge: str, name: str
) -> None:
    path, why = shipped_shim(BRIDGES / bridge, name)
    assert path is not None, why
    needed, paths = _dynamic(path)
    assert paths == []
    assert needed <= SYSTEM_LIBRARIES, needed - SYSTEM_LIBRARIES


def _compile(tmp_path: Path, name: str, source: str, *flags: str) -> Path:
    cxx = shutil.which(os.environ.get("CXX", "c++"))
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    src = tmp_path / f"{name}.cc"
    src.write_text(source)
    out = tmp_path / f"{name}.so"
    done = subprocess.run(
        [cxx, "-std=c++17", "-shared", "-fPIC", *flags, str(src), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_the_tensorflow_declarations_match_tensorflow_s_own_headers(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")
    source = """
#include <cstddef>
#include <type_traits>
#include "tensorflow/c/kernels.h"
#include "tensorflow/c/ops.h"
#include "tensorflow/c/tf_buffer.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"
#define OPM_TF_CHECK_DECLARATIONS
#include "_tf_c_api.h"
#define SAME(ret, name, params) \\
  static_assert(std::is_same<decltype(&::name), ret(*) params>::value, #name);
OPM_TF_FUNCTIONS(SAME)
#define VALUE(name, value) static_assert(::name == value, #name);
OPM_TF_CONSTANTS(VALUE)
static_assert(sizeof(TF_Bool) == 1, "TF_Bool");
static_assert(offsetof(TF_Buffer, length) == sizeof(void*), "TF_Buffer.length");
static_assert(offsetof(TF_Buffer, data_deallocator) == 2 * sizeof(void*), "TF_Buffer");
"""
    include = [f"-I{tf.sysconfig.get_include()}", f"-I{BRIDGES / 'tensorflow'}"]
    _compile(tmp_path, "check", source, "-fsyntax-only", *include)


def test_the_torch_declarations_match_torch_s_own_headers(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs the torch extra")
    from torch.utils import cpp_extension

    source = """
#include <cstddef>
#include <type_traits>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/version.h>
#define OPM_TORCH_CHECK_DECLARATIONS
#include "_torch_c_api.h"
#define SAME(ret, name, params) \\
  static_assert(std::is_same<decltype(&::name), ret(*) params>::value, #name);
OPM_TORCH_FUNCTIONS(SAME)
#define SAME_CUDA(ret, name, params, library) SAME(ret, name, params)
OPM_TORCH_CUDA_FUNCTIONS(SAME_CUDA)
static_assert(OPM_TORCH_ABI_VERSION == TORCH_VERSION_2_10_0, "the ABI version");
static_assert(AOTI_TORCH_SUCCESS == 0, "AOTI_TORCH_SUCCESS");
static_assert(std::is_same<AOTITorchError, int32_t>::value, "AOTITorchError");
static_assert(std::is_same<StableIValue, uint64_t>::value, "StableIValue");
"""
    include = [f"-I{i}" for i in cpp_extension.include_paths()]
    # USE_CUDA: torch's header declares its CUDA functions too (the shim binds them optionally)
    _compile(
        tmp_path, "check", source, "-fsyntax-only", "-DUSE_CUDA", *include, f"-I{BRIDGES / 'torch'}"
    )


class Lacking(NamedTuple):
    """A shim, its framework's library and the binder that fills it in."""

    bridge: str
    name: str
    soname: str
    bind: str
    present: str
    absent: set[str]


LACKING = [
    Lacking(
        "tensorflow",
        "_opm_tf_shim",
        "libtensorflow_framework.so.2",
        "opm_tf_bind",
        "TF_NewStatus",
        {"TF_GetCode", "TF_RegisterKernelBuilder", "TF_AllocateOutput"},
    ),
    Lacking(
        "torch",
        "_opm_torch_shim",
        "libtorch_cpu.so",
        "opm_torch_bind",
        "aoti_torch_get_dim",
        {"torch_library_impl", "aoti_torch_empty_strided", "aoti_torch_dtype_float32"},
    ),
]


#: Each struct the JAX handler reads or writes, and the fields it uses.
XLA_FIELDS = {
    "XLA_FFI_Extension_Base": ("struct_size", "type", "next"),
    "XLA_FFI_Api_Version": ("struct_size", "extension_start", "major_version", "minor_version"),
    "XLA_FFI_Error_Create_Args": ("struct_size", "extension_start", "message", "errc"),
    "XLA_FFI_Buffer": ("struct_size", "extension_start", "dtype", "data", "rank", "dims"),
    "XLA_FFI_ByteSpan": ("ptr", "len"),
    "XLA_FFI_Scalar": ("dtype", "value"),
    "XLA_FFI_Array": ("dtype", "size", "data"),
    "XLA_FFI_Args": ("struct_size", "extension_start", "size", "types", "args"),
    "XLA_FFI_Rets": ("struct_size", "extension_start", "size", "types", "rets"),
    "XLA_FFI_Attrs": ("struct_size", "extension_start", "size", "types", "names", "attrs"),
    "XLA_FFI_Api": (
        "struct_size",
        "extension_start",
        "api_version",
        "XLA_FFI_Error_Create",
        "XLA_FFI_Stream_Get",
        "XLA_FFI_DeviceOrdinal_Get",
    ),
    "XLA_FFI_Stream_Get_Args": ("struct_size", "extension_start", "ctx", "stream"),
    "XLA_FFI_DeviceOrdinal_Get_Args": ("struct_size", "extension_start", "ctx", "device_ordinal"),
    "XLA_FFI_CallFrame": ("struct_size", "extension_start", "api", "ctx", "stage", "args",
                          "rets", "attrs"),
    "XLA_FFI_Metadata": ("struct_size", "api_version", "traits", "state_type_id"),
    "XLA_FFI_Metadata_Extension": ("extension_base", "metadata"),
}  # fmt: skip
#: The enum values the handler uses.
XLA_CONSTANTS = (
    "XLA_FFI_Extension_Metadata",
    "XLA_FFI_Error_Code_INVALID_ARGUMENT",
    "XLA_FFI_Error_Code_FAILED_PRECONDITION",
    "XLA_FFI_Error_Code_INTERNAL",
    "XLA_FFI_AttrType_ARRAY",
    "XLA_FFI_AttrType_SCALAR",
    "XLA_FFI_AttrType_STRING",
    "XLA_FFI_ExecutionStage_EXECUTE",
    "XLA_FFI_DataType_PRED",
    "XLA_FFI_DataType_S8",
    "XLA_FFI_DataType_S16",
    "XLA_FFI_DataType_S32",
    "XLA_FFI_DataType_S64",
    "XLA_FFI_DataType_U8",
    "XLA_FFI_DataType_U16",
    "XLA_FFI_DataType_U32",
    "XLA_FFI_DataType_U64",
    "XLA_FFI_DataType_F16",
    "XLA_FFI_DataType_F32",
    "XLA_FFI_DataType_F64",
    "XLA_FFI_DataType_C64",
    "XLA_FFI_DataType_BF16",
    "XLA_FFI_DataType_C128",
    "XLA_FFI_DataType_F8E5M2",
    "XLA_FFI_DataType_F8E4M3FN",
)


def _xla_ffi_version(header: Path, prefix: str) -> tuple[int, int]:
    text = header.read_text()
    major = re.search(rf"#define {prefix}MAJOR (\d+)", text)
    minor = re.search(rf"#define {prefix}MINOR (\d+)", text)
    assert major and minor, header
    return int(major[1]), int(minor[1])


def _xla_ffi_versions(include: Path) -> tuple[tuple[int, int], tuple[int, int]]:
    """The XLA FFI API version the shipped header serves, and the one jaxlib's declares."""
    served = _xla_ffi_version(BRIDGES / "jax" / "_xla_ffi_c_api.h", "OPM_XLA_FFI_")
    return served, _xla_ffi_version(include / "xla" / "ffi" / "api" / "c_api.h", "XLA_FFI_API_")


def test_the_xla_ffi_declarations_match_jaxlib_s_own_header(tmp_path: Path) -> None:
    """Every field the handler uses at the same offset, every constant the same value, as
    the installed jaxlib's c_api.h (when it declares the API version the header serves)."""
    jax = pytest.importorskip("jax", reason="needs the jax extra")
    include = Path(jax.ffi.include_dir())
    served, installed = _xla_ffi_versions(include)
    if served != installed:
        pytest.skip(
            f"this jaxlib declares XLA FFI API {installed[0]}.{installed[1]}, the shipped "
            f"header serves {served[0]}.{served[1]}"
        )
    lines = [
        "#include <cstddef>",
        '#include "xla/ffi/api/c_api.h"',
        "constexpr long up_major = XLA_FFI_API_MAJOR, up_minor = XLA_FFI_API_MINOR;",
        "constexpr long create_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;",
        "constexpr long version_size = XLA_FFI_Api_Version_STRUCT_SIZE;",
        "constexpr long stream_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;",
        "constexpr long ordinal_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE;",
        "#undef XLA_FFI_API_MAJOR",
        "#undef XLA_FFI_API_MINOR",
        "namespace opm {",
        '#include "_xla_ffi_c_api.h"',
        'static_assert(XLA_FFI_API_MAJOR == ::up_major, "major");',
        'static_assert(XLA_FFI_API_MINOR == ::up_minor, "minor");',
        'static_assert(XLA_FFI_Error_Create_Args_STRUCT_SIZE == ::create_size, "create size");',
        'static_assert(XLA_FFI_Api_Version_STRUCT_SIZE == ::version_size, "version size");',
        'static_assert(XLA_FFI_Stream_Get_Args_STRUCT_SIZE == ::stream_size, "stream size");',
        'static_assert(XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE == ::ordinal_size, "ordinal");',
        "}",
    ]
    for struct, fields in XLA_FIELDS.items():
        for f in fields:
            lines.append(
                f"static_assert(offsetof(opm::{struct}, {f}) == offsetof(::{struct}, {f}), "
                f'"{struct}.{f}");'
            )
    for name in XLA_CONSTANTS:
        lines.append(f'static_assert((long)opm::{name} == (long)::{name}, "{name}");')
    _compile(tmp_path, "check", "\n".join(lines) + "\n", "-fsyntax-only", f"-I{include}",
             f"-I{BRIDGES / 'jax'}")  # fmt: skip


@pytest.mark.parametrize("case", LACKING, ids=[c.bridge for c in LACKING])
def test_a_framework_that_lacks_functions_is_told_which(tmp_path: Path, case: Lacking) -> None:
    """A library with the framework's soname that has one of the shim's functions: the
    shipped shim loads, and its binding names the other functions and counts them."""
    bridge, name, soname, bind, present, absent = case
    fake = _compile(
        tmp_path,
        soname,
        f'extern "C" int {present}(void) {{ return 0; }}\n',
        f"-Wl,-soname,{soname}",
    )
    path, why = shipped_shim(BRIDGES / bridge, name)
    assert path is not None, why
    code = f"""
import ctypes, os
shim = ctypes.CDLL({str(path)!r}, mode=os.RTLD_NOW)
shim.{bind}.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
buf = ctypes.create_string_buffer(4096)
print(shim.{bind}(buf, 4096))
ctypes.CDLL({str(fake)!r})
print(shim.{bind}(buf, 4096))
print(buf.value.decode())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    unloaded, lacking, names = done.stdout.splitlines()
    assert unloaded == "-1"  # no such framework in the process
    assert present not in names.split()
    assert absent <= set(names.split())
    assert int(lacking) == len(names.split()) > 10


@needs_first_party
def test_without_a_shipped_handler_or_a_compiler_jax_runs_c_abi_kernels_through_callbacks(
    tmp_path: Path,
) -> None:
    """With no FFI handler shipped (OPMARKET_SHIPPED_SHIMS=0 here) and no compiler to build
    one, a C-ABI kernel runs through a host callback, and the build that failed said what it
    tried and why, in one line."""
    pytest.importorskip("jax", reason="needs the jax extra")
    code = (
        "import jax, numpy as np, opmarket.jax as oj\n"
        "print(oj.native_path('Opm>ZeroOut', T=np.int32, _kernel='c_abi'))\n"
        "f = jax.jit(lambda x: oj.ops.zero_out(x, preserve_index=1, _kernel='c_abi'))\n"
        "print(f(np.array([5, 4, 3], np.int32)).tolist())\n"
    )
    env = {
        **os.environ,
        "CC": str(tmp_path / "no-such-cc"),
        "OPMARKET_CACHE_DIR": str(tmp_path / "cache"),
        "OPMARKET_SHIPPED_SHIMS": "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["callback", "[0, 4, 0]"]
    said = [ln for ln in done.stderr.splitlines() if ln.startswith("opmarket:")]
    assert said == [
        "opmarket: building the JAX bridge's FFI handler (OPMARKET_SHIPPED_SHIMS=0; once per "
        "jax version)..."
    ]


@needs_first_party
@pytest.mark.parametrize(("minor", "path"), [(1, "ffi"), (-1, "callback")])
def test_the_shipped_ffi_handler_serves_a_jaxlib_of_a_newer_xla_ffi_minor(
    tmp_path: Path, minor: int, path: str
) -> None:
    """XLA FFI minor versions only add fields (read past by ``struct_size``): the shipped
    handler serves a jaxlib whose c_api.h declares a newer minor, and not an older one
    (there, with no compiler to build one, C-ABI kernels run as callbacks)."""
    jax = pytest.importorskip("jax", reason="needs the jax extra")
    include = Path(jax.ffi.include_dir())
    served, _ = _xla_ffi_versions(include)
    if served[1] + minor < 0:
        pytest.skip(f"the shipped header serves XLA FFI API {served[0]}.0: no older minor")
    header = tmp_path / "include" / "xla" / "ffi" / "api" / "c_api.h"
    header.parent.mkdir(parents=True)
    header.write_text(
        f"#define XLA_FFI_API_MAJOR {served[0]}\n#define XLA_FFI_API_MINOR {served[1] + minor}\n"
    )
    code = (
        "import jax, numpy as np\n"
        f"jax.ffi.include_dir = lambda: {str(header.parents[3])!r}\n"
        "import opmarket.jax as oj\n"
        "print(oj.native_path('Opm>ZeroOut', T=np.int32, _kernel='c_abi'))\n"
        "f = jax.jit(lambda x: oj.ops.zero_out(x, preserve_index=1, _kernel='c_abi'))\n"
        "print(f(np.array([5, 4, 3], np.int32)).tolist())\n"
    )
    env = {
        **os.environ,
        "CC": str(tmp_path / "no-such-cc"),
        "OPMARKET_CACHE_DIR": str(tmp_path / "cache"),
    }
    env.pop("OPMARKET_SHIPPED_SHIMS", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [path, "[0, 4, 0]"], done.stderr[-3000:]


@pytest.mark.slow
def test_the_wheel_carries_each_shim_with_no_search_path(
    opmarket_wheel: Path, tmp_path: Path
) -> None:
    with zipfile.ZipFile(opmarket_wheel) as wheel:
        for bridge, name, _ in SHIPPED:
            (member,) = [n for n in wheel.namelist() if n.startswith(f"opmarket/{bridge}/{name}.")]
            assert member.endswith(".abi3.so")
            (tmp_path / "shim.so").write_bytes(wheel.read(member))
            needed, paths = _dynamic(tmp_path / "shim.so")
            assert paths == [] and needed <= SYSTEM_LIBRARIES, (member, needed, paths)


FRESH = """
import shutil, sys
compilers = [c for c in ("cc", "c++", "gcc", "g++", "clang") if shutil.which(c)]
assert not compilers, f"a compiler is on PATH: {compilers}"
import numpy as np
import opmarket.tensorflow as otf
import opmarket.litert as olr
from opmarket.tensorflow import _build
out = otf.ops.zero_out(np.array([5, 4, 3], np.int32), preserve_index=1)
print(out.numpy().tolist())
print(_build.shim()._name)
it = olr.interpreter(model_path=sys.argv[1])
print(it.native_paths()["Opm>ZeroOut"])
it.allocate_tensors()
it.set_tensor(it.get_input_details()[0]["index"], np.arange(1, 5, dtype=np.int32))
it.invoke()
print(it.get_tensor(it.get_output_details()[0]["index"]).tolist())
import torch
import opmarket.torch as ot
print(ot.native_path("Opm>ZeroOut", _kernel="c_abi"))
x = torch.tensor([5, 4, 3], dtype=torch.int32)
print(torch.ops.opm.zero_out.c_abi(x, preserve_index=2).tolist())
import jax
import opmarket.jax as oj
f = jax.jit(lambda x: oj.ops.zero_out(x, preserve_index=1, _kernel="c_abi"))
print(oj.native_path("Opm>ZeroOut", T=np.int32, _kernel="c_abi"), f(x.numpy()).tolist())
"""


@pytest.mark.slow
@needs_first_party
def test_each_bridge_runs_a_first_party_op_in_a_fresh_venv_without_a_compiler(
    opmarket_wheel: Path, tmp_path: Path
) -> None:
    """opmarket from its wheel in a new venv; the frameworks and first-party plugins are the
    ones of this environment (a path entry to its site-packages, not an install: TensorFlow
    takes minutes to install here)."""
    tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")
    pytest.importorskip("ai_edge_litert", reason="needs the litert extra")
    pytest.importorskip("torch", reason="needs the torch extra")
    pytest.importorskip("jax", reason="needs the jax extra")
    import opmarket.tensorflow as otf

    @tf.function(input_signature=[tf.TensorSpec([4], tf.int32)])
    def model(x: object) -> object:
        return otf.ops.zero_out(x, preserve_index=1)

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [model.get_concrete_function()], model
    )
    converter.allow_custom_ops = True
    (tmp_path / "m.tflite").write_bytes(converter.convert())

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(opmarket_wheel),
        ],
        check=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "frameworks.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CC", "CXX", "LDSHARED", "PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(PATH=str(venv / "bin"), OPMARKET_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(
        [str(python), "-c", FRESH, str(tmp_path / "m.tflite")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    tf_out, tf_shim, litert_path, litert_out, torch_path, torch_out, jax_out = (
        done.stdout.splitlines()
    )
    assert tf_out == "[0, 4, 0]"
    assert tf_shim.startswith(site) and tf_shim.endswith("_opm_tf_shim.abi3.so"), tf_shim
    assert litert_path.startswith("native"), litert_path
    assert litert_out == "[0, 2, 0, 0]"
    assert torch_path == "native" and torch_out == "[0, 0, 3]"
    import jax

    served, installed = _xla_ffi_versions(Path(jax.ffi.include_dir()))
    # The shipped FFI handler serves a jaxlib of its XLA FFI major and the same or a newer
    # minor; for any other, with no compiler to build one, C-ABI kernels run as callbacks.
    serves = served[0] == installed[0] and installed[1] >= served[1]
    assert jax_out == ("ffi" if serves else "callback") + " [0, 4, 0]"
    assert "opmarket: building" not in done.stderr
    assert not list((tmp_path / "cache").glob("bridges/*.so"))  # nothing was compiled
