// The three ops as a C++ PyTorch operator library (TORCH_LIBRARY, a CPU kernel and a Meta
// kernel for torch.compile), with the computations of kernels.h. bench/bridges.py and
// bench/bridge_torch.py build it with torch.utils.cpp_extension.load_inline.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "kernels.h"

namespace {

at::Tensor zero_out(const at::Tensor& x, int64_t preserve_index) {
  TORCH_CHECK(x.dim() == 1, "ZeroOut expects a 1-D vector");
  TORCH_CHECK(preserve_index >= 0 && preserve_index < x.numel(), "preserve_index out of range");
  at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  if (in.scalar_type() == at::kInt) {
    bench::zero_out(in.data_ptr<int32_t>(), out.data_ptr<int32_t>(), in.numel(), preserve_index);
  } else {
    TORCH_CHECK(in.scalar_type() == at::kFloat, "ZeroOut takes int32 or float32");
    bench::zero_out(in.data_ptr<float>(), out.data_ptr<float>(), in.numel(), preserve_index);
  }
  return out;
}

at::Tensor time_two(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "TimeTwo takes float32 here");
  at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  bench::time_two(in.data_ptr<float>(), out.data_ptr<float>(), in.numel());
  return out;
}

void check_pool(const at::Tensor& x, at::IntArrayRef ksize, at::IntArrayRef strides,
                c10::string_view padding) {
  TORCH_CHECK(ksize == at::IntArrayRef({1, 3, 3, 1}) &&
                  strides == at::IntArrayRef({1, 1, 1, 1}) && padding == "VALID",
              "this MedianPool does 3x3, stride 1, VALID only");
  TORCH_CHECK(x.dim() == 4 && x.size(1) >= 3 && x.size(2) >= 3,
              "MedianPool expects NHWC of at least 3x3");
}

at::Tensor median_pool(const at::Tensor& x, at::IntArrayRef ksize, at::IntArrayRef strides,
                       c10::string_view padding) {
  check_pool(x, ksize, strides, padding);
  TORCH_CHECK(x.scalar_type() == at::kFloat, "MedianPool takes float32 here");
  at::Tensor in = x.contiguous();
  at::Tensor out = at::empty({x.size(0), x.size(1) - 2, x.size(2) - 2, x.size(3)}, x.options());
  bench::median_pool_3x3(in.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1),
                         x.size(2), x.size(3));
  return out;
}

at::Tensor zero_out_meta(const at::Tensor& x, int64_t) { return at::empty_like(x); }
at::Tensor time_two_meta(const at::Tensor& x) { return at::empty_like(x); }
at::Tensor median_pool_meta(const at::Tensor& x, at::IntArrayRef ksize, at::IntArrayRef strides,
                            c10::string_view padding) {
  check_pool(x, ksize, strides, padding);
  return at::empty({x.size(0), x.size(1) - 2, x.size(2) - 2, x.size(3)}, x.options());
}

}  // namespace

TORCH_LIBRARY(opm_native, m) {
  m.def("zero_out(Tensor to_zero, *, int preserve_index=0) -> Tensor");
  m.def("time_two(Tensor input) -> Tensor");
  m.def("median_pool(Tensor input, *, int[] ksize, int[] strides, str padding) -> Tensor");
}

TORCH_LIBRARY_IMPL(opm_native, CPU, m) {
  m.impl("zero_out", &zero_out);
  m.impl("time_two", &time_two);
  m.impl("median_pool", &median_pool);
}

TORCH_LIBRARY_IMPL(opm_native, Meta, m) {
  m.impl("zero_out", &zero_out_meta);
  m.impl("time_two", &time_two_meta);
  m.impl("median_pool", &median_pool_meta);
}
