// What every GPU companion library has in common (opmarket.sdk.build_cuda_library puts this
// folder on nvcc's include path): the device count the loader asks for, and a host-to-GPU
// round trip for kernels called with host arrays through ctypes.
//
// Include it in exactly one .cu file of a library: it defines the exported C function
// opmarket_cuda_devices(), which opmarket.sdk.load_cuda_library calls once (the number of
// GPUs the CUDA runtime sees, or minus the cudaError_t it got: -35 without a driver, -100
// without a device).
#ifndef OPMARKET_CUDA_CUH_
#define OPMARKET_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>

extern "C" __attribute__((visibility("default"))) int opmarket_cuda_devices() {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear it
    return -static_cast<int>(status);
  }
  return n;
}

namespace opmarket::cuda {

// Writes "<what>: <CUDA's message>" into err (errlen bytes), clears the error; returns 1.
inline int fail(cudaError_t status, const char* what, char* err, int errlen) {
  std::snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(status));
  cudaGetLastError();
  return 1;
}

// Copies in_count Ts from host_in to the GPU, calls launch(device_in, device_out) (which
// starts kernels on the default stream), and copies out_count Ts back to host_out. 0, or 1
// with "<what>: <CUDA's message>" in err. Nothing runs when out_count is 0.
template <typename T, typename Launch>
int round_trip(const void* host_in, size_t in_count, void* host_out, size_t out_count,
               Launch launch, const char* what, char* err, int errlen) {
  if (out_count == 0) return 0;
  T* in = nullptr;
  T* out = nullptr;
  cudaError_t status = cudaMalloc(&in, in_count * sizeof(T));
  if (status != cudaSuccess) return fail(status, "cudaMalloc", err, errlen);
  status = cudaMalloc(&out, out_count * sizeof(T));
  if (status == cudaSuccess) {
    status = cudaMemcpy(in, host_in, in_count * sizeof(T), cudaMemcpyHostToDevice);
  }
  if (status == cudaSuccess) {
    launch(static_cast<const T*>(in), out);
    status = cudaGetLastError();
  }
  if (status == cudaSuccess) {
    status = cudaMemcpy(host_out, out, out_count * sizeof(T), cudaMemcpyDeviceToHost);
  }
  cudaFree(in);
  if (out) cudaFree(out);
  return status == cudaSuccess ? 0 : fail(status, what, err, errlen);
}

}  // namespace opmarket::cuda

#endif  // OPMARKET_CUDA_CUH_
