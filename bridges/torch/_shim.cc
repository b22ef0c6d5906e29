/* opmarket's PyTorch shim: C-ABI kernels as boxed CPU kernels of torch operators, registered
 * through PyTorch's stable C ABI (aoti_torch_library_init_impl + torch_library_impl). The
 * kernel runs through the host's bridge table (opmarket/capi_bridge.h) on torch's own
 * buffers, with no Python per call. A boxed kernel gets no user-data pointer, so each
 * registration takes a slot, and slot i's kernel is the generated trampoline opm_boxed_i
 * (appended after this file by opmarket._bridge's torch_source, then _shim_register.cc).
 * Built against opmarket's declarations of torch's C functions (_torch_c_api.h), it links no
 * torch: opm_torch_bind finds them in the process's libtorch_cpu, so one build (shipped in
 * opmarket's wheel) serves every torch that has them.
 *
 * A slot may instead be a CUDA kernel (opm_torch_register_cuda): a GPU companion's device
 * entries (opmarket/cuda_kernel.h) called on the CUDA tensors' memory with torch's current
 * stream of their device, under a device guard; torch's CUDA functions are bound apart
 * (opm_torch_bind_cuda), so the shim loads on a CPU build of torch all the same. */

#include "_torch_c_api.h"

#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "opmarket/capi_bridge.h"
#include "opmarket/cuda_kernel.h"

#define OPM_TORCH_EXPORT extern "C" __attribute__((visibility("default")))
#define OPM_TORCH_MAX_ARGS 64
#define OPM_TORCH_MAX_DIMS 64
/* Kernel states kept per slot (one per dtype and attr signature); later ones are made and
 * deleted on each call. */
#define OPM_TORCH_MAX_STATES 64

namespace {

/* Where an attr's value comes from: the dtype of input `index`, or argument `index` of the
 * boxed stack (counted after the inputs) as an int, a float (double), a bool, a
 * ScalarType, an int[], a float[] or a str. */
enum Source {
  FROM_INPUT_DTYPE = 0,
  ARG_INT = 1,
  ARG_FLOAT = 2,
  ARG_BOOL = 3,
  ARG_DTYPE = 4,
  ARG_INT_LIST = 5,
  ARG_FLOAT_LIST = 6,
  ARG_STRING = 7
};

bool is_variable(int source) { return source >= ARG_INT_LIST; }

struct Attr {
  std::string name;
  int source;
  int index;
};

struct Entry {
  std::vector<int32_t> dtypes; /* OPM dtypes of the inputs, then of the ScalarType args */
  const OPMB_Kernel* kernel;
  OPM_CudaKernelFn device_fn; /* a CUDA slot's device entry (kernel is then NULL) */
};

struct State {
  std::vector<uint64_t> key;
  const OPMB_Kernel* kernel;
  void* state;
};

struct Slot {
  const OPMB_BridgeApi* bridge = nullptr;
  std::string name;
  int n_in = 0, n_args = 0, n_out = 0;
  std::vector<Attr> attrs;
  std::vector<int> dtype_args; /* stack indices of ScalarType args */
  std::vector<int> arg_sources; /* each argument after the inputs: its Source */
  std::vector<Entry> kernels;
  bool cuda = false; /* a CUDA dispatch-key kernel: device entries */
  std::mutex lock;
  std::vector<State> states;
};

Slot* g_slots[OPM_TORCH_SLOTS];
int32_t g_torch_to_opm[64];
int32_t g_opm_to_torch[32];
std::vector<TorchLibraryHandle> g_libraries;
std::mutex g_lock;
/* opm_torch_bind_cuda's answer: 0 bound, -1 no CUDA torch, n functions missing; -2 not asked */
int g_cuda_bound = -2;

void map_dtype(int32_t torch_code, int32_t opm) {
  if (torch_code >= 0 && torch_code < 64) g_torch_to_opm[torch_code] = opm;
  if (opm >= 0 && opm < 32) g_opm_to_torch[opm] = torch_code;
}

void init_dtypes() {
  for (auto& v : g_torch_to_opm) v = -1;
  for (auto& v : g_opm_to_torch) v = -1;
  map_dtype(aoti_torch_dtype_float32(), OPM_FLOAT);
  map_dtype(aoti_torch_dtype_float64(), OPM_DOUBLE);
  map_dtype(aoti_torch_dtype_int32(), OPM_INT32);
  map_dtype(aoti_torch_dtype_uint8(), OPM_UINT8);
  map_dtype(aoti_torch_dtype_int16(), OPM_INT16);
  map_dtype(aoti_torch_dtype_int8(), OPM_INT8);
  map_dtype(aoti_torch_dtype_complex64(), OPM_COMPLEX64);
  map_dtype(aoti_torch_dtype_int64(), OPM_INT64);
  map_dtype(aoti_torch_dtype_bool(), OPM_BOOL);
  map_dtype(aoti_torch_dtype_bfloat16(), OPM_BFLOAT16);
  map_dtype(aoti_torch_dtype_uint16(), OPM_UINT16);
  map_dtype(aoti_torch_dtype_complex128(), OPM_COMPLEX128);
  map_dtype(aoti_torch_dtype_float16(), OPM_HALF);
  map_dtype(aoti_torch_dtype_uint32(), OPM_UINT32);
  map_dtype(aoti_torch_dtype_uint64(), OPM_UINT64);
}

int32_t to_opm(int32_t torch_code) {
  return torch_code >= 0 && torch_code < 64 ? g_torch_to_opm[torch_code] : -1;
}

/* ---- the construction interface: attrs from the call's stack and input dtypes ---------- */
struct Construction {
  OPMB_KernelConstruction base;
  Slot* slot;
  /* the inputs' OPM dtypes, then the stack's attr args (for a list or a string: where its
   * length and values follow in the key) */
  const uint64_t* key;
};

const Attr* find_attr(Construction* c, const char* name, int kind, OPM_Status* status) {
  for (const Attr& a : c->slot->attrs) {
    if (a.name == name) {
      bool ok = kind == ARG_DTYPE ? (a.source == FROM_INPUT_DTYPE || a.source == ARG_DTYPE)
                                  : a.source == kind;
      if (ok) return &a;
      break;
    }
  }
  std::string msg = std::string("attr '") + name + "' is missing or of another kind";
  c->slot->bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, msg.c_str());
  return nullptr;
}

