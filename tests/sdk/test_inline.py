"""load_inline and load: C++ (and CUDA) compiled against opmarket's header on the fly, in
real processes with a cache of their own (XDG_CACHE_HOME), registered, cached by content."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opmarket.sdk import InvalidArgumentError, NotFoundError
from opmarket.sdk.build import InlineBuildError, load, load_inline

SCALE = r"""
#include <opmarket/kernel.h>

template <typename T>
opmarket::Tensor<T> Scale(opmarket::Tensor<T> x, double factor) {
  auto out = opmarket::allocate<T>(x.shape());
  for (int64_t i = 0; i < x.size(); ++i)
    out.mutable_data()[i] = static_cast<T>(x.data()[i] * factor);
  return out;
}

OPM_LIBRARY(scale_lib, lib) {
  lib.op("Inline>Scale").attr("T: {float, double}").attr("factor: float = 2.0")
      .input("x: T").output("y: T");
  lib.kernel("Inline>Scale", "scale_float", &Scale<float>, pybind11::arg("x"),
             pybind11::arg("factor") = 2.0).type_constraint<float>("T");
}
"""

SCRIPT_LOAD = """
import sys, numpy as np, opmarket
from opmarket.sdk.build import load
module = load("scale_lib", sources=[sys.argv[1]])
print(module.__file__)
print(opmarket.ops.scale(np.array([1.0, 2.5], np.float32)).tolist())
"""


def python(script: str, cache: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # The cache folder's rule: $OPMARKET_CACHE_DIR first, else $XDG_CACHE_HOME/opmarket.
        env={
            **{k: v for k, v in os.environ.items() if k != "OPMARKET_CACHE_DIR"},
            "XDG_CACHE_HOME": str(cache),
            **env,
        },
    )


def finish(proc: subprocess.Popen[str]) -> list[str]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return out.splitlines()


@pytest.mark.slow
def test_two_processes_build_at_once_then_a_third_only_loads(tmp_path: Path) -> None:
    source = tmp_path / "scale.cc"
    source.write_text(SCALE)
    cache = tmp_path / "cache"
    # Two processes miss the cache together: both compile, one build is kept.
    both = [python(SCRIPT_LOAD, cache, str(source)) for _ in range(2)]
    first, second = (finish(p) for p in both)
    assert first == second
    assert first[1] == "[2.0, 5.0]"  # registered: opmarket.ops.scale, default factor 2
    inline = cache / "opmarket" / "inline"
    assert Path(first[0]).parent.parent == inline
    # One finished build, no temporary folder left by the process that lost.
    assert [p.name for p in inline.iterdir()] == [Path(first[0]).parent.name]
    # A third process finds it in the cache and never runs the compiler: here the
    # compiler on PATH is one that only fails.
    fake = tmp_path / "bin"
    fake.mkdir()
    for cxx in ("c++", "g++"):
        (fake / cxx).write_text("#!/bin/sh\necho 'the fake compiler ran' >&2\nexit 1\n")
        (fake / cxx).chmod(0o755)
    path = f"{fake}{os.pathsep}{os.environ['PATH']}"
    assert finish(python(SCRIPT_LOAD, cache, str(source), PATH=path)) == first
    # A changed source is a new build, and the compiler's own words reach the caller.
    source.write_text(SCALE.replace("* factor", "* factor * 1"))
    proc = python(SCRIPT_LOAD, cache, str(source), PATH=path)
    _, err = proc.communicate(timeout=600)
    assert "InlineBuildError: compiling failed (exit 1):" in err
    assert "the fake compiler ran" in err


@pytest.mark.slow
def test_compiler_errors_quote_the_compiler(tmp_path: Path) -> None:
    bad = "int add(int a, int b) {\n  return a + ;\n}\n"
    with pytest.raises(InlineBuildError) as caught:
        load_inline("bad_lib", bad, functions=["add"], build_directory=tmp_path)
    message = str(caught.value)
    assert message.startswith("compiling failed (exit 1):\n$ ")
    assert "bad_lib.cc:2:" in message  # the user's own line numbers
    assert "error:" in message
    assert list(tmp_path.iterdir()) == []  # nothing half-built is kept


def test_a_library_name_that_does_not_match_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"declares OPM_LIBRARY\(scale_lib, \.\.\.\)"):
        load_inline("other", SCALE, build_directory=tmp_path)
    with pytest.raises(InvalidArgumentError, match="has one already"):
        load_inline("scale_lib", SCALE, functions=["x"], build_directory=tmp_path)
    with pytest.raises(NotFoundError, match="cannot read source"):
        load("scale_lib", [tmp_path / "missing.cc"], build_directory=tmp_path)


CUDA = r"""
__global__ void twice(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * in[i];
}
int launch_twice(const float* in, float* out, int n) {
  twice<<<(n + 255) / 256, 256>>>(in, out, n);
  return static_cast<int>(cudaGetLastError());
}
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_cuda_sources_compile_and_link(tmp_path: Path) -> None:
    # Compile and load only: this machine may have no GPU to run it on.
    module = load_inline(
        "cuda_lib",
        "int launch_twice(const float* in, float* out, int n);\nint launch(int n) { return n; }\n",
        CUDA,
        functions=["launch"],
        build_directory=tmp_path,
        register=False,
    )
    assert module.launch(3) == 3
    assert any(p.suffix == ".o" for p in Path(str(module.__file__)).parent.iterdir())
