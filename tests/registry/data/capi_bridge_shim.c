/* A tiny framework bridge for tests/registry/test_capi_bridge.py: it owns its tensors (plain
 * buffers) and attrs (two dtype numbers), implements opmarket/capi_bridge.h's interfaces
 * around them, and runs a registered C-ABI kernel through the host's OPMB_BridgeApi. No
 * Python: the test calls it with ctypes, which releases the GIL, and its threads never had
 * a Python thread state at all. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <opmarket/capi_bridge.h>

/* --- attrs: T and type, as a framework's node would hold them ------------------------ */
typedef struct {
  OPMB_KernelConstruction base;
  const OPMB_BridgeApi* bridge;
  OPM_DataType T, type;
  int has_type;
} Attrs;

static void attr_type(OPMB_KernelConstruction* c, const char* name, OPM_DataType* value,
                      OPM_Status* status) {
  const Attrs* a = (const Attrs*)c;
  if (strcmp(name, "T") == 0) {
    *value = a->T;
  } else if (strcmp(name, "type") == 0 && a->has_type) {
    *value = a->type;
  } else {
    char msg[128];
    snprintf(msg, sizeof msg, "shim: the node has no attr '%s'", name);
    a->bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, msg);
  }
}

static const OPMB_KernelConstructionOps attr_ops = {sizeof(OPMB_KernelConstructionOps),
                                                    attr_type, NULL, NULL, NULL, NULL, NULL, NULL};
static const OPMB_KernelConstructionOps no_attr_ops = {sizeof(OPMB_KernelConstructionOps),
                                                       NULL, NULL, NULL, NULL, NULL, NULL, NULL};

/* --- tensors: one input, one output in a caller's buffer --------------------------- */
typedef struct {
  OPMB_KernelContext base;
  const OPMB_BridgeApi* bridge;
  OPMB_Tensor input;
  OPMB_Tensor output;
  int64_t out_dims[16];
  void* out_buffer;
  size_t out_capacity;
} Context;

