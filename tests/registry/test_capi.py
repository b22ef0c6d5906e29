"""C-ABI plugins (opmarket/c_api.h): real C and C++ plugins compiled here with the system
compilers, loaded with ``load_library`` (dlopen and the host's table), run through dispatch,
and every way a load can fail reported with the library's path and its status message."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import opmarket
from opmarket.registry import (
    KernelError,
    LibraryError,
    Registry,
    load_library,
    load_plugins_from,
)
from opmarket.registry._capi import HOST_API_VERSION, host
from opmarket.sdk import DType, InvalidArgumentError, get_include

HERE = Path(__file__).resolve().parent
V1_INCLUDE = HERE / "data" / "c_api_v1"
V2_INCLUDE = HERE / "data" / "c_api_v2"
HEADER = Path(get_include(), "opmarket", "c_api.h")

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler"
)


def build(
    tmp_path: Path,
    source: str,
    name: str = "plugin",
    *,
    cpp: bool = False,
    include: Path | None = None,
) -> Path:
    """Compile ``source`` into a shared library as a plugin author would."""
    src = tmp_path / (f"{name}.cc" if cpp else f"{name}.c")
    src.write_text(textwrap.dedent(source), encoding="utf-8")
    out = tmp_path / f"lib{name}.so"
    compiler = ["g++", "-std=c++17"] if cpp else ["gcc", "-std=c99", "-pedantic"]
    subprocess.run(
        [
            *compiler,
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            f"-I{include or get_include()}",
            str(src),
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


SCALE = """
    #include <stdlib.h>
    #include <string.h>
    #include <opmarket/c_api.h>

    typedef struct { float factor; int64_t offset; uint8_t negate; } scale;

    static void shape(OPM_ShapeInferenceContext* ctx, OPM_Status* status) {
      OPM_ShapeHandle* in = OPM_ShapeInferenceContextGetInput(ctx, 0, status);
      if (OPM_GetCode(status) != OPM_OK) return;
      OPM_ShapeHandle* v = OPM_ShapeInferenceContextWithRank(ctx, in, 1, status);
      if (OPM_GetCode(status) != OPM_OK) return;
      OPM_ShapeInferenceContextSetOutput(ctx, 0, v, status);
    }

    static void* create(OPM_OpKernelConstruction* ctx) {
      scale* k = (scale*)calloc(1, sizeof *k);
      OPM_Status* s = OPM_NewStatus();
      char tag[8] = {0};
      size_t n = 0;
      OPM_OpKernelConstruction_GetAttrFloat(ctx, "factor", &k->factor, s);
      if (OPM_GetCode(s) == OPM_OK)
        OPM_OpKernelConstruction_GetAttrInt64(ctx, "offset", &k->offset, s);
      if (OPM_GetCode(s) == OPM_OK)
        OPM_OpKernelConstruction_GetAttrBool(ctx, "negate", &k->negate, s);
      if (OPM_GetCode(s) == OPM_OK)
        OPM_OpKernelConstruction_GetAttrString(ctx, "tag", tag, sizeof tag - 1, &n, s);
      if (OPM_GetCode(s) == OPM_OK && strcmp(tag, "ok") != 0)
        OPM_SetStatus(s, OPM_INVALID_ARGUMENT, "tag must be 'ok'");
      if (OPM_GetCode(s) != OPM_OK) OPM_OpKernelConstruction_Failure(ctx, s);
      OPM_DeleteStatus(s);
      return k;
    }

    static void compute(void* kernel, OPM_OpKernelContext* ctx) {
      const scale* k = (const scale*)kernel;
      OPM_Status* s = OPM_NewStatus();
      OPM_Tensor* x = OPM_GetInput(ctx, 0, s);
      if (OPM_GetCode(s) == OPM_OK && OPM_NumInputs(ctx) == 1 && OPM_NumOutputs(ctx) == 1) {
        int64_t n = OPM_TensorElementCount(x);
        if (n == 0) OPM_SetStatus(s, OPM_INTERNAL, "empty input");
        int64_t dims[1] = {n};
        OPM_Tensor* y = OPM_GetCode(s) == OPM_OK
            ? OPM_AllocateOutput(ctx, 0, OPM_FLOAT, dims, 1, s) : NULL;
        if (OPM_GetCode(s) == OPM_OK) {
          const float* in = (const float*)OPM_TensorData(x);
          float* out = (float*)OPM_TensorData(y);
          for (int64_t i = 0; i < n; ++i) {
            float v = in[i] * k->factor + (float)k->offset;
            out[i] = k->negate ? -v : v;
          }
        }
      }
      if (OPM_GetCode(s) != OPM_OK) OPM_OpKernelContext_Failure(ctx, s);
      OPM_DeleteStatus(s);
    }

    static void destroy(void* kernel) { free(kernel); }

    static void init(OPM_Status* status) {
      OPM_OpDefinitionBuilder* b = OPM_NewOpDefinitionBuilder("Test>Scale");
      OPM_OpDefinitionBuilderAddInput(b, "x: float");
      OPM_OpDefinitionBuilderAddOutput(b, "y: float");
      OPM_OpDefinitionBuilderAddAttr(b, "factor: float = 2.0");
      OPM_OpDefinitionBuilderAddAttr(b, "offset: int = 0");
      OPM_OpDefinitionBuilderAddAttr(b, "negate: bool = false");
      OPM_OpDefinitionBuilderAddAttr(b, "tag: string = 'ok'");
      OPM_OpDefinitionBuilderSetIsStateful(b, 1);
      OPM_OpDefinitionBuilderSetShapeInferenceFunction(b, &shape);
      OPM_RegisterOpDefinition(b, status);
      if (OPM_GetCode(status) != OPM_OK) return;
      OPM_KernelBuilder* k = OPM_NewKernelBuilder("Test>Scale", "CPU", &create, &compute,
                                                  &destroy);
      OPM_KernelBuilder_HostMemory(k, "x");
      OPM_KernelBuilder_Priority(k, 3);
      OPM_RegisterKernelBuilder("ScaleOp", k, status);
    }

    OPM_PLUGIN_INIT(init)
