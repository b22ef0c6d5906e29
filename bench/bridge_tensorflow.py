"""ZeroOut in TensorFlow: opmarket's bridge running ZeroOut's C-ABI kernel (plugins/zero_out_c)
against the same kernel built as an ordinary TensorFlow C++ custom op (REGISTER_OP and
REGISTER_KERNEL_BUILDER against the installed TensorFlow, as the seed guide does), each called
inside a ``tf.function`` on the same 8-element int32 vector.

The custom op is compiled into a temporary folder first (about a minute); the two functions
are checked equal, then timed in interleaved rounds of calls, and the best round counts.

    python bench/bridge_tensorflow.py [--calls 500] [--rounds 21]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The C++ ZeroOut of the seed guide ("Adding a new op"), under a name of its own; the body
# is plugins/zero_out_c's (int32 here, as the benchmark's input).
CUSTOM_OP = r"""
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;

REGISTER_OP("BenchZeroOut")
    .Attr("T: {float, double, int32} = DT_INT32")
    .Attr("preserve_index: int >= 0 = 0")
    .Input("to_zero: T")
    .Output("zeroed: T")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      ::tensorflow::shape_inference::ShapeHandle s;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &s));
      c->set_output(0, s);
      return OkStatus();
    });

template <typename T>
class ZeroOutOp : public OpKernel {
 public:
  explicit ZeroOutOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("preserve_index", &preserve_index_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& input_tensor = context->input(0);
    OP_REQUIRES(context, TensorShapeUtils::IsVector(input_tensor.shape()),
                errors::InvalidArgument("ZeroOut expects a 1-D vector."));
    auto input = input_tensor.flat<T>();
    const int64_t n = input.size();
    OP_REQUIRES(context, preserve_index_ < n,
                errors::InvalidArgument("preserve_index out of range"));
    Tensor* output_tensor = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, input_tensor.shape(), &output_tensor));
    auto output = output_tensor->flat<T>();
    for (int64_t i = 0; i < n; i++) output(i) = T(0);
    output(preserve_index_) = input(preserve_index_);
  }

 private:
  int64_t preserve_index_;
};

REGISTER_KERNEL_BUILDER(
    Name("BenchZeroOut").Device(DEVICE_CPU).TypeConstraint<int32>("T"), ZeroOutOp<int32>);
REGISTER_KERNEL_BUILDER(
    Name("BenchZeroOut").Device(DEVICE_CPU).TypeConstraint<float>("T"), ZeroOutOp<float>);
REGISTER_KERNEL_BUILDER(
    Name("BenchZeroOut").Device(DEVICE_CPU).TypeConstraint<double>("T"), ZeroOutOp<double>);
"""


def build_custom_op(folder: Path) -> Path:
    """The seed guide's build: c++ -shared with TensorFlow's compile and link flags."""
    import tensorflow as tf

    src = folder / "zero_out.cc"
    src.write_text(CUSTOM_OP)
    lib = folder / "zero_out.so"
    cmd = [
        "c++",
        "-std=c++17",
        "-shared",
        "-fPIC",
        "-O2",
        str(src),
        "-o",
        str(lib),
        *tf.sysconfig.get_compile_flags(),
        *tf.sysconfig.get_link_flags(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"could not build the TensorFlow custom op:\n{done.stderr}")
    return lib


def best_per_call(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per round")
    parser.add_argument("--rounds", type=int, default=21, help="interleaved rounds")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    import opmarket.tensorflow as otf

    with tempfile.TemporaryDirectory() as tmp:
        custom = tf.load_op_library(str(build_custom_op(Path(tmp))))

    x = tf.constant(np.arange(1, 9, dtype=np.int32))

    @tf.function
    def bridged(v: Any) -> Any:
        return otf.ops.zero_out(v, preserve_index=3, label="c_abi")

    @tf.function
    def tensorflow_op(v: Any) -> Any:
        return custom.bench_zero_out(v, preserve_index=3)

    graph = bridged.get_concrete_function(x).graph.as_graph_def()
    kernels = [n.attr["_kernel"].s.decode() for n in graph.node if n.op == "Opm>ZeroOut"]
    assert kernels == ["c_abi"], kernels
    want = np.array([0, 0, 0, 4, 0, 0, 0, 0], np.int32)
    np.testing.assert_array_equal(bridged(x).numpy(), want)
    np.testing.assert_array_equal(tensorflow_op(x).numpy(), want)

    ours: list[float] = []
    theirs: list[float] = []
    for i in range(args.rounds):  # alternate which goes first: a busy machine hits both
        pair = [(ours, bridged), (theirs, tensorflow_op)]
        for times, fn in pair if i % 2 == 0 else pair[::-1]:
            times.append(best_per_call(lambda fn=fn: fn(x), args.calls))
    ours_us, theirs_us = min(ours) * 1e6, min(theirs) * 1e6
    print(f"best of {args.rounds} rounds of {args.calls} calls; tf {tf.__version__}")
    print(
        f"bridge_tensorflow: {ours_us:.1f} us per call in tf.function "
        f"(TensorFlow custom op: {theirs_us:.1f} us, ratio {ours_us / theirs_us:.2f})"
    )


if __name__ == "__main__":
    main()