uint64_t arg_value(Construction* c, const Attr* a) { return c->key[c->slot->n_in + a->index]; }

void c_get_type(OPMB_KernelConstruction* b, const char* name, OPM_DataType* value,
                OPM_Status* status) {
  auto* c = reinterpret_cast<Construction*>(b);
  const Attr* a = find_attr(c, name, ARG_DTYPE, status);
  if (a == nullptr) return;
  if (a->source == FROM_INPUT_DTYPE) {
    *value = (OPM_DataType)c->key[a->index];
  } else {
    *value = (OPM_DataType)to_opm((int32_t)arg_value(c, a));
  }
}

void c_get_int64(OPMB_KernelConstruction* b, const char* name, int64_t* value,
                 OPM_Status* status) {
  auto* c = reinterpret_cast<Construction*>(b);
  const Attr* a = find_attr(c, name, ARG_INT, status);
  if (a != nullptr) std::memcpy(value, &c->key[c->slot->n_in + a->index], sizeof *value);
}

void c_get_float(OPMB_KernelConstruction* b, const char* name, float* value,
                 OPM_Status* status) {
  auto* c = reinterpret_cast<Construction*>(b);
  const Attr* a = find_attr(c, name, ARG_FLOAT, status);
  if (a == nullptr) return;
  double d = 0;
  std::memcpy(&d, &c->key[c->slot->n_in + a->index], sizeof d);
  *value = (float)d;
}

void c_get_bool(OPMB_KernelConstruction* b, const char* name, uint8_t* value,
                OPM_Status* status) {
  auto* c = reinterpret_cast<Construction*>(b);
  const Attr* a = find_attr(c, name, ARG_BOOL, status);
  if (a != nullptr) *value = (uint8_t)(arg_value(c, a) & 0xff) != 0;
}

/* A list's or a string's length and first value in the key. */
const uint64_t* variable(Construction* c, const Attr* a, size_t* length) {
  uint64_t at = arg_value(c, a);
  *length = (size_t)c->key[at];
  return &c->key[at + 1];
}