static int num_inputs(OPMB_KernelContext* c) { (void)c; return 1; }
static int num_outputs(OPMB_KernelContext* c) { (void)c; return 1; }
static const OPMB_Tensor* get_input(OPMB_KernelContext* c, int i, OPM_Status* status) {
  (void)i, (void)status;
  return &((Context*)c)->input;
}
static const OPMB_Tensor* allocate_output(OPMB_KernelContext* c, int i, OPM_DataType dtype,
                                          const int64_t* dims, int num_dims,
                                          OPM_Status* status) {
  Context* self = (Context*)c;
  const OPM_Api* api = self->bridge->api;
  size_t nbytes = api->DataTypeSize(dtype);
  (void)i;
  if (num_dims > 16) {
    api->SetStatus(status, OPM_UNIMPLEMENTED, "shim: rank over 16");
    return NULL;
  }
  for (int d = 0; d < num_dims; ++d) {
    self->out_dims[d] = dims[d];
    nbytes *= (size_t)dims[d];
  }
  if (nbytes > self->out_capacity) {
    api->SetStatus(status, OPM_RESOURCE_EXHAUSTED, "shim: the output buffer is too small");
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

/* Runs the kernel once: create with the attrs, compute, delete. Returns the status code;
 * the message goes to message, the output's shape to out_dims and *out_ndim.
 * variant 0: as it should be; 1: the node lacks attr 'type'; 2: no attr getters at all. */
OPM_EXPORT int shim_run(const OPMB_BridgeApi* api, const OPMB_Kernel* kernel, int variant,
                        OPM_DataType T, OPM_DataType type, void* input, const int64_t* dims,
                        int ndim, void* out, size_t out_capacity, int64_t* out_dims,
                        int* out_ndim, char* message, size_t message_capacity) {
  if (!api || api->struct_size < sizeof(OPMB_BridgeApi) || api->version < 1) return -1;
  OPM_Status* status = api->api->NewStatus();
  Attrs attrs = {{variant == 2 ? &no_attr_ops : &attr_ops}, api, T, type, variant != 1};
  void* state = api->kernel_create(kernel, &attrs.base, status);
  if (api->api->GetCode(status) == OPM_OK) {
    size_t nbytes = api->api->DataTypeSize(T);
    for (int d = 0; d < ndim; ++d) nbytes *= (size_t)dims[d];
    Context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.base.ops = &context_ops;
    ctx.bridge = api;
    ctx.input.dtype = T;
    ctx.input.ndim = ndim;
    ctx.input.dims = dims;
    ctx.input.data = input;
    ctx.input.nbytes = nbytes;
    ctx.out_buffer = out;
    ctx.out_capacity = out_capacity;
    api->kernel_compute(kernel, state, &ctx.base, status);
    if (api->api->GetCode(status) == OPM_OK) {
      *out_ndim = ctx.output.ndim;
      for (int d = 0; d < ctx.output.ndim; ++d) out_dims[d] = ctx.out_dims[d];
    }
    api->kernel_delete(kernel, state);
  }
  int code = api->api->GetCode(status);
  snprintf(message, message_capacity, "%s", api->api->Message(status));
  api->api->DeleteStatus(status);
  return code;
}

/* --- shapes: one input shape in, the output shape out ------------------------------ */
typedef struct {
  OPMB_ShapeContext base;
  const OPMB_BridgeApi* bridge;
  OPM_DataType T, type;
  int64_t in_rank;
  const int64_t* in_dims;
  int64_t* out_dims;
  int64_t out_rank;
  int outputs_set;
} Shapes;

static int shape_num_inputs(OPMB_ShapeContext* c) { (void)c; return 1; }
static int shape_num_outputs(OPMB_ShapeContext* c) { (void)c; return 1; }
static int64_t shape_input_rank(OPMB_ShapeContext* c, int i) {
  (void)i;
  return ((Shapes*)c)->in_rank;
}
static int64_t shape_input_dim(OPMB_ShapeContext* c, int i, int64_t d) {
  (void)i;
  return ((Shapes*)c)->in_dims[d];
}
static void shape_set_output(OPMB_ShapeContext* c, int i, int64_t rank, const int64_t* dims,
                             OPM_Status* status) {
  Shapes* self = (Shapes*)c;
  (void)i, (void)status;
  self->out_rank = rank;
  for (int64_t d = 0; d < rank && d < 16; ++d) self->out_dims[d] = dims[d];
  ++self->outputs_set;
}
static void shape_attr_type(OPMB_ShapeContext* c, const char* name, OPM_DataType* value,
                            OPM_Status* status) {
  const Shapes* self = (const Shapes*)c;
  if (strcmp(name, "T") == 0) *value = self->T;
  else if (strcmp(name, "type") == 0) *value = self->type;
  else self->bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, "shim: no such attr");
}
static const OPMB_ShapeContextOps shape_ops = {
    sizeof(OPMB_ShapeContextOps), shape_num_inputs, shape_num_outputs, shape_input_rank,
    shape_input_dim, shape_set_output, shape_attr_type, NULL};

/* The op's output shape for an input of rank in_rank (-1: unknown) and dims (-1: unknown):
 * the status code; *out_rank gets -2 when the function set no output. */
OPM_EXPORT int shim_shape(const OPMB_BridgeApi* api, const OPMB_ShapeFn* fn, OPM_DataType T,
                          OPM_DataType type, int64_t in_rank, const int64_t* in_dims,
                          int64_t* out_dims, int64_t* out_rank, char* message,
                          size_t message_capacity) {
  if (!api || api->struct_size < sizeof(OPMB_BridgeApi) || !api->shape_infer) return -1;
  Shapes shapes = {{&shape_ops}, api, T, type, in_rank, in_dims, out_dims, -2, 0};
  OPM_Status* status = api->api->NewStatus();
  api->shape_infer(fn, &shapes.base, status);
  int code = api->api->GetCode(status);
  snprintf(message, message_capacity, "%s", api->api->Message(status));
  api->api->DeleteStatus(status);
  *out_rank = shapes.outputs_set == 1 ? shapes.out_rank : -2;
  return code;
}

/* --- threads: many bridge calls at once, from threads Python never saw ----------------- */
typedef struct {
  const OPMB_BridgeApi* api;
  const OPMB_Kernel* kernel;
  int iterations;
  int failures;
} Job;

static void* worker(void* arg) {
  Job* job = (Job*)arg;
  for (int n = 0; n < job->iterations; ++n) {
    float input[6];
    unsigned char out[24];
    int64_t dims[2] = {2, 3}, out_dims[16] = {0};
    int out_ndim = 0;
    char message[256];
    for (int i = 0; i < 6; ++i) input[i] = (float)(n * 6 + i);
    int code = shim_run(job->api, job->kernel, 0, OPM_FLOAT, OPM_UINT8, input, dims, 2, out,
                        sizeof out, out_dims, &out_ndim, message, sizeof message);
    if (code != OPM_OK || out_ndim != 3 || out_dims[2] != 4 ||
        memcmp(out, input, sizeof input) != 0)
      ++job->failures;
  }
  return NULL;
}

/* Runs shim_run `iterations` times in each of `threads` threads at once; the failures. */
OPM_EXPORT int shim_run_threads(const OPMB_BridgeApi* api, const OPMB_Kernel* kernel,
                                int threads, int iterations) {
  pthread_t ids[16];
  Job jobs[16];
  int failures = 0;
  if (threads > 16) threads = 16;
  for (int t = 0; t < threads; ++t) {
    jobs[t] = (Job){api, kernel, iterations, 0};
    if (pthread_create(&ids[t], NULL, worker, &jobs[t]) != 0) return -1;
  }
  for (int t = 0; t < threads; ++t) {
    pthread_join(ids[t], NULL);
    failures += jobs[t].failures;
  }
  return failures;
}
