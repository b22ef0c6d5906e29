// The ExampleFunctor of TensorFlow's "Adding a new op" guide: out = 2 * in, specialized per
// device. The CPU specialization lives in time_two.cc (the pybind11 library); the GPU one in
// time_two_gpu.cu, compiled by nvcc into a separate shared library with a C interface, so
// that the CPU kernel loads on machines without the CUDA runtime.
#pragma once

#include <cstdint>
#include <type_traits>

struct CPUDevice {};
struct GPUDevice {
  void* stream = nullptr;  // a cudaStream_t; the default stream when null
};

template <typename Device, typename T>
struct ExampleFunctor {
  void operator()(const Device& d, int64_t size, const T* in, T* out);
};

// 2 * x with numpy's wrap-around for integers (signed overflow is undefined in C++).
template <typename T>
#ifdef __CUDACC__
__host__ __device__
#endif
inline T times_two(T x) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) * static_cast<U>(2));
  } else {
    return x * T(2);
  }
}

// The element types both sides instantiate, in the order of the GPU library's dtype codes.
enum TimeTwoDtype : int { kFloat = 0, kDouble = 1, kInt32 = 2, kInt64 = 3 };
