// What every GPU companion library has in common (opmarket.sdk.build_cuda_library puts this
// folder on nvcc's include path): the device count the loader asks for, and a host-to-GPU
// round trip for kernels called with host arrays through ctypes, and DeviceCall, which reads
// a device entry's call (opmarket/cuda_kernel.h: the door framework bridges use).
//
// Include it in exactly one .cu file of a library: it defines the exported C function
// opmarket_cuda_devices(), which opmarket.sdk.load_cuda_library calls once (the number of
// GPUs the CUDA runtime sees, or minus the cudaError_t it got: -35 without a driver, -100
// without a device), and opmarket_cuda_kernel_version(), the OPM_CudaKernelCall version its
// device entries read (bridges ask for the synchronizing mode only of version 2 and later).
#ifndef OPMARKET_CUDA_CUH_
#define OPMARKET_CUDA_CUH_

#include <cuda_runtime.h>

#include <opmarket/cuda_kernel.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

// The OPM_CudaKernelCall version this library's device entries read (through DeviceCall):
// 2 and more honour the synchronizing mode, which a bridge asks for only of such a library.
extern "C" __attribute__((visibility("default"))) int opmarket_cuda_kernel_version() {
  return OPM_CUDA_KERNEL_VERSION;
}

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

// A device entry's call (opmarket/cuda_kernel.h) in C++: its stream, inputs, outputs and attrs.
// Each accessor returns false (or nullptr) once the call has failed, with the status set, so
// an entry reads:
//
//   OPM_CUDA_ENTRY void opm_x_device(const OPM_CudaKernelCall* c) {
//     opmarket::cuda::DeviceCall call(c);
//     const OPMB_Tensor* in = call.input(0);
//     const OPMB_Tensor* out = in ? call.allocate(0, in->dtype, in->dims, in->ndim) : nullptr;
//     if (!out) return;
//     kernel<<<blocks, threads, 0, call.stream()>>>(...);
//     call.launched("X on the GPU");
//   }
//
// In the synchronizing mode (OPM_CUDA_SYNCHRONIZE in the call's flags: a framework that gives
// no stream), stream() first makes the call's device current and synchronises it, so it is
// called right before the launch, after the outputs are allocated: the inputs' producers are
// done, and so is any kernel of the framework's still reading memory its allocator has just
// handed out as an output. It returns the legacy default stream, and launched() waits for the
// launch on it. A step that fails fails the call with CUDA's reason (the launch then fails
// too, and launched() keeps the first message). The entry's code is the same in both modes;
// call stream() once per launch.
class DeviceCall {
 public:
  explicit DeviceCall(const OPM_CudaKernelCall* call) : c_(call) {}

  // Whether the bridge asked for the synchronizing mode.
  bool synchronizing() const { return (OPM_CUDA_CALL_FLAGS(c_) & OPM_CUDA_SYNCHRONIZE) != 0; }

  // The stream to launch on: the framework's; in the synchronizing mode, the legacy default
  // stream, once the device is settled.
  cudaStream_t stream() const {
    if (!synchronizing()) return launch_stream();
    if (ok()) settle(cudaSetDevice(c_->device), "selecting");
    if (ok()) settle(cudaDeviceSynchronize(), "synchronizing");
    return launch_stream();
  }
  bool ok() const { return c_->api->GetCode(c_->status) == OPM_OK; }

  // Fails the call with `code` and `message`; returns false.
  bool fail(OPM_Code code, const std::string& message) const {
    c_->api->SetStatus(c_->status, code, message.c_str());
    return false;
  }

  const OPMB_Tensor* input(int i) const {
    return ok() ? c_->context->ops->get_input(c_->context, i, c_->status) : nullptr;
  }

  // A new output i on the device, of the framework's memory.
  const OPMB_Tensor* allocate(int i, OPM_DataType dtype, const int64_t* dims, int ndim) const {
    if (!ok()) return nullptr;
    return c_->context->ops->allocate_output(c_->context, i, dtype, dims, ndim, c_->status);
  }

  bool attr_int64_list(const char* name, std::vector<int64_t>* values) const {
    const OPMB_KernelConstructionOps* ops = c_->attrs->ops;
    if (!ok()) return false;
    if (ops->struct_size < sizeof(OPMB_KernelConstructionOps) || !ops->get_attr_int64_list) {
      return fail(OPM_UNIMPLEMENTED, std::string("the bridge cannot read list attr ") + name);
    }
    size_t length = 0;
    ops->get_attr_int64_list(c_->attrs, name, nullptr, 0, &length, c_->status);
    values->assign(length, 0);
    if (ok() && length) {
      ops->get_attr_int64_list(c_->attrs, name, values->data(), length, &length, c_->status);
    }
    return ok();
  }

  bool attr_string(const char* name, std::string* value) const {
    const OPMB_KernelConstructionOps* ops = c_->attrs->ops;
    if (!ok()) return false;
    if (!ops->get_attr_string) {
      return fail(OPM_UNIMPLEMENTED, std::string("the bridge cannot read string attr ") + name);
    }
    size_t length = 0;
    ops->get_attr_string(c_->attrs, name, nullptr, 0, &length, c_->status);
    value->assign(length, '\0');
    if (ok() && length) {
      ops->get_attr_string(c_->attrs, name, &(*value)[0], length, &length, c_->status);
    }
    return ok();
  }

  // After a launch: false, with "<what>: <CUDA's message>", when it failed; in the
  // synchronizing mode, once the launch has finished.
  bool launched(const char* what) const {
    cudaError_t status = cudaGetLastError();
    if (!ok()) return false;  // the synchronizing mode's settling failed: its message stays
    if (status == cudaSuccess && synchronizing()) status = cudaStreamSynchronize(launch_stream());
    if (status == cudaSuccess) return true;
    return fail(OPM_INTERNAL, std::string(what) + ": " + cudaGetErrorString(status));
  }

 private:
  cudaStream_t launch_stream() const {
    return synchronizing() ? cudaStreamLegacy : static_cast<cudaStream_t>(c_->stream);
  }

  // Fails the call when a step of the synchronizing mode failed.
  void settle(cudaError_t status, const char* step) const {
    if (status == cudaSuccess) return;
    fail(OPM_INTERNAL, std::string(step) + " GPU " + std::to_string(c_->device) +
                           " before the launch (the synchronizing mode): " +
                           cudaGetErrorString(status));
  }

  const OPM_CudaKernelCall* c_;
};

}  // namespace opmarket::cuda

#endif  // OPMARKET_CUDA_CUH_
