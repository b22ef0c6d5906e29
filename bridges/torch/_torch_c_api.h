/* The part of PyTorch's stable C ABI (the aoti_torch_* shim functions and torch/csrc/stable's
 * torch_* functions) that opmarket's PyTorch shim calls, declared here so that the shim
 * compiles without torch installed and ships built in opmarket's wheel.
 *
 * These are ABI facts of torch's stable C ABI: handle types, the error code, the version
 * number a boxed kernel is registered with, and the functions' signatures. The shim does not
 * link libtorch: each function is a pointer of the same name, filled by opm_torch_bind_api()
 * from the libtorch_cpu the process already loaded, so the shim carries no search path of the
 * machine it was built on and can say which functions a torch lacks.
 * tests/bridges/test_shipped_shims.py checks every declaration against the installed torch's
 * own headers. */
#ifndef OPM_TORCH_C_API_H_
#define OPM_TORCH_C_API_H_

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The library torch's stable C ABI lives in, by its soname. */
#define OPM_TORCH_LIBRARY "libtorch_cpu.so"
/* The stable ABI version the shim's boxed kernels are written against (torch 2.10's
 * TORCH_VERSION_2_10_0: major << 56 | minor << 48). */
#define OPM_TORCH_ABI_VERSION ((2ULL << 56) | (10ULL << 48))

/* With OPM_TORCH_CHECK_DECLARATIONS defined, torch's own headers come first and this one adds
 * only its list, for the test that compares the two. */
#ifndef OPM_TORCH_CHECK_DECLARATIONS
struct AtenTensorOpaque;
struct TorchLibraryOpaque;
struct StableListOpaque;
struct StringOpaque;
typedef struct AtenTensorOpaque* AtenTensorHandle;
typedef struct TorchLibraryOpaque* TorchLibraryHandle;
typedef struct StableListOpaque* StableListHandle;
typedef struct StringOpaque* StringHandle;
typedef int32_t AOTITorchError;
typedef uint64_t StableIValue;
#define AOTI_TORCH_SUCCESS 0
#endif

typedef void (*opm_torch_boxed_fn)(StableIValue*, uint64_t, uint64_t);

/* The library of torch's CUDA functions (a CUDA build of torch loads it; a CPU build has
 * none), and the opaque guard type of aoti_torch_create_device_guard. */
#define OPM_TORCH_CUDA_LIBRARY "libtorch_cuda.so"
#ifndef OPM_TORCH_CHECK_DECLARATIONS
struct DeviceGuardOpaque;
typedef struct DeviceGuardOpaque* DeviceGuardHandle;
#endif

/* X(return type, name, parameters): every torch function the shim calls. */
#define OPM_TORCH_FUNCTIONS(X)                                                               \
  X(int32_t, aoti_torch_device_type_cpu, ())                                                 \
  X(int32_t, aoti_torch_dtype_float32, ())                                                   \
  X(int32_t, aoti_torch_dtype_float64, ())                                                   \
  X(int32_t, aoti_torch_dtype_float16, ())                                                   \
  X(int32_t, aoti_torch_dtype_bfloat16, ())                                                  \
  X(int32_t, aoti_torch_dtype_int8, ())                                                      \
  X(int32_t, aoti_torch_dtype_int16, ())                                                     \
  X(int32_t, aoti_torch_dtype_int32, ())                                                     \
  X(int32_t, aoti_torch_dtype_int64, ())                                                     \
  X(int32_t, aoti_torch_dtype_uint8, ())                                                     \
  X(int32_t, aoti_torch_dtype_uint16, ())                                                    \
  X(int32_t, aoti_torch_dtype_uint32, ())                                                    \
  X(int32_t, aoti_torch_dtype_uint64, ())                                                    \
  X(int32_t, aoti_torch_dtype_bool, ())                                                      \
  X(int32_t, aoti_torch_dtype_complex64, ())                                                 \
  X(int32_t, aoti_torch_dtype_complex128, ())                                                \
  X(AOTITorchError, aoti_torch_delete_tensor_object, (AtenTensorHandle))                     \
  X(AOTITorchError, aoti_torch_get_data_ptr, (AtenTensorHandle, void**))                     \
  X(AOTITorchError, aoti_torch_get_dim, (AtenTensorHandle, int64_t*))                        \
  X(AOTITorchError, aoti_torch_get_numel, (AtenTensorHandle, int64_t*))                      \
  X(AOTITorchError, aoti_torch_get_sizes, (AtenTensorHandle, int64_t**))                     \
  X(AOTITorchError, aoti_torch_get_dtype, (AtenTensorHandle, int32_t*))                      \
  X(AOTITorchError, aoti_torch_is_contiguous, (AtenTensorHandle, bool*))                     \
  X(AOTITorchError, aoti_torch_empty_strided,                                                \
    (int64_t, const int64_t*, const int64_t*, int32_t, int32_t, int32_t, AtenTensorHandle*)) \
  X(AOTITorchError, aoti_torch_copy_, (AtenTensorHandle, AtenTensorHandle, int32_t))         \
  X(AOTITorchError, aoti_torch_library_init_impl,                                            \
    (const char*, const char*, const char*, uint32_t, TorchLibraryHandle*))                  \
  X(AOTITorchError, torch_library_impl,                                                      \
    (TorchLibraryHandle, const char*, opm_torch_boxed_fn, uint64_t))                         \
  X(AOTITorchError, torch_list_size, (StableListHandle, size_t*))                            \
  X(AOTITorchError, torch_list_get_item, (StableListHandle, size_t, StableIValue*))          \
  X(AOTITorchError, torch_delete_list, (StableListHandle))                                   \
  X(AOTITorchError, torch_string_length, (StringHandle, size_t*))                            \
  X(AOTITorchError, torch_string_c_str, (StringHandle, const char**))                        \
  X(AOTITorchError, torch_delete_string, (StringHandle))

