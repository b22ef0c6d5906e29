/* opmarket's TensorFlow shim, second part (appended to _shim.cc by opmarket.tensorflow._build,
 * after the generated trampolines, inside the same extern "C" block). */

/* ---- C-ABI kernels, run natively through the host's bridge table ------------------------ */

#define OPM_TF_MAX_ARGS 64

typedef struct {
  const OPMB_BridgeApi* bridge;
  const OPMB_Kernel* kernel;
} native_slot;

static native_slot g_native[OPM_TF_SLOTS];

typedef struct {
  const OPMB_BridgeApi* bridge;
  const OPMB_Kernel* kernel;
  void* state;
} native_state;

/* TF's status, as the host's status given (OK is left alone). */
static void to_opm_status(const OPMB_BridgeApi* bridge, TF_Status* tf, OPM_Status* status) {
  if (TF_GetCode(tf) != TF_OK) bridge->api->SetStatus(status, (OPM_Code)TF_GetCode(tf), TF_Message(tf));
}

typedef struct {
  OPMB_KernelConstruction base;
  TF_OpKernelConstruction* tf;
  const OPMB_BridgeApi* bridge;
} tf_construction;

static void c_get_type(OPMB_KernelConstruction* c, const char* name, OPM_DataType* value,
                       OPM_Status* status) {
  tf_construction* self = (tf_construction*)c;
  TF_Status* s = TF_NewStatus();
  TF_DataType t = TF_FLOAT;
  TF_OpKernelConstruction_GetAttrType(self->tf, name, &t, s);
  if (TF_GetCode(s) == TF_OK) *value = (OPM_DataType)t;
  to_opm_status(self->bridge, s, status);
  TF_DeleteStatus(s);
}

static void c_get_int64(OPMB_KernelConstruction* c, const char* name, int64_t* value,
                        OPM_Status* status) {
  tf_construction* self = (tf_construction*)c;
  TF_Status* s = TF_NewStatus();
  int64_t v = 0;
  TF_OpKernelConstruction_GetAttrInt64(self->tf, name, &v, s);
  if (TF_GetCode(s) == TF_OK) *value = v;
  to_opm_status(self->bridge, s, status);
  TF_DeleteStatus(s);
}

static void c_get_float(OPMB_KernelConstruction* c, const char* name, float* value,
                        OPM_Status* status) {
  tf_construction* self = (tf_construction*)c;
  TF_Status* s = TF_NewStatus();
  float v = 0;
  TF_OpKernelConstruction_GetAttrFloat(self->tf, name, &v, s);
  if (TF_GetCode(s) == TF_OK) *value = v;
  to_opm_status(self->bridge, s, status);
  TF_DeleteStatus(s);
}

static void c_get_bool(OPMB_KernelConstruction* c, const char* name, uint8_t* value,
                       OPM_Status* status) {
  tf_construction* self = (tf_construction*)c;
  TF_Status* s = TF_NewStatus();
  TF_Bool v = 0;
  TF_OpKernelConstruction_GetAttrBool(self->tf, name, &v, s);
  if (TF_GetCode(s) == TF_OK) *value = (uint8_t)v;
  to_opm_status(self->bridge, s, status);
  TF_DeleteStatus(s);
}

static void c_get_string(OPMB_KernelConstruction* c, const char* name, char* value,
                         size_t max_length, size_t* length, OPM_Status* status) {
  tf_construction* self = (tf_construction*)c;
  TF_Status* s = TF_NewStatus();
  int32_t list_size = 0, total = 0;
  TF_OpKernelConstruction_GetAttrSize(self->tf, name, &list_size, &total, s);
  if (TF_GetCode(s) == TF_OK) {
    char* buf = (char*)malloc(total > 0 ? (size_t)total : 1);
    TF_OpKernelConstruction_GetAttrString(self->tf, name, buf, (size_t)total, s);
    if (TF_GetCode(s) == TF_OK) {
      size_t n = (size_t)total < max_length ? (size_t)total : max_length;
      if (n > 0) memcpy(value, buf, n);
      *length = (size_t)total;
    }
    free(buf);
  }
  to_opm_status(self->bridge, s, status);
  TF_DeleteStatus(s);
}

