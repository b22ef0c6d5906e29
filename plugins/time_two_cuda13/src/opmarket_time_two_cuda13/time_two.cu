// TimeTwo on the GPU, for the op opmarket-time-two declares: TensorFlow's ExampleFunctor
// <GPUDevice, T>, the CUDA kernel it launches, and two doors into it: a C interface that
// opmarket_time_two_cuda13 loads with ctypes (host arrays), and the device entry
// opm_time_two_device (opmarket/cuda_kernel.h) that framework bridges call on their own GPU
// buffers and stream. Built by nvcc into libopm_time_two_cuda13.so
// (opmarket.sdk.build_cuda_library), apart from the base plugin's CPU library.
#include <cuda_runtime.h>
#include <opmarket/cuda.cuh>  // opmarket_cuda_devices(), round_trip, DeviceCall

#include <cstdint>
#include <cstdio>
#include <type_traits>

struct GPUDevice {
  cudaStream_t stream = nullptr;  // the default stream when null
};

template <typename Device, typename T>
struct ExampleFunctor;

// The element types, in the order of opmarket_time_two_cuda13's dtype codes.
enum TimeTwoDtype : int { kFloat = 0, kDouble = 1, kInt32 = 2, kInt64 = 3 };

// 2 * x with numpy's wrap-around for integers (signed overflow is undefined in C++), as the
// base plugin's CPU kernel computes it.
template <typename T>
__device__ inline T times_two(T x) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) * static_cast<U>(2));
  } else {
    return x * T(2);
  }
}

template <typename T>
__global__ void ExampleCudaKernel(const int64_t size, const T* in, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < size;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = times_two(__ldg(in + i));
  }
}

template <typename T>
struct ExampleFunctor<GPUDevice, T> {
  void operator()(const GPUDevice& d, int64_t size, const T* in, T* out) {
    // A grid-stride loop: a fixed grid covers any size.
    const int thread_per_block = 256;
    const int64_t blocks = (size + thread_per_block - 1) / thread_per_block;
    const int block_count = static_cast<int>(blocks < 1024 ? (blocks > 0 ? blocks : 1) : 1024);
    ExampleCudaKernel<T><<<block_count, thread_per_block, 0,
                           d.stream>>>(size, in, out);
  }
};

template struct ExampleFunctor<GPUDevice, float>;
template struct ExampleFunctor<GPUDevice, double>;
template struct ExampleFunctor<GPUDevice, int32_t>;
template struct ExampleFunctor<GPUDevice, int64_t>;

namespace {

// Host arrays in and out: copy in, run, copy back.
template <typename T>
int run(const void* host_in, void* host_out, int64_t size, char* err, int errlen) {
  const auto launch = [size](const T* in, T* out) {
    ExampleFunctor<GPUDevice, T>()(GPUDevice{}, size, in, out);
  };
  const auto n = static_cast<size_t>(size);
  return opmarket::cuda::round_trip<T>(host_in, n, host_out, n, launch, "TimeTwo on the GPU",
                                       err, errlen);
}

// The framework's device buffers: launch on its stream, no copy.
template <typename T>
void launch_on(const opmarket::cuda::DeviceCall& call, const OPMB_Tensor* in,
               const OPMB_Tensor* out) {
  const int64_t size = static_cast<int64_t>(in->nbytes / sizeof(T));
  if (size == 0) return;
  ExampleFunctor<GPUDevice, T>()(GPUDevice{call.stream()}, size, static_cast<const T*>(in->data),
                                 static_cast<T*>(out->data));
  call.launched("TimeTwo on the GPU");
}

}  // namespace

// The device entry: output 0 = 2 * input 0, on the framework's stream.
OPM_CUDA_ENTRY void opm_time_two_device(const OPM_CudaKernelCall* c) {
  const opmarket::cuda::DeviceCall call(c);
  const OPMB_Tensor* in = call.input(0);
  const OPMB_Tensor* out = in ? call.allocate(0, in->dtype, in->dims, in->ndim) : nullptr;
  if (out == nullptr) return;
  switch (in->dtype) {
    case OPM_FLOAT: return launch_on<float>(call, in, out);
    case OPM_DOUBLE: return launch_on<double>(call, in, out);
    case OPM_INT32: return launch_on<int32_t>(call, in, out);
    case OPM_INT64: return launch_on<int64_t>(call, in, out);
    default:
      call.fail(OPM_INVALID_ARGUMENT,
                "TimeTwo on the GPU takes float, double, int32 or int64, got dtype " +
                    std::to_string(in->dtype));
  }
}

extern "C" {

// out = 2 * in for `size` elements of `dtype` (a TimeTwoDtype); 0, or 1 with a message.
__attribute__((visibility("default"))) int opm_time_two(int dtype, const void* in, void* out,
                                                        int64_t size, char* err, int errlen) {
  switch (dtype) {
    case kFloat: return run<float>(in, out, size, err, errlen);
    case kDouble: return run<double>(in, out, size, err, errlen);
    case kInt32: return run<int32_t>(in, out, size, err, errlen);
    case kInt64: return run<int64_t>(in, out, size, err, errlen);
    default:
      std::snprintf(err, errlen, "unknown dtype code %d", dtype);
      return 1;
  }
}

}  // extern "C"
