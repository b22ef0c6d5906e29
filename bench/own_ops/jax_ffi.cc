// The three ops as XLA FFI handlers (xla/ffi/api/ffi.h from jax.ffi.include_dir()), with the
// computations of kernels.h; bench/bridges.py registers them with
// jax.ffi.register_ffi_target and calls them with jax.ffi.ffi_call.
#include "xla/ffi/api/ffi.h"

#include "kernels.h"

namespace ffi = xla::ffi;

namespace {

ffi::Error ZeroOut(ffi::Buffer<ffi::S32> x, ffi::ResultBuffer<ffi::S32> y,
                   int64_t preserve_index) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  if (x.dimensions().size() != 1 || preserve_index < 0 || preserve_index >= n) {
    return ffi::Error::InvalidArgument("ZeroOut: a 1-D vector and an index inside it");
  }
  bench::zero_out(x.typed_data(), y->typed_data(), n, preserve_index);
  return ffi::Error::Success();
}

ffi::Error TimeTwo(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  bench::time_two(x.typed_data(), y->typed_data(), static_cast<int64_t>(x.element_count()));
  return ffi::Error::Success();
}

ffi::Error MedianPool(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  auto d = x.dimensions();
  if (d.size() != 4 || d[1] < 3 || d[2] < 3) {
    return ffi::Error::InvalidArgument("MedianPool expects NHWC of at least 3x3");
  }
  bench::median_pool_3x3(x.typed_data(), y->typed_data(), d[0], d[1], d[2], d[3]);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(bench_zero_out, ZeroOut,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("preserve_index"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(bench_time_two, TimeTwo,
                              ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<
                                  ffi::Buffer<ffi::F32>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(bench_median_pool, MedianPool,
                              ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<
                                  ffi::Buffer<ffi::F32>>());