/* What the CUDA path (CUDA dispatch-key kernels) calls besides: bound apart and optionally,
 * so that the shim loads on a CPU build of torch. X(return type, name, parameters, library):
 * the last from libtorch_cuda (aoti_torch_get_current_cuda_stream is built only with CUDA). */
#define OPM_TORCH_CUDA_FUNCTIONS(X)                                                          \
  X(int32_t, aoti_torch_device_type_cuda, (), OPM_TORCH_LIBRARY)                             \
  X(AOTITorchError, aoti_torch_get_device_type, (AtenTensorHandle, int32_t*),                \
    OPM_TORCH_LIBRARY)                                                                       \
  X(AOTITorchError, aoti_torch_get_device_index, (AtenTensorHandle, int32_t*),               \
    OPM_TORCH_LIBRARY)                                                                       \
  X(AOTITorchError, aoti_torch_create_device_guard, (int32_t, DeviceGuardHandle*),           \
    OPM_TORCH_LIBRARY)                                                                       \
  X(AOTITorchError, aoti_torch_delete_device_guard, (DeviceGuardHandle), OPM_TORCH_LIBRARY)  \
  X(AOTITorchError, aoti_torch_get_current_cuda_stream, (int32_t, void**),                   \
    OPM_TORCH_CUDA_LIBRARY)

#ifndef OPM_TORCH_CHECK_DECLARATIONS
/* One function pointer per torch function, named as the function, so the shim's calls read
 * as calls into torch. */
#define OPM_TORCH_POINTER(ret, name, params) static ret(*name) params = NULL;
OPM_TORCH_FUNCTIONS(OPM_TORCH_POINTER)
#undef OPM_TORCH_POINTER
#define OPM_TORCH_CUDA_POINTER(ret, name, params, library) static ret(*name) params = NULL;
OPM_TORCH_CUDA_FUNCTIONS(OPM_TORCH_CUDA_POINTER)
#undef OPM_TORCH_CUDA_POINTER

/* Fills the pointers from the torch this process loaded; the names it cannot find go into
 * `missing` (space-separated, cut at `cap` bytes). Returns how many are missing, or -1 when
 * no torch is loaded. Called once, before anything else in the shim. */
static int opm_torch_bind_api(char* missing, size_t cap) {
  void* lib = dlopen(OPM_TORCH_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
  if (lib == NULL) return -1;
  int n = 0;
  if (cap > 0) missing[0] = '\0';
#define OPM_TORCH_BIND(ret, name, params)                                               \
  *(void**)(&name) = dlsym(lib, #name);                                                 \
  if (name == NULL) {                                                                   \
    ++n;                                                                                \
    size_t used = strlen(missing);                                                      \
    if (used + sizeof(#name) + 1 < cap) {                                               \
      memcpy(missing + used, used ? " " #name : #name, sizeof(#name) + (used ? 1 : 0)); \
    }                                                                                   \
  }
  OPM_TORCH_FUNCTIONS(OPM_TORCH_BIND)
#undef OPM_TORCH_BIND
  dlclose(lib); /* torch keeps it loaded: the NOLOAD open only took a reference */
  return n;
}

/* Fills the CUDA path's pointers, as opm_torch_bind_api: how many are missing (names in
 * `missing`), or -1 when the process has not loaded torch's CUDA library (a CPU build). */
static int opm_torch_bind_cuda_api(char* missing, size_t cap) {
  void* cuda = dlopen(OPM_TORCH_CUDA_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
  if (cuda == NULL) return -1;
  void* cpu = dlopen(OPM_TORCH_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
  int n = 0;
  if (cap > 0) missing[0] = '\0';
#define OPM_TORCH_CUDA_BIND(ret, name, params, library)                                 \
  *(void**)(&name) = dlsym(strcmp(library, OPM_TORCH_LIBRARY) == 0 ? cpu : cuda, #name); \
  if (name == NULL) {                                                                   \
    ++n;                                                                                \
    size_t used = strlen(missing);                                                      \
    if (used + sizeof(#name) + 1 < cap) {                                               \
      memcpy(missing + used, used ? " " #name : #name, sizeof(#name) + (used ? 1 : 0)); \
    }                                                                                   \
  }
  if (cpu != NULL) {
    OPM_TORCH_CUDA_FUNCTIONS(OPM_TORCH_CUDA_BIND)
    dlclose(cpu);
  } else {
    n = -1;
  }
#undef OPM_TORCH_CUDA_BIND
  dlclose(cuda);
  return n;
}
#endif

#endif /* OPM_TORCH_C_API_H_ */