"""


def test_a_c_plugin_declares_an_op_and_its_kernel_runs_through_dispatch(
    tmp_path: Path, registry: Registry
) -> None:
    lib = load_library(build(tmp_path, SCALE))
    assert [o.name for o in lib.ops] == ["Test>Scale"] and lib.module is None
    op_def = registry.op_def("Test>Scale")
    assert op_def is not None and op_def.is_stateful
    assert [a.name for a in op_def.attrs] == ["factor", "offset", "negate", "tag"]
    (k,) = registry.kernels("Test>Scale")
    assert (k.device, k.host_memory, k.priority) == ("CPU", ("x",), 3)
    assert k.name == f"{lib.path.name}.ScaleOp"
    x = np.array([1.0, 2.0, 3.0], np.float32)
    assert lib.scale(x).tolist() == [2.0, 4.0, 6.0]
    # Every attr getter: float, int, bool, string.
    assert opmarket.ops.scale(x, factor=0.5, offset=1, negate=True).tolist() == [-1.5, -2.0, -2.5]
    # A non-contiguous input is made contiguous for the kernel.
    assert lib.scale(np.arange(6, dtype=np.float32)[::2]).tolist() == [0.0, 4.0, 8.0]


def test_c_statuses_become_python_errors(tmp_path: Path, registry: Registry) -> None:
    lib = load_library(build(tmp_path, SCALE))
    # The shape function's rank check, with TensorFlow's message.
    with pytest.raises(InvalidArgumentError, match="Shape must be rank 1 but is rank 2"):
        lib.scale(np.zeros((2, 2), np.float32))
    # create's failure; compute's INTERNAL, which is the kernel's fault, not the caller's.
    with pytest.raises(InvalidArgumentError, match=r"Test>Scale \(kernel ScaleOp\): tag must be"):
        lib.scale(np.ones(2, np.float32), tag="no")
    with pytest.raises(KernelError, match=r"empty input \(INTERNAL\)"):
        lib.scale(np.ones(0, np.float32))


def test_loading_the_same_library_again_registers_nothing_new(
    tmp_path: Path, registry: Registry
) -> None:
    path = build(tmp_path, SCALE)
    load_library(path)
    load_library(path)
    assert len(registry.kernels("Test>Scale")) == 1


def test_a_plugin_built_against_version_1_of_the_header_still_loads(
    tmp_path: Path, registry: Registry
) -> None:
    """The frozen copy of version 1 (tests/registry/data/c_api_v1): what a plugin built
    before version 2 appended TensorElementCount has in its binary."""
    frozen = (V1_INCLUDE / "opmarket" / "c_api.h").read_text(encoding="utf-8")
    assert "#define OPM_C_API_VERSION 1" in frozen and "TensorElementCount" not in frozen
    source = SCALE.replace("OPM_TensorElementCount(x)", "(OPM_NumDims(x) == 1 ? OPM_Dim(x, 0) : 0)")
    lib = load_library(build(tmp_path, source, "old", include=V1_INCLUDE))
    assert lib.scale(np.array([1.0, -1.0], np.float32)).tolist() == [2.0, -2.0]


def test_a_plugin_built_against_version_2_of_the_header_still_loads(
    tmp_path: Path, registry: Registry
) -> None:
    """The frozen copy of version 2 (tests/registry/data/c_api_v2): what a plugin built
    before version 3 appended the list attr getters has in its binary."""
    frozen = (V2_INCLUDE / "opmarket" / "c_api.h").read_text(encoding="utf-8")
    assert "#define OPM_C_API_VERSION 2" in frozen and "GetAttrInt64List" not in frozen
    lib = load_library(build(tmp_path, SCALE, "v2", include=V2_INCLUDE))
    assert lib.scale(np.array([1.0, -1.0], np.float32)).tolist() == [2.0, -2.0]


LIST_ATTRS = """
    #include <stdlib.h>
    #include <opmarket/c_api.h>

    typedef struct { int64_t sum; float fsum; } lists;

    static void* create(OPM_OpKernelConstruction* ctx) {
      OPM_Status* s = OPM_NewStatus();
      size_t n = 0, m = 0;
      int64_t ints[8];
      float floats[8];
      lists* k = (lists*)calloc(1, sizeof *k);
      OPM_OpKernelConstruction_GetAttrInt64List(ctx, "ints", NULL, 0, &n, s);
      if (OPM_GetCode(s) == OPM_OK)
        OPM_OpKernelConstruction_GetAttrInt64List(ctx, "ints", ints, 8, &n, s);
      if (OPM_GetCode(s) == OPM_OK)
        OPM_OpKernelConstruction_GetAttrFloatList(ctx, "floats", floats, 8, &m, s);
      if (OPM_GetCode(s) != OPM_OK) OPM_OpKernelConstruction_Failure(ctx, s);
      for (size_t i = 0; i < n && i < 8; ++i) k->sum += ints[i];
      for (size_t i = 0; i < m && i < 8; ++i) k->fsum += floats[i];
      OPM_DeleteStatus(s);
      return k;
    }
    static void compute(void* kernel, OPM_OpKernelContext* ctx) {
      lists* k = (lists*)kernel;
      OPM_Status* s = OPM_NewStatus();
      int64_t dims[1] = {2};
      OPM_Tensor* out = OPM_AllocateOutput(ctx, 0, OPM_FLOAT, dims, 1, s);
      if (out) {
        ((float*)OPM_TensorData(out))[0] = (float)k->sum;
        ((float*)OPM_TensorData(out))[1] = k->fsum;
      }
      OPM_DeleteStatus(s);
    }
    static void del(void* kernel) { free(kernel); }
    static void init(OPM_Status* status) {
      OPM_OpDefinitionBuilder* b = OPM_NewOpDefinitionBuilder("Test>Lists");
      OPM_OpDefinitionBuilderAddAttr(b, "ints: list(int)");
      OPM_OpDefinitionBuilderAddAttr(b, "floats: list(float) = []");
      OPM_OpDefinitionBuilderAddInput(b, "x: float");
      OPM_OpDefinitionBuilderAddOutput(b, "y: float");
      OPM_RegisterOpDefinition(b, status);
      if (OPM_GetCode(status) != OPM_OK) return;
      OPM_RegisterKernelBuilder("ListsOp", OPM_NewKernelBuilder("Test>Lists", "CPU", create,
                                                                 compute, del), status);
    }
    OPM_PLUGIN_INIT(init)
