// The CPU half of TimeTwo: ExampleFunctor<CPUDevice, T>, the kernel around it, and the op's
// declaration. The GPU functor is in the companion opmarket-time-two-cuda13 (time_two.cu).
#include <opmarket/kernel.h>

#include <limits>

#include "time_two.h"

namespace {

namespace py = pybind11;

}  // namespace

// CPU specialization of the actual computation, sharded over the intra-op threads.
template <typename T>
struct ExampleFunctor<CPUDevice, T> {
  void operator()(const CPUDevice&, int64_t size, const T* in, T* out) {
    opmarket::shard(size, 2, [&](int64_t start, int64_t limit) {
      for (int64_t i = start; i < limit; ++i) out[i] = times_two(in[i]);
    });
  }
};

namespace {

// The kernel: allocate the output, check, and hand the computation to the functor.
template <typename T>
opmarket::Tensor<T> TimeTwo(opmarket::Tensor<T> input) {
  OPM_REQUIRES(input.size() <= std::numeric_limits<int32_t>::max(),
               "Too many elements in tensor");
  auto output = opmarket::allocate<T>(input.shape());
  const T* in = input.data();
  T* out = output.mutable_data();
  auto no_gil = opmarket::release_gil();
  ExampleFunctor<CPUDevice, T>()(CPUDevice{}, input.size(), in, out);
  return output;
}

template <typename T>
void RegisterCpu(opmarket::Library& lib, const std::string& name) {
  lib.kernel("Opm>TimeTwo", name, &TimeTwo<T>, py::arg("input"))
      .device("CPU")
      .template type_constraint<T>("T");
}

}  // namespace

OPM_LIBRARY(_time_two, lib) {
  lib.op("Opm>TimeTwo")
      .attr("T: {float, double, int32, int64} = DT_FLOAT")
      .input("input: T")
      .output("output: T")
      .doc(R"doc(
Doubles every element: the ExampleFunctor of TensorFlow's guide, with a CPU kernel here and a GPU kernel in its cuda13 companion.

input: A tensor.
output: 2 * input, of the same shape and type (integers wrap around, as numpy's do).
)doc");
  RegisterCpu<float>(lib, "time_two_float");
  RegisterCpu<double>(lib, "time_two_double");
  RegisterCpu<int32_t>(lib, "time_two_int32");
  RegisterCpu<int64_t>(lib, "time_two_int64");
}
