/* Part of opmarket's C-ABI host (_capi_host.h): kernels. The plugins' construction and
 * compute contexts wrap an implementation of the bridge interfaces (capi_bridge.h) and record
 * the plugin's failure; create, compute and delete here serve the Kernel type and the
 * bridges alike, and touch no Python. */
#include "_capi_host.h"

/* --- kernels: the two interfaces ------------------------------------------------------
 * A plugin's create and compute get the host's OPM_OpKernelConstruction/OPM_OpKernelContext,
 * which wrap an implementation of the bridge interfaces (opmarket/capi_bridge.h) and record
 * the plugin's failure. The Python path's implementations (a dict of attrs, numpy arrays)
 * follow; a bridge brings its own. */
struct OPM_OpKernelConstruction {
  OPMB_KernelConstruction* impl;
  OPM_Status status; /* what OPM_OpKernelConstruction_Failure reported */
};

struct OPM_OpKernelContext {
  OPMB_KernelContext* impl;
  const OPMB_KernelContextOps* ops;
  int num_inputs, num_outputs; /* asked once per compute */
  uint64_t allocated;          /* bit i: output i was allocated (the first 64) */
  OPM_Status status;           /* what OPM_OpKernelContext_Failure reported */
};

/* A plugin's OPM_Tensor is the implementation's OPMB_Tensor. */
#define AS_BRIDGE(t) ((const OPMB_Tensor*)(const void*)(t))
#define AS_PLUGIN(t) ((OPM_Tensor*)(void*)(t))

void h_OKCGetAttrType(OPM_OpKernelConstruction* c, const char* name, OPM_DataType* v,
                             OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_type) {
    unimplemented(s, "a type attr");
    return;
  }
  c->impl->ops->get_attr_type(c->impl, name, v, s);
}
void h_OKCGetAttrInt64(OPM_OpKernelConstruction* c, const char* name, int64_t* v,
                              OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_int64) {
    unimplemented(s, "an int attr");
    return;
  }
  c->impl->ops->get_attr_int64(c->impl, name, v, s);
}
void h_OKCGetAttrInt32(OPM_OpKernelConstruction* c, const char* name, int32_t* v,
                              OPM_Status* s) {
  int64_t x = 0;
  OPM_Status own = {OPM_OK, NULL};
  OPM_Status* st = s ? s : &own;
  h_OKCGetAttrInt64(c, name, &x, st);
  if (st->code == OPM_OK) {
    if (x < INT32_MIN || x > INT32_MAX) {
      char buf[512];
      snprintf(buf, sizeof buf, "attr '%s' value %lld does not fit in int32", name,
               (long long)x);
      h_SetStatus(st, OPM_INVALID_ARGUMENT, buf);
    } else {
      *v = (int32_t)x;
    }
  }
  free(own.message);
}
void h_OKCGetAttrFloat(OPM_OpKernelConstruction* c, const char* name, float* v,
                              OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_float) {
    unimplemented(s, "a float attr");
    return;
  }
  c->impl->ops->get_attr_float(c->impl, name, v, s);
}
void h_OKCGetAttrBool(OPM_OpKernelConstruction* c, const char* name, uint8_t* v,
                             OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_bool) {
    unimplemented(s, "a bool attr");
    return;
  }
  c->impl->ops->get_attr_bool(c->impl, name, v, s);
}
void h_OKCGetAttrString(OPM_OpKernelConstruction* c, const char* name, char* v,
                               size_t max_length, size_t* length, OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_string) {
    unimplemented(s, "a string attr");
    return;
  }
  c->impl->ops->get_attr_string(c->impl, name, v, max_length, length, s);
}
/* The list getters are in the bridge table from its version 2: an older table is shorter. */
#define HAS_OP(ops, field) \
  ((ops)->struct_size >= offsetof(OPMB_KernelConstructionOps, field) + sizeof((ops)->field) && \
   (ops)->field)

void h_OKCGetAttrInt64List(OPM_OpKernelConstruction* c, const char* name, int64_t* v,
                           size_t max_values, size_t* length, OPM_Status* s) {
  clear_status(s);
  if (!HAS_OP(c->impl->ops, get_attr_int64_list)) {
    unimplemented(s, "a list(int) attr");
    return;
  }
  c->impl->ops->get_attr_int64_list(c->impl, name, v, max_values, length, s);
}
void h_OKCGetAttrFloatList(OPM_OpKernelConstruction* c, const char* name, float* v,
                           size_t max_values, size_t* length, OPM_Status* s) {
  clear_status(s);
  if (!HAS_OP(c->impl->ops, get_attr_float_list)) {
    unimplemented(s, "a list(float) attr");
    return;
  }
  c->impl->ops->get_attr_float_list(c->impl, name, v, max_values, length, s);
}
void h_OKCFailure(OPM_OpKernelConstruction* c, OPM_Status* s) {
  if (c->status.code == OPM_OK) h_SetStatus(&c->status, s ? s->code : OPM_UNKNOWN,
                                            h_Message(s));
}