"""


def test_version_3_reads_list_attrs(tmp_path: Path, registry: Registry) -> None:
    lib = load_library(build(tmp_path, LIST_ATTRS, "lists"))
    x = np.zeros(1, np.float32)
    assert lib.lists(x, ints=[1, 2, 39], floats=[0.5, 0.25]).tolist() == [42.0, 0.75]
    assert lib.lists(x, ints=[]).tolist() == [0.0, 0.0]


def test_the_host_header_and_python_agree_on_the_version() -> None:
    text = HEADER.read_text(encoding="utf-8")
    (line,) = [x for x in text.splitlines() if x.startswith("#define OPM_C_API_VERSION ")]
    assert int(line.split()[-1]) == HOST_API_VERSION == host().API_VERSION == 3


def test_the_current_header_only_appends_to_version_1() -> None:
    """Stability: version 1's table is a prefix of the current one, field for field."""

    def fields(text: str) -> list[str]:
        body = text.split("typedef struct OPM_Api {", 1)[1].split("} OPM_Api;", 1)[0]
        return [
            " ".join(line.split())
            for line in body.splitlines()
            if line.strip() and not line.strip().startswith("/*")
        ]

    old = fields((V1_INCLUDE / "opmarket" / "c_api.h").read_text(encoding="utf-8"))
    new = fields(HEADER.read_text(encoding="utf-8"))
    assert new[: len(old)] == old and len(new) > len(old)


