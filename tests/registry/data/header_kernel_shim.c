/* A framework bridge in miniature for the C entries of opmarket/kernel.h libraries: one
 * input and one output in caller buffers, and a node's attrs (ints, lists of ints, strings)
 * served through version 2 of opmarket/capi_bridge.h's construction interface. Called from
 * Python with ctypes (which releases the GIL) or from a thread of its own: no Python. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "opmarket/capi_bridge.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct {
  OPMB_KernelConstruction base;
  const OPM_Api* api;
  int n;
  const char* const* names;
  const int64_t* const* values; /* attr i: lengths[i] values; a string's bytes when kinds 's' */
  const int64_t* lengths;
  const char* kinds;            /* 'i' int, 'l' list(int), 's' string */
} Attrs;

static int find(Attrs* a, const char* name, char kind, OPM_Status* status) {
  for (int i = 0; i < a->n; ++i) {
    if (strcmp(a->names[i], name) == 0 && a->kinds[i] == kind) return i;
  }
  char msg[256];
  snprintf(msg, sizeof msg, "shim: the node has no attr '%s' of kind %c", name, kind);
  a->api->SetStatus(status, OPM_INVALID_ARGUMENT, msg);
  return -1;
}
static void get_int(OPMB_KernelConstruction* c, const char* name, int64_t* v, OPM_Status* s) {
  Attrs* a = (Attrs*)c;
  int i = find(a, name, 'i', s);
  if (i >= 0) *v = a->values[i][0];
}
static void get_string(OPMB_KernelConstruction* c, const char* name, char* v, size_t max_length,
                       size_t* length, OPM_Status* s) {
  Attrs* a = (Attrs*)c;
  int i = find(a, name, 's', s);
  if (i < 0) return;
  size_t n = (size_t)a->lengths[i];
  *length = n;
  if (v) memcpy(v, a->values[i], n < max_length ? n : max_length);
}
static void get_list(OPMB_KernelConstruction* c, const char* name, int64_t* v, size_t max_values,
                     size_t* length, OPM_Status* s) {
  Attrs* a = (Attrs*)c;
  int i = find(a, name, 'l', s);
  if (i < 0) return;
  size_t n = (size_t)a->lengths[i];
  *length = n;
  for (size_t k = 0; v && k < n && k < max_values; ++k) v[k] = a->values[i][k];
}

static const OPMB_KernelConstructionOps attr_ops = {
    sizeof(OPMB_KernelConstructionOps), NULL, get_int, NULL, NULL, get_string, get_list, NULL};

typedef struct {
  OPMB_KernelContext base;
  const OPM_Api* api;
  OPMB_Tensor input;
  OPMB_Tensor output;
  int64_t out_dims[8];
  void* out_buffer;
  size_t out_capacity;
} Context;

static int num_inputs(OPMB_KernelContext* c) { (void)c; return 1; }
static int num_outputs(OPMB_KernelContext* c) { (void)c; return 1; }
static const OPMB_Tensor* get_input(OPMB_KernelContext* c, int i, OPM_Status* s) {
  (void)i, (void)s;
  return &((Context*)c)->input;
}
static const OPMB_Tensor* allocate_output(OPMB_KernelContext* c, int i, OPM_DataType dtype,
                                          const int64_t* dims, int num_dims, OPM_Status* s) {
  Context* self = (Context*)c;
  size_t nbytes = self->api->DataTypeSize(dtype);
  (void)i;
  if (num_dims > 8) {
    self->api->SetStatus(s, OPM_UNIMPLEMENTED, "shim: rank over 8");
    return NULL;
  }
  for (int d = 0; d < num_dims; ++d) {
    self->out_dims[d] = dims[d];
    nbytes *= (size_t)dims[d];
  }
  if (nbytes > self->out_capacity) {
    self->api->SetStatus(s, OPM_RESOURCE_EXHAUSTED, "shim: the output buffer is too small");
    return NULL;
  }
  self->output.dtype = dtype;
  self->output.ndim = num_dims;
  self->output.dims = self->out_dims;
  self->output.data = self->out_buffer;
  self->output.nbytes = nbytes;
  return &self->output;
}
static const OPMB_KernelContextOps context_ops = {sizeof(OPMB_KernelContextOps), num_inputs,
                                                  num_outputs, get_input, allocate_output};

typedef struct {
  const OPMB_BridgeApi* bridge;
  const OPMB_Kernel* kernel;
  Attrs attrs;
  OPM_DataType dtype;
  void* input;
  const int64_t* dims;
  int ndim;
  void* out;
  size_t out_capacity;
  int64_t* out_dims;
  int* out_ndim;
  char* message;
  size_t message_capacity;
  int code;
} Job;

static void* run_job(void* arg) {
  Job* j = (Job*)arg;
  const OPM_Api* api = j->bridge->api;
  OPM_Status* status = api->NewStatus();
  void* state = j->bridge->kernel_create(j->kernel, &j->attrs.base, status);
  if (api->GetCode(status) == OPM_OK) {
    Context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.base.ops = &context_ops;
    ctx.api = api;
    size_t nbytes = api->DataTypeSize(j->dtype);
    for (int d = 0; d < j->ndim; ++d) nbytes *= (size_t)j->dims[d];
    ctx.input.dtype = j->dtype;
    ctx.input.ndim = j->ndim;
    ctx.input.dims = j->dims;
    ctx.input.data = j->input;
    ctx.input.nbytes = nbytes;
    ctx.out_buffer = j->out;
    ctx.out_capacity = j->out_capacity;
    j->bridge->kernel_compute(j->kernel, state, &ctx.base, status);
    if (api->GetCode(status) == OPM_OK) {
      *j->out_ndim = ctx.output.ndim;
      for (int d = 0; d < ctx.output.ndim; ++d) j->out_dims[d] = ctx.out_dims[d];
    }
    j->bridge->kernel_delete(j->kernel, state);
  }
  j->code = api->GetCode(status);
  snprintf(j->message, j->message_capacity, "%s", api->Message(status));
  api->DeleteStatus(status);
  return NULL;
}

/* Create, compute, delete, on a thread of its own (never a Python thread). Returns the
 * status code; -1 when the bridge table is too old. */
EXPORT int hk_run(const OPMB_BridgeApi* bridge, const OPMB_Kernel* kernel, int n_attrs,
                  const char* const* names, const int64_t* const* values,
                  const int64_t* lengths, const char* kinds, OPM_DataType dtype, void* input,
                  const int64_t* dims, int ndim, void* out, size_t out_capacity,
                  int64_t* out_dims, int* out_ndim, char* message, size_t message_capacity) {
  if (!bridge || bridge->struct_size < sizeof(OPMB_BridgeApi) || bridge->version < 2) return -1;
  Job j = {bridge, kernel, {{&attr_ops}, bridge->api, n_attrs, names, values, lengths, kinds},
           dtype, input, dims, ndim, out, out_capacity, out_dims, out_ndim, message,
           message_capacity, -1};
  pthread_t thread;
  if (pthread_create(&thread, NULL, run_job, &j) != 0) return -2;
  pthread_join(thread, NULL);
  return j.code;
}