int h_NumInputs(OPM_OpKernelContext* c) { return c->num_inputs; }
int h_NumOutputs(OPM_OpKernelContext* c) { return c->num_outputs; }
OPM_Tensor* h_GetInput(OPM_OpKernelContext* c, int i, OPM_Status* s) {
  int n = c->num_inputs;
  if (i < 0 || i >= n) {
    char buf[128];
    snprintf(buf, sizeof buf, "input index %d out of range: %d inputs", i, n);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  clear_status(s);
  const OPMB_Tensor* t = c->ops->get_input(c->impl, i, s);
  if (!t && s && s->code == OPM_OK) h_SetStatus(s, OPM_INTERNAL, "the bridge gave no input");
  return AS_PLUGIN(t);
}
OPM_Tensor* h_AllocateOutput(OPM_OpKernelContext* c, int i, OPM_DataType dtype,
                                    const int64_t* dims, int num_dims, OPM_Status* s) {
  char buf[160];
  int n = c->num_outputs;
  if (i < 0 || i >= n) {
    snprintf(buf, sizeof buf, "output index %d out of range: %d outputs", i, n);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  if (num_dims < 0 || (num_dims > 0 && !dims)) {
    snprintf(buf, sizeof buf, "cannot allocate an output of rank %d", num_dims);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  for (int d = 0; d < num_dims; ++d) {
    if (dims[d] < 0) {
      h_SetStatus(s, OPM_INVALID_ARGUMENT, "negative dimension in AllocateOutput");
      return NULL;
    }
  }
  clear_status(s);
  const OPMB_Tensor* t = c->ops->allocate_output(c->impl, i, dtype, dims, num_dims, s);
  if (!t) {
    if (s && s->code == OPM_OK) h_SetStatus(s, OPM_INTERNAL, "the bridge gave no output");
    return NULL;
  }
  if (i < 64) c->allocated |= (uint64_t)1 << i;
  return AS_PLUGIN(t);
}
void h_OKCtxFailure(OPM_OpKernelContext* c, OPM_Status* s) {
  if (c->status.code == OPM_OK) h_SetStatus(&c->status, s ? s->code : OPM_UNKNOWN,
                                            h_Message(s));
}

/* NULL-safe: a failed GetInput or AllocateOutput returns NULL, and a kernel that goes on
 * reading it must not crash the process (its failure status is reported instead). */
OPM_DataType h_TensorType(const OPM_Tensor* t) { return t ? AS_BRIDGE(t)->dtype : 0; }
int h_NumDims(const OPM_Tensor* t) { return t ? AS_BRIDGE(t)->ndim : 0; }
int64_t h_Dim(const OPM_Tensor* t, int i) {
  return t && i >= 0 && i < AS_BRIDGE(t)->ndim ? AS_BRIDGE(t)->dims[i] : -1;
}
void* h_TensorData(const OPM_Tensor* t) { return t ? AS_BRIDGE(t)->data : NULL; }
size_t h_TensorByteSize(const OPM_Tensor* t) { return t ? AS_BRIDGE(t)->nbytes : 0; }
int64_t h_TensorElementCount(const OPM_Tensor* t) {
  if (!t) return 0;
  int64_t count = 1;
  for (int d = 0; d < AS_BRIDGE(t)->ndim; ++d) count *= AS_BRIDGE(t)->dims[d];
  return count;
}

/* --- create, compute, delete: the bridge table, which the Kernel type uses too -------- */
void* b_kernel_create(const OPMB_Kernel* k, OPMB_KernelConstruction* impl,
                             OPM_Status* status) {
  if (!k->create) {
    clear_status(status);
    return NULL;
  }
  OPM_OpKernelConstruction c = {impl, {OPM_OK, NULL}};
  void* state = k->create(&c);
  if (c.status.code != OPM_OK) {
    if (state && k->del) k->del(state);
    fail_with_name(status, k->name, &c.status);
    state = NULL;
  } else {
    clear_status(status);
  }
  free(c.status.message);
  return state;
}

/* compute with the numbers of inputs and outputs known (the Python path knows them). */
void run_compute(const OPMB_Kernel* k, void* state, OPMB_KernelContext* impl,
                        int num_inputs, int num_outputs, OPM_Status* status) {
  OPM_OpKernelContext c = {impl, impl->ops, num_inputs, num_outputs, 0, {OPM_OK, NULL}};
  k->compute(state, &c);
  if (c.status.code != OPM_OK) {
    fail_with_name(status, k->name, &c.status);
    free(c.status.message);
    return;
  }
  int checked = num_outputs < 64 ? num_outputs : 64;
  uint64_t all = checked == 64 ? ~(uint64_t)0 : ((uint64_t)1 << checked) - 1;
  if ((c.allocated & all) != all) {
    int missing = 0;
    while (c.allocated & ((uint64_t)1 << missing)) ++missing;
    char buf[64];
    OPM_Status why = {OPM_INTERNAL, buf};
    snprintf(buf, sizeof buf, "the kernel allocated no output %d", missing);
    fail_with_name(status, k->name, &why);
    return;
  }
  clear_status(status);
}

void b_kernel_compute(const OPMB_Kernel* k, void* state, OPMB_KernelContext* impl,
                             OPM_Status* status) {
  run_compute(k, state, impl, impl->ops->num_inputs(impl), impl->ops->num_outputs(impl),
              status);
}

void b_kernel_delete(const OPMB_Kernel* k, void* state) {
  if (state && k->del) k->del(state);
}

const char* b_kernel_name(const OPMB_Kernel* k) { return k->name; }