/* A list attr's length (TF_OpKernelConstruction_GetAttrSize), then its values. */
static void c_get_int64_list(OPMB_KernelConstruction* c, const char* name, int64_t* values,
                             size_t max_values, size_t* length, OPM_Status* status) {
  tf_construction* self = (tf_construction*)c;
  TF_Status* s = TF_NewStatus();
  int32_t list_size = 0, total = 0;
  TF_OpKernelConstruction_GetAttrSize(self->tf, name, &list_size, &total, s);
  if (TF_GetCode(s) == TF_OK && list_size < 0)
    TF_SetStatus(s, TF_INVALID_ARGUMENT, "not a list attr");
  if (TF_GetCode(s) == TF_OK) {
    int64_t* buf = (int64_t*)malloc(sizeof(int64_t) * (list_size > 0 ? (size_t)list_size : 1));
    TF_OpKernelConstruction_GetAttrInt64List(self->tf, name, buf, list_size, s);
    if (TF_GetCode(s) == TF_OK) {
      size_t n = (size_t)list_size < max_values ? (size_t)list_size : max_values;
      if (n > 0) memcpy(values, buf, n * sizeof(int64_t));
      *length = (size_t)list_size;
    }
    free(buf);
  }
  to_opm_status(self->bridge, s, status);
  TF_DeleteStatus(s);
}

static void c_get_float_list(OPMB_KernelConstruction* c, const char* name, float* values,
                             size_t max_values, size_t* length, OPM_Status* status) {
  tf_construction* self = (tf_construction*)c;
  TF_Status* s = TF_NewStatus();
  int32_t list_size = 0, total = 0;
  TF_OpKernelConstruction_GetAttrSize(self->tf, name, &list_size, &total, s);
  if (TF_GetCode(s) == TF_OK && list_size < 0)
    TF_SetStatus(s, TF_INVALID_ARGUMENT, "not a list attr");
  if (TF_GetCode(s) == TF_OK) {
    float* buf = (float*)malloc(sizeof(float) * (list_size > 0 ? (size_t)list_size : 1));
    TF_OpKernelConstruction_GetAttrFloatList(self->tf, name, buf, list_size, s);
    if (TF_GetCode(s) == TF_OK) {
      size_t n = (size_t)list_size < max_values ? (size_t)list_size : max_values;
      if (n > 0) memcpy(values, buf, n * sizeof(float));
      *length = (size_t)list_size;
    }
    free(buf);
  }
  to_opm_status(self->bridge, s, status);
  TF_DeleteStatus(s);
}

static const OPMB_KernelConstructionOps construction_ops = {
    sizeof(OPMB_KernelConstructionOps), c_get_type, c_get_int64, c_get_float, c_get_bool,
    c_get_string, c_get_int64_list, c_get_float_list};

static void* native_create(int32_t slot, TF_OpKernelConstruction* ctx) {
  if (slot < 0 || slot >= OPM_TF_SLOTS || g_native[slot].kernel == NULL) return NULL;
  const OPMB_BridgeApi* bridge = g_native[slot].bridge;
  tf_construction c = {{&construction_ops}, ctx, bridge};
  OPM_Status* status = bridge->api->NewStatus();
  void* state = bridge->kernel_create(g_native[slot].kernel, &c.base, status);
  native_state* out = NULL;
  if (bridge->api->GetCode(status) != OPM_OK) {
    TF_Status* s = TF_NewStatus();
    TF_SetStatus(s, (TF_Code)bridge->api->GetCode(status), bridge->api->Message(status));
    TF_OpKernelConstruction_Failure(ctx, s);
    TF_DeleteStatus(s);
  } else {
    out = (native_state*)malloc(sizeof *out);
    out->bridge = bridge;
    out->kernel = g_native[slot].kernel;
    out->state = state;
  }
  bridge->api->DeleteStatus(status);
  /* A failed create still hands TensorFlow a pointer, so that it is never taken for a
   * Python slot; compute is never called on it. */
  return out != NULL ? (void*)out : (void*)&g_native[slot];
}