void c_get_string(OPMB_KernelConstruction* b, const char* name, char* value,
                  size_t max_length, size_t* length, OPM_Status* status) {
  auto* c = reinterpret_cast<Construction*>(b);
  const Attr* a = find_attr(c, name, ARG_STRING, status);
  if (a == nullptr) return;
  const uint64_t* words = variable(c, a, length);
  std::memcpy(value, words, *length < max_length ? *length : max_length);
}

void c_get_int64_list(OPMB_KernelConstruction* b, const char* name, int64_t* values,
                      size_t max_values, size_t* length, OPM_Status* status) {
  auto* c = reinterpret_cast<Construction*>(b);
  const Attr* a = find_attr(c, name, ARG_INT_LIST, status);
  if (a == nullptr) return;
  const uint64_t* items = variable(c, a, length);
  for (size_t k = 0; k < *length && k < max_values; ++k) std::memcpy(&values[k], &items[k], 8);
}

void c_get_float_list(OPMB_KernelConstruction* b, const char* name, float* values,
                      size_t max_values, size_t* length, OPM_Status* status) {
  auto* c = reinterpret_cast<Construction*>(b);
  const Attr* a = find_attr(c, name, ARG_FLOAT_LIST, status);
  if (a == nullptr) return;
  const uint64_t* items = variable(c, a, length);
  for (size_t k = 0; k < *length && k < max_values; ++k) {
    double d = 0;
    std::memcpy(&d, &items[k], sizeof d);
    values[k] = (float)d;
  }
}

const OPMB_KernelConstructionOps construction_ops = {
    sizeof(OPMB_KernelConstructionOps), c_get_type, c_get_int64, c_get_float, c_get_bool,
    c_get_string, c_get_int64_list, c_get_float_list};

/* Argument i's list or string appended to the key (its length, then its values; a
 * string's bytes packed into words), the handle deleted (the kernel owns it); false when
 * torch could not read it. */
bool append_variable(int source, StableIValue value, std::vector<uint64_t>* key) {
  if (source == ARG_STRING) {
    auto h = (StringHandle)(uintptr_t)value;
    size_t length = 0;
    const char* data = nullptr;
    bool ok = torch_string_length(h, &length) == AOTI_TORCH_SUCCESS &&
              torch_string_c_str(h, &data) == AOTI_TORCH_SUCCESS;
    if (ok) {
      key->push_back(length);
      size_t at = key->size();
      key->resize(at + (length + 7) / 8, 0);
      std::memcpy(key->data() + at, data, length);
    }
    torch_delete_string(h);
    return ok;
  }
  auto h = (StableListHandle)(uintptr_t)value;
  size_t length = 0;
  bool ok = torch_list_size(h, &length) == AOTI_TORCH_SUCCESS;
  if (ok) {
    key->push_back(length);
    for (size_t k = 0; k < length && ok; ++k) {
      StableIValue item = 0;
      ok = torch_list_get_item(h, k, &item) == AOTI_TORCH_SUCCESS;
      key->push_back(item);
    }
  }
  torch_delete_list(h);
  return ok;
}

/* ---- the compute interface: torch's tensors ------------------------------------------ */
struct Context {
  OPMB_KernelContext base;
  Slot* slot;
  int32_t device_type; /* torch's, for outputs and contiguous copies */
  int32_t device_index;
  OPMB_Tensor in[OPM_TORCH_MAX_ARGS];
  AtenTensorHandle out_h[OPM_TORCH_MAX_ARGS];
  OPMB_Tensor out[OPM_TORCH_MAX_ARGS];
  int64_t out_dims[OPM_TORCH_MAX_ARGS][OPM_TORCH_MAX_DIMS];
};

int k_num_inputs(OPMB_KernelContext* c) { return reinterpret_cast<Context*>(c)->slot->n_in; }

int k_num_outputs(OPMB_KernelContext* c) { return reinterpret_cast<Context*>(c)->slot->n_out; }

