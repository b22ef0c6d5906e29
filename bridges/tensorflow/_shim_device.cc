/* opmarket's TensorFlow shim, third part (appended after _shim_native.cc by
 * opmarket.tensorflow._build, inside the same extern "C" block).
 *
 * ---- GPU kernels: a GPU companion's device entry (opmarket/cuda_kernel.h), synchronizing ---
 *
 * TensorFlow's C kernel API gives a kernel no CUDA stream on TensorFlow's own GPU device
 * (TF_GetStream serves pluggable devices only), so the entry cannot launch in order on
 * TensorFlow's compute stream. It is called in the synchronizing mode instead
 * (OPM_CUDA_SYNCHRONIZE): the entry synchronises the device before its launch and its own
 * stream after, so TensorFlow's producers are done before it reads, and its outputs are
 * finished before TensorFlow's consumers, or its allocator, touch them. The shim links no
 * CUDA: the synchronising is the companion's (opmarket::cuda::DeviceCall).
 *
 * The entry reads the node's attrs at each call, long after TensorFlow's construction context
 * is gone: the kernel's create reads the op's attrs (their names and kinds given at
 * registration) into the kernel's state, which serves them to the entry. */

/* The attr kinds a device kernel keeps (what OPMB_KernelConstructionOps reads). */
enum { OPM_ATTR_TYPE = 1, OPM_ATTR_INT, OPM_ATTR_FLOAT, OPM_ATTR_BOOL, OPM_ATTR_STRING,
       OPM_ATTR_INT_LIST, OPM_ATTR_FLOAT_LIST };

struct device_attr {
  std::string name;
  int kind;
  std::vector<int64_t> ints;  /* type, int, bool, list(int) */
  std::vector<float> floats;  /* float, list(float) */
  std::string text;           /* string */
};

struct device_slot {
  const OPMB_BridgeApi* bridge;
  OPM_CudaKernelFn entry;
  std::vector<device_attr> attrs; /* names and kinds; values read per kernel */
};

static device_slot* g_device[OPM_TF_SLOTS];

struct device_state {
  const OPMB_BridgeApi* bridge;
  OPM_CudaKernelFn entry;
  std::vector<device_attr> attrs;
};

struct kept_construction {
  OPMB_KernelConstruction base;
  const device_state* state;
  const OPMB_BridgeApi* bridge;
};

/* The kept attr `name` of `kind`; NULL with the status set when there is none. */
static const device_attr* kept(OPMB_KernelConstruction* c, const char* name, int kind,
                               OPM_Status* status) {
  kept_construction* self = (kept_construction*)c;
  for (const device_attr& a : self->state->attrs) {
    if (a.name != name) continue;
    if (a.kind == kind) return &a;
    break;
  }
  std::string message = std::string("opmarket's TensorFlow GPU kernel has no attr '") + name +
                        "' of the kind asked for";
  self->bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, message.c_str());
  return NULL;
}

static void d_get_type(OPMB_KernelConstruction* c, const char* name, OPM_DataType* value,
                       OPM_Status* status) {
  const device_attr* a = kept(c, name, OPM_ATTR_TYPE, status);
  if (a != NULL) *value = (OPM_DataType)a->ints[0];
}

static void d_get_int64(OPMB_KernelConstruction* c, const char* name, int64_t* value,
                        OPM_Status* status) {
  const device_attr* a = kept(c, name, OPM_ATTR_INT, status);
  if (a != NULL) *value = a->ints[0];
}

static void d_get_float(OPMB_KernelConstruction* c, const char* name, float* value,
                        OPM_Status* status) {
  const device_attr* a = kept(c, name, OPM_ATTR_FLOAT, status);
  if (a != NULL) *value = a->floats[0];
}

static void d_get_bool(OPMB_KernelConstruction* c, const char* name, uint8_t* value,
                       OPM_Status* status) {
  const device_attr* a = kept(c, name, OPM_ATTR_BOOL, status);
  if (a != NULL) *value = (uint8_t)a->ints[0];
}

static void d_get_string(OPMB_KernelConstruction* c, const char* name, char* value,
                         size_t max_length, size_t* length, OPM_Status* status) {
  const device_attr* a = kept(c, name, OPM_ATTR_STRING, status);
  if (a == NULL) return;
  size_t n = a->text.size() < max_length ? a->text.size() : max_length;
  if (n > 0) memcpy(value, a->text.data(), n);
  *length = a->text.size();
}

static void d_get_int64_list(OPMB_KernelConstruction* c, const char* name, int64_t* values,
                             size_t max_values, size_t* length, OPM_Status* status) {
  const device_attr* a = kept(c, name, OPM_ATTR_INT_LIST, status);
  if (a == NULL) return;
  size_t n = a->ints.size() < max_values ? a->ints.size() : max_values;
  if (n > 0) memcpy(values, a->ints.data(), n * sizeof(int64_t));
  *length = a->ints.size();
}

static void d_get_float_list(OPMB_KernelConstruction* c, const char* name, float* values,
                             size_t max_values, size_t* length, OPM_Status* status) {
  const device_attr* a = kept(c, name, OPM_ATTR_FLOAT_LIST, status);
  if (a == NULL) return;
  size_t n = a->floats.size() < max_values ? a->floats.size() : max_values;
  if (n > 0) memcpy(values, a->floats.data(), n * sizeof(float));
  *length = a->floats.size();
}

static const OPMB_KernelConstructionOps kept_ops = {
    sizeof(OPMB_KernelConstructionOps), d_get_type, d_get_int64, d_get_float, d_get_bool,
    d_get_string, d_get_int64_list, d_get_float_list};