typedef struct {
  OPMB_KernelContext base;
  TF_OpKernelContext* tf;
  const OPMB_BridgeApi* bridge;
  int num_inputs;
  TF_Tensor* in_tf[OPM_TF_MAX_ARGS];
  OPMB_Tensor in[OPM_TF_MAX_ARGS];
  int64_t in_dims[OPM_TF_MAX_ARGS][OPM_TF_MAX_DIMS];
  TF_Tensor* out_tf[OPM_TF_MAX_ARGS];
  OPMB_Tensor out[OPM_TF_MAX_ARGS];
  int64_t out_dims[OPM_TF_MAX_ARGS][OPM_TF_MAX_DIMS];
} tf_context;

static int k_num_inputs(OPMB_KernelContext* c) { return ((tf_context*)c)->num_inputs; }

static int k_num_outputs(OPMB_KernelContext* c) { return TF_NumOutputs(((tf_context*)c)->tf); }

static const OPMB_Tensor* k_get_input(OPMB_KernelContext* c, int i, OPM_Status* status) {
  tf_context* self = (tf_context*)c;
  if (i < 0 || i >= self->num_inputs || i >= OPM_TF_MAX_ARGS) {
    self->bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, "no such input");
    return NULL;
  }
  if (self->in_tf[i] == NULL) {
    TF_Status* s = TF_NewStatus();
    TF_Tensor* t = NULL;
    TF_GetInput(self->tf, i, &t, s);
    if (TF_GetCode(s) != TF_OK) {
      to_opm_status(self->bridge, s, status);
      TF_DeleteStatus(s);
      return NULL;
    }
    TF_DeleteStatus(s);
    int nd = TF_NumDims(t);
    if (nd > OPM_TF_MAX_DIMS) {
      TF_DeleteTensor(t);
      self->bridge->api->SetStatus(status, OPM_UNIMPLEMENTED, "more than 16 dimensions");
      return NULL;
    }
    self->in_tf[i] = t;
    for (int k = 0; k < nd; ++k) self->in_dims[i][k] = TF_Dim(t, k);
    self->in[i].dtype = (OPM_DataType)TF_TensorType(t);
    self->in[i].ndim = nd;
    self->in[i].dims = self->in_dims[i];
    self->in[i].data = TF_TensorData(t);
    self->in[i].nbytes = TF_TensorByteSize(t);
  }
  return &self->in[i];
}

static const OPMB_Tensor* k_allocate_output(OPMB_KernelContext* c, int i, OPM_DataType dtype,
                                            const int64_t* dims, int num_dims,
                                            OPM_Status* status) {
  tf_context* self = (tf_context*)c;
  if (i < 0 || i >= OPM_TF_MAX_ARGS || num_dims > OPM_TF_MAX_DIMS || num_dims < 0) {
    self->bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, "output index or rank out of range");
    return NULL;
  }
  size_t size = self->bridge->api->DataTypeSize(dtype);
  for (int k = 0; k < num_dims; ++k) size *= (size_t)dims[k];
  TF_Status* s = TF_NewStatus();
  TF_Tensor* t = TF_AllocateOutput(self->tf, i, (TF_DataType)dtype, dims, num_dims, size, s);
  if (TF_GetCode(s) != TF_OK) {
    to_opm_status(self->bridge, s, status);
    TF_DeleteStatus(s);
    return NULL;
  }
  TF_DeleteStatus(s);
  if (self->out_tf[i] != NULL) TF_DeleteTensor(self->out_tf[i]);
  self->out_tf[i] = t;
  for (int k = 0; k < num_dims; ++k) self->out_dims[i][k] = dims[k];
  self->out[i].dtype = dtype;
  self->out[i].ndim = num_dims;
  self->out[i].dims = self->out_dims[i];
  self->out[i].data = TF_TensorData(t);
  self->out[i].nbytes = TF_TensorByteSize(t);
  return &self->out[i];
}

static const OPMB_KernelContextOps context_ops = {sizeof(OPMB_KernelContextOps), k_num_inputs,
                                                  k_num_outputs, k_get_input, k_allocate_output};

