// The ExampleFunctor of TensorFlow's "Adding a new op" guide: out = 2 * in, specialized per
// device. The CPU specialization lives in time_two.cc (the pybind11 library); the GPU one in
// the GPU companion opmarket-time-two-cuda13 (plugins/time_two_cuda13/.../time_two.cu), a
// separate distribution, so this wheel carries no CUDA.
#pragma once

#include <cstdint>
#include <type_traits>

struct CPUDevice {};

template <typename Device, typename T>
struct ExampleFunctor {
  void operator()(const Device& d, int64_t size, const T* in, T* out);
};

// 2 * x with numpy's wrap-around for integers (signed overflow is undefined in C++).
template <typename T>
inline T times_two(T x) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) * static_cast<U>(2));
  } else {
    return x * T(2);
  }
}