const OPMB_Tensor* k_get_input(OPMB_KernelContext* b, int i, OPM_Status* status) {
  auto* c = reinterpret_cast<Context*>(b);
  if (i < 0 || i >= c->slot->n_in) {
    c->slot->bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, "no such input");
    return nullptr;
  }
  return &c->in[i];
}

const OPMB_Tensor* k_allocate_output(OPMB_KernelContext* b, int i, OPM_DataType dtype,
                                     const int64_t* dims, int num_dims, OPM_Status* status) {
  auto* c = reinterpret_cast<Context*>(b);
  const OPM_Api* api = c->slot->bridge->api;
  int32_t code = dtype >= 0 && dtype < 32 ? g_opm_to_torch[dtype] : -1;
  if (i < 0 || i >= c->slot->n_out || num_dims < 0 || num_dims > OPM_TORCH_MAX_DIMS ||
      code < 0) {
    api->SetStatus(status, OPM_INVALID_ARGUMENT, "output index, rank or dtype out of range");
    return nullptr;
  }
  int64_t strides[OPM_TORCH_MAX_DIMS];
  int64_t step = 1;
  for (int k = num_dims - 1; k >= 0; --k) {
    strides[k] = step;
    step *= dims[k] > 0 ? dims[k] : 1;
  }
  AtenTensorHandle h = nullptr;
  if (aoti_torch_empty_strided(num_dims, dims, strides, code, c->device_type, c->device_index,
                               &h) != AOTI_TORCH_SUCCESS) {
    api->SetStatus(status, OPM_RESOURCE_EXHAUSTED, "torch could not allocate an output");
    return nullptr;
  }
  if (c->out_h[i] != nullptr) aoti_torch_delete_tensor_object(c->out_h[i]);
  c->out_h[i] = h;
  size_t size = api->DataTypeSize(dtype);
  for (int k = 0; k < num_dims; ++k) {
    c->out_dims[i][k] = dims[k];
    size *= (size_t)dims[k];
  }
  void* data = nullptr;
  aoti_torch_get_data_ptr(h, &data);
  c->out[i] = {dtype, num_dims, c->out_dims[i], data, size};
  return &c->out[i];
}

const OPMB_KernelContextOps context_ops = {sizeof(OPMB_KernelContextOps), k_num_inputs,
                                           k_num_outputs, k_get_input, k_allocate_output};

/* The kernel state for this key: made once (kept), or for this call only (*temporary). */
void* state_for(Slot* s, const std::vector<uint64_t>& key, const OPMB_Kernel* kernel,
                bool* temporary, std::string* error, int* code) {
  {
    std::lock_guard<std::mutex> guard(s->lock);
    for (const State& st : s->states)
      if (st.key == key && st.kernel == kernel) return st.state;
  }
  Construction c = {{&construction_ops}, s, key.data()};
  const OPMB_BridgeApi* bridge = s->bridge;
  OPM_Status* status = bridge->api->NewStatus();
  void* state = bridge->kernel_create(kernel, &c.base, status);
  bool ok = bridge->api->GetCode(status) == OPM_OK;
  if (!ok) {
    *error = bridge->api->Message(status);
    *code = bridge->api->GetCode(status);
  }
  bridge->api->DeleteStatus(status);
  if (!ok) return nullptr;
  std::lock_guard<std::mutex> guard(s->lock);
  if (s->states.size() < OPM_TORCH_MAX_STATES) {
    s->states.push_back({key, kernel, state});
    *temporary = false;
  } else {
    *temporary = true;
  }
  return state;
}

/* The kernel's failure as the exception torch turns into Python's ValueError (a bad
 * argument), IndexError (out of range) or RuntimeError. */
[[noreturn]] void fail(const std::string& message, int code = OPM_INTERNAL) {
  if (code == OPM_INVALID_ARGUMENT) throw std::invalid_argument(message);
  if (code == OPM_OUT_OF_RANGE) throw std::out_of_range(message);
  throw std::runtime_error(message);
}

/* A CUDA slot's device: every input a CUDA tensor on one device (its index in c); "" or why
 * not. */