def test_the_header_is_plain_c99_and_the_cpp_layer_compiles(tmp_path: Path) -> None:
    text = HEADER.read_text(encoding="utf-8")
    assert "Python.h" not in text and "#include <" in text
    assert all(
        h in ("stddef.h", "stdint.h")
        for h in (
            line.split("<")[1].split(">")[0]
            for line in text.splitlines()
            if line.startswith("#include <")
        )
    )
    src = tmp_path / "use.c"
    src.write_text("#include <opmarket/c_api.h>\nint main(void) { return 0; }\n")
    subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-pedantic",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{get_include()}",
            "-fsyntax-only",
            str(src),
        ],
        check=True,
    )
    cpp = tmp_path / "use.cc"
    cpp.write_text("#include <opmarket/c_api.hpp>\n")
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{get_include()}",
            "-fsyntax-only",
            str(cpp),
        ],
        check=True,
    )


CPP_THROWS = """
    #include <stdexcept>
    #include <opmarket/c_api.hpp>

    class Throws : public opmarket::OpKernel {
     public:
      explicit Throws(opmarket::OpKernelConstruction* c) : OpKernel(c) {}
      void Compute(opmarket::OpKernelContext* c) override {
        opmarket::Tensor x = c->input(0);
        if (x.NumElements() > 2) throw std::runtime_error("too many elements");
        opmarket::Tensor y;
        OP_REQUIRES_OK(c, c->allocate_output(0, OPM_FLOAT, x.shape(), &y));
        for (int64_t i = 0; i < x.NumElements(); ++i) y.flat<float>()[i] = x.flat<float>()[i];
      }
    };

    static void Init(OPM_Status* status) {
      opmarket::OpDefBuilder("Test>Copy").Input("x: float").Output("y: float")
          .Register(status);
      if (OPM_GetCode(status) != OPM_OK) return;
      opmarket::RegisterKernelBuilder<Throws>(
          "Throws", opmarket::Name("Test>Copy").Device(opmarket::DEVICE_CPU), status);
    }

    OPM_PLUGIN_INIT(Init)
"""