/* Sets up c over TensorFlow's ctx; false, with the kernel failed, when it has too many
 * inputs or outputs. */
static int context_begin(tf_context* c, TF_OpKernelContext* ctx, const OPMB_BridgeApi* bridge) {
  c->base.ops = &context_ops;
  c->tf = ctx;
  c->bridge = bridge;
  c->num_inputs = TF_NumInputs(ctx);
  int n_out = TF_NumOutputs(ctx);
  if (c->num_inputs > OPM_TF_MAX_ARGS || n_out > OPM_TF_MAX_ARGS) {
    TF_Status* s = TF_NewStatus();
    TF_SetStatus(s, TF_UNIMPLEMENTED, "opmarket: more than 64 inputs or outputs");
    TF_OpKernelContext_Failure(ctx, s);
    TF_DeleteStatus(s);
    return 0;
  }
  for (int i = 0; i < c->num_inputs; ++i) c->in_tf[i] = NULL;
  for (int i = 0; i < n_out; ++i) c->out_tf[i] = NULL;
  return 1;
}

/* After the call: the host's status as the kernel's failure, if any (then deleted), and
 * TensorFlow's tensors released. */
static void context_end(tf_context* c, TF_OpKernelContext* ctx, OPM_Status* status) {
  const OPMB_BridgeApi* bridge = c->bridge;
  if (bridge->api->GetCode(status) != OPM_OK) {
    TF_Status* s = TF_NewStatus();
    TF_SetStatus(s, (TF_Code)bridge->api->GetCode(status), bridge->api->Message(status));
    TF_OpKernelContext_Failure(ctx, s);
    TF_DeleteStatus(s);
  }
  bridge->api->DeleteStatus(status);
  int n_out = TF_NumOutputs(ctx);
  for (int i = 0; i < c->num_inputs; ++i)
    if (c->in_tf[i] != NULL) TF_DeleteTensor(c->in_tf[i]);
  for (int i = 0; i < n_out; ++i)
    if (c->out_tf[i] != NULL) TF_DeleteTensor(c->out_tf[i]);
}

static void native_compute(void* p, TF_OpKernelContext* ctx) {
  native_state* st = (native_state*)p;
  const OPMB_BridgeApi* bridge = st->bridge;
  tf_context c;
  if (!context_begin(&c, ctx, bridge)) return;
  OPM_Status* status = bridge->api->NewStatus();
  bridge->kernel_compute(st->kernel, st->state, &c.base, status);
  context_end(&c, ctx, status);
}

static void native_delete(void* p) {
  if (p == NULL) return;
  /* A failed create returned its slot's entry, which is not ours to free. */
  for (int i = 0; i < OPM_TF_SLOTS; ++i)
    if (p == (void*)&g_native[i]) return;
  native_state* st = (native_state*)p;
  st->bridge->kernel_delete(st->kernel, st->state);
  free(st);
}

/* A C-ABI kernel (the host's handle) as a TensorFlow kernel: create through slot `slot`,
 * compute and delete in C. */
OPM_TF_EXPORT void opm_tf_register_native_kernel(const char* kernel_name, const char* op,
                                                 const char* device, int32_t slot,
                                                 const char** type_attrs, const int32_t* dtypes,
                                                 int32_t n, const char* label, int32_t priority,
                                                 const void* bridge, const void* kernel,
                                                 TF_Status* status) {
  const OPMB_BridgeApi* b = (const OPMB_BridgeApi*)bridge;
  if (b == NULL || b->struct_size < sizeof(OPMB_BridgeApi) || b->version < 1) {
    TF_SetStatus(status, TF_FAILED_PRECONDITION, "opmarket's host has no usable bridge table");
    return;
  }
  void* (*create)(TF_OpKernelConstruction*) = create_trampoline(slot);
  if (create == NULL) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "opmarket's TensorFlow shim: out of kernel slots");
    return;
  }
  g_native[slot].bridge = b;
  g_native[slot].kernel = (const OPMB_Kernel*)kernel;
  register_builder(kernel_name, TF_NewKernelBuilder(op, device, create, &native_compute,
                                                    &native_delete),
                   type_attrs, dtypes, n, label, priority, status);
}
