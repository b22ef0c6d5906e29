/* opmarket's PyTorch shim, second part (appended to _shim.cc after the generated trampolines
 * and their table opm_boxed): binding torch's functions, registering a slot's kernel. */

/* Finds torch's functions in the loaded torch: how many it lacks (their names in `missing`),
 * or -1 when no torch is loaded. Python calls it first, once. */
OPM_TORCH_EXPORT int32_t opm_torch_bind(char* missing, uint64_t cap) {
  return (int32_t)opm_torch_bind_api(missing, (size_t)cap);
}

/* Finds the CUDA path's functions: how many this torch lacks (their names in `missing`), or
 * -1 when it has loaded no CUDA library (a CPU build: the shim registers no CUDA kernel). */
OPM_TORCH_EXPORT int32_t opm_torch_bind_cuda(char* missing, uint64_t cap) {
  std::lock_guard<std::mutex> guard(g_lock);
  g_cuda_bound = opm_torch_bind_cuda_api(missing, (size_t)cap);
  return (int32_t)g_cuda_bound;
}

namespace {

void set_error(char* error, size_t size, const std::string& message) {
  if (size == 0) return;
  std::strncpy(error, message.c_str(), size - 1);
  error[size - 1] = '\0';
}

}  // namespace

/* Slot `slot` runs the C-ABI kernels `kernels` (one per row of `kernel_dtypes`: the OPM
 * dtypes of the inputs, then of the ScalarType args at `dtype_args`) as the CPU kernel of
 * torch operator `ns::name` (an overload: `name.label`), whose schema has `n_in` tensors,
 * `n_args` arguments in all and `n_out` tensor results. Attr i is read from
 * `attr_sources[i]` (enum Source) at `attr_indices[i]` (an input, or an argument counted
 * after the inputs). 0, or -1 with the reason in `error`. */
static int register_slot(bool cuda, const char* ns, const char* name, int32_t slot,
                         const void* bridge, int32_t n_in, int32_t n_args, int32_t n_out,
                         int32_t n_attrs, const char** attr_names, const int32_t* attr_sources,
                         const int32_t* attr_indices, int32_t n_dtype_args,
                         const int32_t* dtype_args, int32_t n_kernels,
                         const int32_t* kernel_dtypes, const void* const* kernels, char* error,
                         size_t error_size) {
  const auto* b = static_cast<const OPMB_BridgeApi*>(bridge);
  std::lock_guard<std::mutex> guard(g_lock);
  if (cuda && g_cuda_bound != 0) {
    set_error(error, error_size,
              g_cuda_bound == -1   ? "torch has no CUDA library loaded (a CPU build)"
              : g_cuda_bound == -2 ? "torch's CUDA functions are not bound yet"
                                   : "torch lacks functions of its CUDA C ABI");
    return -1;
  }
  if (b == nullptr || b->struct_size < sizeof(OPMB_BridgeApi) || b->version < 1) {
    set_error(error, error_size, "opmarket's host has no usable bridge table");
    return -1;
  }
  boxed_fn fn = slot >= 0 && slot < OPM_TORCH_SLOTS ? opm_boxed[slot] : nullptr;
  if (fn == nullptr || g_slots[slot] != nullptr) {
    set_error(error, error_size, "opmarket's PyTorch shim: out of kernel slots");
    return -1;
  }
  if (n_in > OPM_TORCH_MAX_ARGS || n_out > OPM_TORCH_MAX_ARGS || n_args > OPM_TORCH_MAX_ARGS) {
    set_error(error, error_size, "more than 64 inputs, outputs or arguments");
    return -1;
  }
  static bool dtypes_ready = false;
  if (!dtypes_ready) {
    init_dtypes();
    dtypes_ready = true;
  }
  auto* s = new Slot();
  s->bridge = b;
  s->name = std::string(ns) + "::" + name;
  s->n_in = n_in;
  s->n_args = n_args;
  s->n_out = n_out;
  for (int32_t i = 0; i < n_attrs; ++i)
    s->attrs.push_back({attr_names[i], attr_sources[i], attr_indices[i]});
  for (int32_t i = 0; i < n_dtype_args; ++i) s->dtype_args.push_back(dtype_args[i]);
  s->arg_sources.assign((size_t)(n_args - n_in), ARG_INT);
  for (const Attr& a : s->attrs)
    if (a.source != FROM_INPUT_DTYPE && a.index >= 0 && a.index < n_args - n_in)
      s->arg_sources[(size_t)a.index] = a.source;
  int32_t width = n_in + n_dtype_args;
  for (int32_t k = 0; k < n_kernels; ++k) {
    Entry e;
    e.dtypes.assign(kernel_dtypes + (size_t)k * width, kernel_dtypes + (size_t)(k + 1) * width);
    e.kernel = cuda ? nullptr : static_cast<const OPMB_Kernel*>(kernels[k]);
    e.device_fn = cuda ? reinterpret_cast<OPM_CudaKernelFn>(const_cast<void*>(kernels[k]))
                       : nullptr;
    s->kernels.push_back(e);
  }
  s->cuda = cuda;
  const char* key = cuda ? "CUDA" : "CPU";
  TorchLibraryHandle lib = nullptr;
  if (aoti_torch_library_init_impl(ns, key, "opmarket/torch/_shim.cc", 0, &lib) !=
          AOTI_TORCH_SUCCESS ||
      torch_library_impl(lib, name, fn, OPM_TORCH_ABI_VERSION) != AOTI_TORCH_SUCCESS) {
    set_error(error, error_size, std::string("torch refused the ") + key + " kernel of " +
                                     s->name);
    delete s;
    return -1;
  }
  g_libraries.push_back(lib); /* kept: deleting it would take the kernel away */
  g_slots[slot] = s;
  return 0;
}

OPM_TORCH_EXPORT int opm_torch_register(const char* ns, const char* name, int32_t slot,
                                        const void* bridge, int32_t n_in, int32_t n_args,
                                        int32_t n_out, int32_t n_attrs, const char** attr_names,
                                        const int32_t* attr_sources, const int32_t* attr_indices,
                                        int32_t n_dtype_args, const int32_t* dtype_args,
                                        int32_t n_kernels, const int32_t* kernel_dtypes,
                                        const void* const* kernels, char* error,
                                        size_t error_size) {
  return register_slot(false, ns, name, slot, bridge, n_in, n_args, n_out, n_attrs, attr_names,
                       attr_sources, attr_indices, n_dtype_args, dtype_args, n_kernels,
                       kernel_dtypes, kernels, error, error_size);
}

/* As opm_torch_register, for torch's CUDA dispatch key: `kernels` are device entries
 * (OPM_CudaKernelFn, opmarket/cuda_kernel.h). Refused until opm_torch_bind_cuda found
 * torch's CUDA functions. */
OPM_TORCH_EXPORT int opm_torch_register_cuda(
    const char* ns, const char* name, int32_t slot, const void* bridge, int32_t n_in,
    int32_t n_args, int32_t n_out, int32_t n_attrs, const char** attr_names,
    const int32_t* attr_sources, const int32_t* attr_indices, int32_t n_dtype_args,
    const int32_t* dtype_args, int32_t n_kernels, const int32_t* kernel_dtypes,
    const void* const* kernels, char* error, size_t error_size) {
  return register_slot(true, ns, name, slot, bridge, n_in, n_args, n_out, n_attrs, attr_names,
                       attr_sources, attr_indices, n_dtype_args, dtype_args, n_kernels,
                       kernel_dtypes, kernels, error, error_size);
}