std::string cuda_device(AtenTensorHandle* inputs, int n_in, Context* c) {
  c->device_type = aoti_torch_device_type_cuda();
  for (int i = 0; i < n_in; ++i) {
    int32_t type = -1, index = -1;
    if (aoti_torch_get_device_type(inputs[i], &type) != AOTI_TORCH_SUCCESS ||
        aoti_torch_get_device_index(inputs[i], &index) != AOTI_TORCH_SUCCESS)
      return "torch could not say an input's device";
    if (type != c->device_type) return "an input is not a CUDA tensor";
    if (i == 0) c->device_index = index;
    if (index != c->device_index) return "the inputs are on different CUDA devices";
  }
  return "";
}

/* Runs a CUDA slot's device entry on the context's tensors, on torch's current stream of
 * their device and with that device current; the outputs stay in c. */
void run_device_entry(Slot* s, OPM_CudaKernelFn fn, const std::vector<uint64_t>& key,
                      Context* c, std::string* error, int* code) {
  const OPMB_BridgeApi* bridge = s->bridge;
  void* stream = nullptr;
  if (aoti_torch_get_current_cuda_stream(c->device_index, &stream) != AOTI_TORCH_SUCCESS) {
    *error = "torch could not give the current CUDA stream";
    return;
  }
  DeviceGuardHandle guard = nullptr;
  if (aoti_torch_create_device_guard(c->device_index, &guard) != AOTI_TORCH_SUCCESS) {
    *error = "torch could not make the CUDA device current";
    return;
  }
  Construction attrs = {{&construction_ops}, s, key.data()};
  OPM_Status* status = bridge->api->NewStatus();
  OPM_CudaKernelCall call = {sizeof(OPM_CudaKernelCall), OPM_CUDA_KERNEL_VERSION,
                             c->device_index,            stream,
                             bridge->api,                status,
                             &attrs.base,                &c->base,
                             0 /* flags: torch's stream, no synchronisation */};
  fn(&call);
  if (bridge->api->GetCode(status) != OPM_OK) {
    *error = bridge->api->Message(status);
    *code = bridge->api->GetCode(status);
  } else {
    for (int i = 0; i < s->n_out && error->empty(); ++i)
      if (c->out_h[i] == nullptr) *error = "the GPU kernel left an output unallocated";
  }
  bridge->api->DeleteStatus(status);
  aoti_torch_delete_device_guard(guard);
}