/* Reads attr `a`'s value from TensorFlow's construction (the native part's readers). */
static void read_attr(tf_construction* c, device_attr* a, OPM_Status* status) {
  const char* name = a->name.c_str();
  size_t length = 0;
  switch (a->kind) {
    case OPM_ATTR_TYPE: {
      OPM_DataType t = OPM_FLOAT;
      c_get_type(&c->base, name, &t, status);
      a->ints.assign(1, (int64_t)t);
      return;
    }
    case OPM_ATTR_INT:
      a->ints.assign(1, 0);
      c_get_int64(&c->base, name, &a->ints[0], status);
      return;
    case OPM_ATTR_FLOAT:
      a->floats.assign(1, 0.0f);
      c_get_float(&c->base, name, &a->floats[0], status);
      return;
    case OPM_ATTR_BOOL: {
      uint8_t b = 0;
      c_get_bool(&c->base, name, &b, status);
      a->ints.assign(1, (int64_t)b);
      return;
    }
    case OPM_ATTR_STRING:
      c_get_string(&c->base, name, NULL, 0, &length, status);
      a->text.assign(length, '\0');
      if (length > 0) c_get_string(&c->base, name, &a->text[0], length, &length, status);
      return;
    case OPM_ATTR_INT_LIST:
      c_get_int64_list(&c->base, name, NULL, 0, &length, status);
      a->ints.assign(length, 0);
      if (length > 0) c_get_int64_list(&c->base, name, a->ints.data(), length, &length, status);
      return;
    case OPM_ATTR_FLOAT_LIST:
      c_get_float_list(&c->base, name, NULL, 0, &length, status);
      a->floats.assign(length, 0.0f);
      if (length > 0) c_get_float_list(&c->base, name, a->floats.data(), length, &length, status);
      return;
  }
}

static void* device_create(int32_t slot, TF_OpKernelConstruction* ctx) {
  if (slot < 0 || slot >= OPM_TF_SLOTS || g_device[slot] == NULL) return NULL;
  const device_slot* s = g_device[slot];
  tf_construction c = {{&construction_ops}, ctx, s->bridge};
  device_state* state = new device_state{s->bridge, s->entry, s->attrs};
  OPM_Status* status = s->bridge->api->NewStatus();
  for (device_attr& a : state->attrs) {
    if (s->bridge->api->GetCode(status) != OPM_OK) break;
    read_attr(&c, &a, status);
  }
  if (s->bridge->api->GetCode(status) != OPM_OK) {
    TF_Status* tf = TF_NewStatus();
    TF_SetStatus(tf, (TF_Code)s->bridge->api->GetCode(status), s->bridge->api->Message(status));
    TF_OpKernelConstruction_Failure(ctx, tf);
    TF_DeleteStatus(tf);
  }
  s->bridge->api->DeleteStatus(status);
  return state; /* TensorFlow deletes it (device_delete) even when the create failed */
}

static void device_compute(void* p, TF_OpKernelContext* ctx) {
  device_state* st = (device_state*)p;
  const OPMB_BridgeApi* bridge = st->bridge;
  tf_context c;
  if (!context_begin(&c, ctx, bridge)) return;
  kept_construction attrs = {{&kept_ops}, st, bridge};
  OPM_Status* status = bridge->api->NewStatus();
  OPM_CudaKernelCall call;
  memset(&call, 0, sizeof call);
  call.struct_size = sizeof call;
  call.version = OPM_CUDA_KERNEL_VERSION;
  call.device = TF_GetDeviceId(ctx);
  call.stream = NULL; /* TensorFlow gives none: the entry uses its own */
  call.api = bridge->api;
  call.status = status;
  call.attrs = &attrs.base;
  call.context = &c.base;
  call.flags = OPM_CUDA_SYNCHRONIZE;
  st->entry(&call);
  context_end(&c, ctx, status);
}

static void device_delete(void* p) { delete (device_state*)p; }

/* A GPU companion's device entry as a TensorFlow kernel for `device` ("GPU"; the tests also
 * register a host-memory entry for "CPU", where there is no GPU), called synchronizing:
 * create through slot `slot` (it keeps the n_attrs attrs named in attr_names, of
 * attr_kinds), compute and delete in C. Constraints as for the other kernels. */
OPM_TF_EXPORT void opm_tf_register_device_kernel(const char* kernel_name, const char* op,
                                                 const char* device, int32_t slot,
                                                 const char** type_attrs,
                                                 const int32_t* dtypes, int32_t n,
                                                 const char* label, int32_t priority,
                                                 const void* bridge, const void* entry,
                                                 const char** attr_names,
                                                 const int32_t* attr_kinds, int32_t n_attrs,
                                                 TF_Status* status) {
  const OPMB_BridgeApi* b = (const OPMB_BridgeApi*)bridge;
  if (b == NULL || b->struct_size < sizeof(OPMB_BridgeApi) || entry == NULL) {
    TF_SetStatus(status, TF_FAILED_PRECONDITION,
                 "opmarket's host has no usable bridge table, or the kernel no device entry");
    return;
  }
  void* (*create)(TF_OpKernelConstruction*) = create_trampoline(slot);
  if (create == NULL) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "opmarket's TensorFlow shim: out of kernel slots");
    return;
  }
  if (g_device[slot] == NULL) {
    device_slot* s = new device_slot{b, (OPM_CudaKernelFn)entry, {}};
    for (int32_t k = 0; k < n_attrs; ++k) {
      device_attr a;
      a.name = attr_names[k];
      a.kind = attr_kinds[k];
      s->attrs.push_back(a);
    }
    g_device[slot] = s;
  }
  register_builder(kernel_name, TF_NewKernelBuilder(op, device, create, &device_compute,
                                                    &device_delete),
                   type_attrs, dtypes, n, label, priority, status);
}
