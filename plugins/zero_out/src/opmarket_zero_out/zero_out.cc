// ZeroOut, as TensorFlow's "Adding a new op" guide builds it up: polymorphic in T, an index
// to preserve, and the vector check. The op's spec and its kernels are declared here (as
// REGISTER_OP and REGISTER_KERNEL_BUILDER do); the shape function, gradient, reference and
// input generator are in __init__.py.
#include <opmarket/kernel.h>

#include <algorithm>

namespace {

namespace py = pybind11;

template <typename T>
opmarket::Tensor<T> ZeroOut(opmarket::Tensor<T> input, int64_t preserve_index) {
  OPM_REQUIRES(input.rank() == 1, "ZeroOut expects a 1-D vector, got shape ",
               input.shape_string());
  OPM_REQUIRES(preserve_index >= 0, "Need preserve_index >= 0, got ", preserve_index);
  // The attr is checked against a possibly dynamic input: so is the range.
  OPM_REQUIRES(preserve_index < input.dim(0), "preserve_index out of range: ", preserve_index,
               " for a vector of ", input.dim(0), " elements");
  auto output = opmarket::allocate<T>(input.shape());
  T* out = output.mutable_data();
  std::fill(out, out + input.size(), T(0));
  out[preserve_index] = input.flat(preserve_index);
  return output;
}

template <typename T>
void RegisterKernel(opmarket::Library& lib, const std::string& name) {
  lib.kernel("Opm>ZeroOut", name, &ZeroOut<T>, py::arg("to_zero"),
             py::arg("preserve_index") = 0)
      .device("CPU")
      .template type_constraint<T>("T");
}

}  // namespace

OPM_LIBRARY(_zero_out, lib) {
  lib.op("Opm>ZeroOut")
      .attr("T: {float, double, int32} = DT_INT32")
      .attr("preserve_index: int >= 0 = 0")
      .input("to_zero: T")
      .output("zeroed: T")
      .doc(R"doc(
Zeroes all but one element of a vector.

to_zero: A vector.
zeroed: A vector of the same shape, all zeros but at preserve_index.
preserve_index: The index of the element that is kept.
)doc");
  RegisterKernel<float>(lib, "zero_out_float");
  RegisterKernel<double>(lib, "zero_out_double");
  RegisterKernel<int32_t>(lib, "zero_out_int32");
}