void boxed_common(int slot_index, StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  Slot* s = g_slots[slot_index];
  if (s == nullptr || (int)num_args != s->n_args || (int)num_outputs != s->n_out)
    fail("opmarket: the torch operator's schema does not match its native kernel");
  Context c;
  c.base.ops = &context_ops;
  c.slot = s;
  c.device_type = aoti_torch_device_type_cpu();
  c.device_index = 0;
  AtenTensorHandle owned[OPM_TORCH_MAX_ARGS * 2];
  int n_owned = 0;
  for (int i = 0; i < s->n_in; ++i) owned[n_owned++] = (AtenTensorHandle)(uintptr_t)stack[i];
  for (int i = 0; i < s->n_out; ++i) c.out_h[i] = nullptr;
  std::string error;
  int code = OPM_INTERNAL;
  std::vector<uint64_t> key((size_t)s->n_args, 0);
  for (int i = s->n_in; i < s->n_args; ++i) { /* first: every list and string is ours to free */
    int source = s->arg_sources[(size_t)(i - s->n_in)];
    if (!is_variable(source)) {
      key[(size_t)i] = stack[i];
    } else {
      key[(size_t)i] = key.size();
      if (!append_variable(source, stack[i], &key) && error.empty())
        error = "torch could not hand over a list or string argument";
    }
  }
  if (s->cuda && error.empty()) error = cuda_device(owned, s->n_in, &c);
  for (int i = 0; i < s->n_in && error.empty(); ++i) {
    AtenTensorHandle h = owned[i];
    bool contiguous = true;
    aoti_torch_is_contiguous(h, &contiguous);
    int64_t ndim = 0;
    int64_t* sizes = nullptr;
    int32_t code = 0;
    aoti_torch_get_dim(h, &ndim);
    aoti_torch_get_sizes(h, &sizes);
    aoti_torch_get_dtype(h, &code);
    if (!contiguous) { /* the kernel reads C-contiguous memory: a copy of this one */
      int64_t strides[OPM_TORCH_MAX_DIMS];
      int64_t step = 1;
      for (int64_t k = ndim - 1; k >= 0; --k) {
        strides[k] = step;
        step *= sizes[k] > 0 ? sizes[k] : 1;
      }
      AtenTensorHandle copy = nullptr;
      if (ndim > OPM_TORCH_MAX_DIMS ||
          aoti_torch_empty_strided(ndim, sizes, strides, code, c.device_type, c.device_index,
                                   &copy) != AOTI_TORCH_SUCCESS ||
          aoti_torch_copy_(copy, h, 0) != AOTI_TORCH_SUCCESS) {
        error = "could not make an input contiguous";
        break;
      }
      owned[n_owned++] = copy;
      h = copy;
      aoti_torch_get_sizes(h, &sizes);
    }
    int32_t dtype = to_opm(code);
    if (dtype < 0) {
      error = "an input's dtype has no opmarket type";
      break;
    }
    int64_t numel = 0;
    aoti_torch_get_numel(h, &numel);
    void* data = nullptr;
    aoti_torch_get_data_ptr(h, &data);
    c.in[i] = {(OPM_DataType)dtype, (int32_t)ndim, sizes, data,
               (size_t)numel * s->bridge->api->DataTypeSize((OPM_DataType)dtype)};
    key[(size_t)i] = (uint64_t)dtype;
  }
  const OPMB_Kernel* kernel = nullptr;
  OPM_CudaKernelFn device_fn = nullptr;
  if (error.empty()) {
    for (const Entry& e : s->kernels) {
      bool match = true;
      for (int i = 0; i < s->n_in && match; ++i) match = e.dtypes[(size_t)i] == (int32_t)key[(size_t)i];
      for (size_t j = 0; j < s->dtype_args.size() && match; ++j)
        match = e.dtypes[(size_t)s->n_in + j] == to_opm((int32_t)stack[s->dtype_args[j]]);
      if (match) {
        kernel = e.kernel;
        device_fn = e.device_fn;
        break;
      }
    }
    if (kernel == nullptr && device_fn == nullptr) {
      error = s->cuda ? "no GPU kernel is registered for these input dtypes"
                      : "no CPU kernel is registered for these input dtypes";
      code = OPM_NOT_FOUND;
    }
  }
  if (s->cuda) {
    if (error.empty()) run_device_entry(s, device_fn, key, &c, &error, &code);
  }
  bool temporary = false;
  void* state = nullptr;
  if (error.empty() && !s->cuda) state = state_for(s, key, kernel, &temporary, &error, &code);
  if (error.empty() && !s->cuda) {
    const OPMB_BridgeApi* bridge = s->bridge;
    OPM_Status* status = bridge->api->NewStatus();
    bridge->kernel_compute(kernel, state, &c.base, status);
    if (bridge->api->GetCode(status) != OPM_OK) {
      error = bridge->api->Message(status);
      code = bridge->api->GetCode(status);
    }
    bridge->api->DeleteStatus(status);
    if (temporary) bridge->kernel_delete(kernel, state);
  }
  for (int i = 0; i < n_owned; ++i) aoti_torch_delete_tensor_object(owned[i]);
  if (!error.empty()) {
    for (int i = 0; i < s->n_out; ++i)
      if (c.out_h[i] != nullptr) aoti_torch_delete_tensor_object(c.out_h[i]);
    fail(error.rfind("Opm", 0) == 0 || error.find(" (kernel ") != std::string::npos
             ? error
             : s->name + ": " + error,
         code);
  }
  for (int i = 0; i < s->n_out; ++i) stack[i] = (StableIValue)(uintptr_t)c.out_h[i];
}

typedef void (*boxed_fn)(StableIValue*, uint64_t, uint64_t);

}  // namespace

/* ---- the trampolines (generated after this file: OPM_TRAMPOLINE(0) ... and the table) --- */
#define OPM_TRAMPOLINE(i)                                                                 \
  static void opm_boxed_##i(StableIValue* stack, uint64_t n_args, uint64_t n_out) {       \
    boxed_common(i, stack, n_args, n_out);                                                \
  }
