/* opmarket/cuda_kernel.h: a GPU kernel's device entry, which framework bridges call (C99).
 *
 * A GPU companion's library (docs/gpu.md) has two doors into each kernel, as a C++ library
 * has two (docs/native.md):
 *
 *   - the host door: a C function opmarket.ops calls through ctypes with numpy arrays; it
 *     copies them to the GPU, launches and copies back (opmarket::cuda::round_trip);
 *   - the device door, declared here: one exported function per op that a framework bridge
 *     (PyTorch's CUDA dispatch key, an XLA FFI handler for platform CUDA, a TensorFlow GPU
 *     kernel) calls on the framework's DEVICE buffers with the framework's CUDA stream. It
 *     launches on that stream and returns: no copy, no synchronisation, no Python.
 *
 * The device entry reuses the bridge interfaces of opmarket/capi_bridge.h: the node's attrs
 * through an OPMB_KernelConstruction, the inputs and outputs through an OPMB_KernelContext
 * (allocate_output returns device memory of the framework's, on the call's device). Its
 * tensors are C-contiguous and row-major, as on the C door; `data` is a device pointer.
 *
 *   #include <opmarket/cuda_kernel.h>
 *   OPM_CUDA_ENTRY void opm_time_two_device(const OPM_CudaKernelCall* call) { ... }
 *
 * (opmarket/cuda.cuh has C++ helpers for reading a call.) The Python kernel names its entry
 * with opmarket.sdk.build.device_entry, so a bridge finds it from the registered GPU kernel.
 *
 * Rules:
 *   - The bridge has made call->device the current CUDA device; launch on call->stream (a
 *     cudaStream_t; NULL is the legacy default stream) and never synchronise it.
 *   - Except in the synchronizing mode (version 2: OPM_CUDA_SYNCHRONIZE in call->flags), for
 *     a bridge whose framework gives a kernel no stream (TensorFlow's own GPU device): then
 *     call->stream is NULL and means nothing, and the entry itself, right before its launch
 *     (its outputs allocated), makes call->device current and synchronises the whole device
 *     (every producer of the inputs, on any stream, is done, and so is any framework kernel
 *     still reading memory just handed out as an output), launches on a stream of its own
 *     (or the legacy default stream) and
 *     synchronises that stream before it returns (the framework's consumers, on any stream,
 *     see finished outputs). opmarket::cuda::DeviceCall (opmarket/cuda.cuh) does all of it,
 *     and a library built with it says so: it exports opmarket_cuda_kernel_version(), which
 *     returns OPM_CUDA_KERNEL_VERSION; a bridge asks for the mode only of a library whose
 *     version is 2 or more. An entry that reads the call by hand must honour the flag.
 *   - Report a failure with call->api->SetStatus(call->status, code, message) and return;
 *     check cudaGetLastError() after a launch. Leave no output unallocated on success.
 *   - No Python, no GIL; the entry may run on any thread, several at once.
 *   - Versioning as in c_api.h: OPM_CudaKernelCall only gains fields at its end
 *     (struct_size says how many the bridge filled), OPM_CUDA_KERNEL_VERSION grows.
 */
#ifndef OPMARKET_CUDA_KERNEL_H_
#define OPMARKET_CUDA_KERNEL_H_

#include <stddef.h>
#include <stdint.h>

#include "opmarket/capi_bridge.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of OPM_CudaKernelCall: 2 added `flags` (the synchronizing mode). */
#define OPM_CUDA_KERNEL_VERSION 2

/* call->flags: synchronise around the launch, on a stream of the entry's (see Rules). */
#define OPM_CUDA_SYNCHRONIZE 1u

/* One call of a device entry, filled by the bridge. */
typedef struct OPM_CudaKernelCall {
  size_t struct_size;               /* sizeof(OPM_CudaKernelCall) of the bridge */
  uint32_t version;                 /* OPM_CUDA_KERNEL_VERSION of the bridge */
  int32_t device;                   /* the CUDA device ordinal the tensors live on */
  void* stream;                     /* the framework's cudaStream_t for this call */
  const OPM_Api* api;               /* statuses (SetStatus) and DataTypeSize */
  OPM_Status* status;               /* OK on entry; set it to fail the call */
  OPMB_KernelConstruction* attrs;   /* the node's attrs */
  OPMB_KernelContext* context;      /* inputs and outputs, on the device */
  uint32_t flags;                   /* version 2: OPM_CUDA_SYNCHRONIZE or 0 */
} OPM_CudaKernelCall;

/* call->flags where the bridge filled it (struct_size), else 0: a version 1 bridge. */
#define OPM_CUDA_CALL_FLAGS(call)                                                   \
  ((call)->struct_size >= offsetof(OPM_CudaKernelCall, flags) + sizeof(uint32_t) \
       ? (call)->flags                                                              \
       : 0u)

/* A device entry: launches the kernel for the call's inputs on its stream. */
typedef void (*OPM_CudaKernelFn)(const OPM_CudaKernelCall* call);

#if defined(_WIN32)
#define OPM_CUDA_ENTRY_EXPORT __declspec(dllexport)
#else
#define OPM_CUDA_ENTRY_EXPORT __attribute__((visibility("default")))
#endif
/* Marks a device entry's definition: exported, C linkage. */
#ifdef __cplusplus
#define OPM_CUDA_ENTRY extern "C" OPM_CUDA_ENTRY_EXPORT
#else
#define OPM_CUDA_ENTRY OPM_CUDA_ENTRY_EXPORT
#endif

#ifdef __cplusplus
}
#endif

#endif /* OPMARKET_CUDA_KERNEL_H_ */