def test_a_cpp_exception_stays_inside_the_plugin(tmp_path: Path, registry: Registry) -> None:
    lib = load_library(build(tmp_path, CPP_THROWS, "copy", cpp=True))
    assert lib.copy(np.array([1.5], np.float32)).tolist() == [1.5]
    with pytest.raises(KernelError, match="too many elements"):
        lib.copy(np.ones(3, np.float32))


def test_a_kernel_reading_a_missing_input_fails_instead_of_crashing(
    tmp_path: Path, registry: Registry
) -> None:
    """OpKernelContext::input(1) on a one-input op: the context fails, and the empty tensor
    the kernel goes on using has rank 0, no dims and no data (not a dangling pointer)."""
    source = """
        #include <opmarket/c_api.hpp>

        class Bad : public opmarket::OpKernel {
         public:
          explicit Bad(opmarket::OpKernelConstruction* c) : OpKernel(c) {}
          void Compute(opmarket::OpKernelContext* c) override {
            opmarket::Tensor x = c->input(1);
            OP_REQUIRES(c, x.dims() == 0 && x.dim_size(0) == -1 && !x.flat<float>(),
                        "the empty tensor is not empty");
            opmarket::Tensor y;
            OP_REQUIRES_OK(c, c->allocate_output(0, OPM_FLOAT, x.shape(), &y));
          }
        };

        static void Init(OPM_Status* status) {
          opmarket::OpDefBuilder("Test>Bad").Input("x: float").Output("y: float")
              .Register(status);
          if (OPM_GetCode(status) != OPM_OK) return;
          opmarket::RegisterKernelBuilder<Bad>("Bad", opmarket::Name("Test>Bad"), status);
        }

        OPM_PLUGIN_INIT(Init)
    """
    lib = load_library(build(tmp_path, source, "bad", cpp=True))
    with pytest.raises(InvalidArgumentError, match="input index 1 out of range: 1 inputs"):
        lib.bad(np.array([1.5], np.float32))


FAILURES = {
    "no entry point": ("int not_a_plugin(void) { return 1; }\n", "exports no OPM_InitPlugin"),
    "newer API": (
        """
        #include <opmarket/c_api.h>
        OPM_EXPORT void OPM_InitPlugin(OPM_PluginInit* in) {
          in->plugin_api_version = OPM_C_API_VERSION + 1;
        }
        """,
        "needs opmarket C API version 4; this opmarket provides version 3",
    ),
    "init error status": (
        """
        #include <opmarket/c_api.h>
        static void init(OPM_Status* s) { OPM_SetStatus(s, OPM_FAILED_PRECONDITION, "no licence"); }
        OPM_PLUGIN_INIT(init)
        """,
        "failed in its init: FAILED_PRECONDITION: no licence",
    ),
    "registers nothing": (
        """
        #include <opmarket/c_api.h>
        static void init(OPM_Status* s) { (void)s; }
        OPM_PLUGIN_INIT(init)
        """,
        "registered no ops or kernels",
    ),
    "bad spec": (
        """
        #include <opmarket/c_api.h>
        static void init(OPM_Status* s) {
          OPM_OpDefinitionBuilder* b = OPM_NewOpDefinitionBuilder("Test>Bad");
          OPM_OpDefinitionBuilderAddInput(b, "x: T");
          OPM_RegisterOpDefinition(b, s);
        }
        OPM_PLUGIN_INIT(init)
        """,
        "INVALID_ARGUMENT: op 'Test>Bad': ",
    ),
    "list argument": (
        """
        #include <opmarket/c_api.h>
        static void compute(void* k, OPM_OpKernelContext* ctx) { (void)k; (void)ctx; }
        static void init(OPM_Status* s) {
          OPM_OpDefinitionBuilder* b = OPM_NewOpDefinitionBuilder("Test>AddN");
          OPM_OpDefinitionBuilderAddInput(b, "inputs: N * float");
          OPM_OpDefinitionBuilderAddOutput(b, "sum: float");
          OPM_OpDefinitionBuilderAddAttr(b, "N: int >= 1");
          OPM_RegisterOpDefinition(b, s);
          OPM_RegisterKernelBuilder("AddN", OPM_NewKernelBuilder("Test>AddN", "CPU", 0,
                                                                 &compute, 0), s);
        }
        OPM_PLUGIN_INIT(init)
        """,
        "cannot serve list arguments (inputs)",
    ),
    "crash in init": (
        """
        #include <stdlib.h>
        #include <opmarket/c_api.h>
        static void init(OPM_Status* s) { (void)s; abort(); }
        OPM_PLUGIN_INIT(init)
        """,
        "crashed in its init (SIGABRT",
    ),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_every_failed_load_names_the_library_and_says_why(
    tmp_path: Path, case: str, registry: Registry
) -> None:
    source, message = FAILURES[case]
    path = build(tmp_path, source, case.replace(" ", "_"))
    with pytest.raises(LibraryError) as info:
        load_library(path)
    assert str(path) in str(info.value) and message in str(info.value), str(info.value)
    assert not [o for o in registry if o.name.startswith("Test>")]


def test_an_entry_point_naming_a_library_is_loaded_and_its_failures_reported(
    tmp_path: Path, registry: Registry
) -> None:
    site = tmp_path / "site"
    for pkg, source in (
        ("opmarket_scale", SCALE),
        ("opmarket_empty", FAILURES["registers nothing"][0]),
    ):
        (site / pkg).mkdir(parents=True)
        (site / pkg / "__init__.py").write_text('"""A C-ABI plugin\'s package."""\n')
        shutil.copy(build(tmp_path, source, pkg), site / pkg / f"lib{pkg}.so")
        dist = site / f"{pkg}-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {pkg}\nVersion: 1.0\n")
        (dist / "entry_points.txt").write_text(f"[opmarket]\n{pkg} = {pkg}:lib{pkg}.so\n")
    missing = site / "opmarket_missing-1.0.dist-info"
    missing.mkdir()
    (missing / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: opmarket_missing\nVersion: 1.0\n"
    )
    (missing / "entry_points.txt").write_text("[opmarket]\nmissing = opmarket_scale:libnone.so\n")
    sys.path.insert(0, str(site))
    try:
        infos = {i.name: i for i in load_plugins_from([str(site)], registry=registry)}
    finally:
        sys.path.remove(str(site))
    assert (infos["opmarket_scale"].status, infos["opmarket_scale"].ops) == (
        "loaded",
        ("Test>Scale",),
    )
    assert infos["opmarket_empty"].status == "failed"
    assert "registered no ops or kernels" in infos["opmarket_empty"].error
    assert "libopmarket_empty.so" in infos["opmarket_empty"].error
    assert infos["missing"].status == "failed"
    assert "no library 'libnone.so' in package 'opmarket_scale'" in infos["missing"].error
    assert opmarket.ops.scale(np.ones(1, np.float32)).tolist() == [2.0]


def test_dtypes_cross_with_their_tensorflow_numbers(tmp_path: Path, registry: Registry) -> None:
    """bfloat16 (an ml_dtypes type, not numpy's own) and every numeric type round-trip
    through a C kernel that copies its input's bytes."""
    source = """
        #include <string.h>
        #include <opmarket/c_api.h>
        static void compute(void* k, OPM_OpKernelContext* ctx) {
          (void)k;
          OPM_Status* s = OPM_NewStatus();
          OPM_Tensor* x = OPM_GetInput(ctx, 0, s);
          int64_t dims[8];
          for (int i = 0; i < OPM_NumDims(x); ++i) dims[i] = OPM_Dim(x, i);
          OPM_Tensor* y = OPM_AllocateOutput(ctx, 0, OPM_TensorType(x), dims, OPM_NumDims(x), s);
          if (OPM_GetCode(s) == OPM_OK) memcpy(OPM_TensorData(y), OPM_TensorData(x),
                                               OPM_TensorByteSize(x));
          else OPM_OpKernelContext_Failure(ctx, s);
          OPM_DeleteStatus(s);
        }
        static void init(OPM_Status* s) {
          OPM_OpDefinitionBuilder* b = OPM_NewOpDefinitionBuilder("Test>Identity");
          OPM_OpDefinitionBuilderAddInput(b, "x: T");
          OPM_OpDefinitionBuilderAddOutput(b, "y: T");
          OPM_OpDefinitionBuilderAddAttr(b, "T: type");
          OPM_RegisterOpDefinition(b, s);
          if (OPM_GetCode(s) == OPM_OK)
            OPM_RegisterKernelBuilder("Identity", OPM_NewKernelBuilder("Test>Identity", "CPU",
                                      0, &compute, 0), s);
        }
        OPM_PLUGIN_INIT(init)
    """
    lib = load_library(build(tmp_path, source, "identity"))
    for t in (
        DType.BFLOAT16,
        DType.HALF,
        DType.FLOAT,
        DType.DOUBLE,
        DType.INT8,
        DType.UINT16,
        DType.INT64,
        DType.UINT64,
        DType.BOOL,
        DType.COMPLEX128,
    ):
        assert t.numpy is not None
        x = np.arange(6).reshape(2, 3).astype(t.numpy)
        y = lib.identity(x)
        assert y.dtype == x.dtype and y.shape == (2, 3) and y.tobytes() == x.tobytes(), t


def test_an_unwritable_cache_folder_still_loads_a_plugin(tmp_path: Path) -> None:
    """A cache folder that cannot be written (a sandbox, a read-only home) only means the
    probe is not remembered: nothing needs building there; a fresh process, as the first
    load there is."""
    library = build(tmp_path, SCALE)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    script = (
        "import sys, numpy as np, opmarket\n"
        "lib = opmarket.load_library(sys.argv[1])\n"
        "print(lib.scale(np.ones(2, np.float32)).tolist())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(library)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        env={
            **os.environ,
            "OPMARKET_CACHE_DIR": str(blocked / "cache"),
            "OPMARKET_DISABLE_PLUGINS": "1",
        },
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2.0, 2.0]"


def test_the_entry_point_is_read_from_the_dynamic_symbol_table(tmp_path: Path) -> None:
    """Only a defined, visible symbol counts: not the name in a string, nor an undefined
    reference to it (a search of the file's bytes took both for the entry point)."""
    from opmarket.registry._capi import exports_entry_point
    from opmarket.registry._elf import dynamic_symbols

    plugin = build(tmp_path, SCALE)
    assert dynamic_symbols(plugin) == {"OPM_InitPlugin"}  # -fvisibility=hidden hides the rest
    stripped = tmp_path / "stripped.so"
    subprocess.run(["strip", "--strip-all", "-o", str(stripped), str(plugin)], check=True)
    assert exports_entry_point(stripped)
    mentions = build(
        tmp_path,
        """
        extern void OPM_InitPlugin(void* init);
        __attribute__((visibility("default"))) const char* name(void) { return "OPM_InitPlugin"; }
        __attribute__((visibility("default"))) void call(void) { OPM_InitPlugin(0); }
        """,
        "mentions",
    )
    assert b"OPM_InitPlugin" in mentions.read_bytes()
    assert dynamic_symbols(mentions) >= {"name", "call"} and not exports_entry_point(mentions)
    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(plugin.read_bytes()[:100])
    for path in (truncated, HEADER, tmp_path / "missing.so"):
        assert dynamic_symbols(path) == frozenset()


def test_the_host_is_compiled_abi3_and_clean_under_the_warnings() -> None:
    """The installed host is the abi3 extension; its source uses only the limited API (an
    undeclared function would be an error) and compiles without a warning."""
    import sysconfig

    assert Path(host().__file__).name == "_capi_host.abi3.so"
    sources = sorted((Path(__file__).resolve().parents[2] / "registry").glob("_capi_host*.c"))
    assert len(sources) == 5
    for source in sources:
        subprocess.run(
            [
                "gcc",
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-fsyntax-only",
                "-DPy_LIMITED_API=0x030B0000",
                f"-I{sysconfig.get_paths()['include']}",
                f"-I{np.get_include()}",
                f"-I{get_include()}",
                str(source),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
