/* opmarket's LiteRT shim: C-ABI kernels as LiteRT custom-op kernels (LiteRtCustomOpKernel:
 * Init, GetOutputLayouts, Run, Destroy, registered with LiteRtAddCustomOpKernelOption), run
 * through the host's bridge table (opmarket/capi_bridge.h) on LiteRT's own buffers, with no
 * Python and no GIL per invoke.
 *
 * One registration per custom code: LiteRT's callbacks see their registration (the user data
 * given to LiteRtAddCustomOpKernelOption), not the node, so opmarket.litert gives each
 * distinct attr set of an op a custom code of its own, and each registration holds the
 * attrs of its nodes, read from their custom options when the model is opened, in the form
 * the bridge interface hands to a kernel. A registration has one row per tuple of input
 * dtypes its nodes take: the kernel that serves it and the kernel's state, made by Init and
 * deleted by the last node's Destroy.
 *
 * Output shapes (GetOutputLayouts, LiteRT's prepare) come from the op's C shape function
 * where its library registered one, and else from the registration's `layouts` callback
 * (the op's shape function, wherever it is written), asked only when LiteRT prepares.
 *
 * LiteRT 2.3 ignores the status a callback returns: the first failure is written into the
 * registration's error record (OpmLiteError), which opmarket.litert raises from invoke().
 *
 * ai-edge-litert ships no headers: the few declarations needed are below, with LiteRT's
 * ABI-stable layouts, and the three buffer functions come from opm_litert_init (the
 * addresses of the loaded libLiteRt.so's), so the shim links against nothing. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opmarket/capi_bridge.h"

#define OPM_LITE_EXPORT __attribute__((visibility("default")))
#define MAX_TENSORS 64
#define MAX_RANK 8
#define MESSAGE 1024

/* ---- LiteRT's C ABI ------------------------------------------------------------------- */
typedef int LiteRtStatus; /* kLiteRtStatusOk is 0 */
typedef struct LiteRtTensorBufferT* LiteRtTensorBuffer;

typedef struct {
  unsigned int rank : 7;
  unsigned int has_strides : 1;
  int32_t dimensions[MAX_RANK];
  uint32_t strides[MAX_RANK];
} LiteRtLayout;

typedef struct {
  int element_type;
  LiteRtLayout layout;
} LiteRtRankedTensorType;

typedef struct {
  LiteRtStatus (*Init)(void* user_data, const void* init_data, size_t init_data_size);
  LiteRtStatus (*GetOutputLayouts)(void* user_data, size_t num_inputs,
                                   const LiteRtLayout* input_layouts, size_t num_outputs,
                                   LiteRtLayout* output_layouts);
  LiteRtStatus (*Run)(void* user_data, size_t num_inputs, const LiteRtTensorBuffer* inputs,
                      size_t num_outputs, LiteRtTensorBuffer* outputs);
  LiteRtStatus (*Destroy)(void* user_data);
} LiteRtCustomOpKernel;

enum { OK = 0, INVALID_ARGUMENT = 1, RUNTIME_FAILURE = 3, LOCK_READ = 0, LOCK_WRITE = 1 };

typedef LiteRtStatus (*TensorTypeFn)(LiteRtTensorBuffer, LiteRtRankedTensorType*);
typedef LiteRtStatus (*LockFn)(LiteRtTensorBuffer, void**, int);
typedef LiteRtStatus (*UnlockFn)(LiteRtTensorBuffer);
typedef LiteRtStatus (*LayoutsFn)(void*, size_t, const LiteRtLayout*, size_t, LiteRtLayout*);

static const OPMB_BridgeApi* bridge;
static TensorTypeFn tensor_type;
static LockFn lock_buffer;
static UnlockFn unlock_buffer;

/* Called once from Python with the host's table and libLiteRt.so's buffer functions; 0 when
 * the shim can be used. */
OPM_LITE_EXPORT int opm_litert_init(const OPMB_BridgeApi* api, void* get_type, void* lock,
                                    void* unlock) {
  if (api == NULL || api->struct_size < sizeof(OPMB_BridgeApi) ||
      api->version < OPMB_BRIDGE_API_VERSION || !get_type || !lock || !unlock)
    return 1;
  bridge = api;
  tensor_type = (TensorTypeFn)get_type;
  lock_buffer = (LockFn)lock;
  unlock_buffer = (UnlockFn)unlock;
  return 0;
}

/* ---- registrations ---------------------------------------------------------------------- */
/* Attr kinds, as opmarket.litert._native writes them. */
enum { A_TYPE = 0, A_INT = 1, A_FLOAT = 2, A_BOOL = 3, A_STRING = 4, A_INTS = 5, A_FLOATS = 6 };

typedef struct {
  char* name;
  int kind;
  size_t length; /* values of a list, bytes of a string, 1 otherwise */
  void* data;    /* int64 (type, int, bool), double (float), chars, int64[] or double[] */
} Attr;

typedef struct {
  int32_t dtypes[MAX_TENSORS]; /* the inputs' OPM dtypes */
  const OPMB_Kernel* kernel;
  size_t n_attrs;
  Attr* attrs;
  void* state;
  int made;
  char* failure; /* why create failed, when it did */
} Row;

/* The error record of one interpreter: the first failure since invoke() cleared it. */
typedef struct {
  int32_t failed;
  char message[MESSAGE];
} OpmLiteError;

typedef struct {
  char* op;
  int n_in, n_out;
  const OPMB_ShapeFn* shape; /* the op's C shape function, or NULL */
  LayoutsFn layouts;         /* else this answers GetOutputLayouts */
  OpmLiteError* error;
  OPM_Status* status; /* Run's, reused: a registration's nodes run one at a time */
  int nodes;          /* Init calls not yet matched by Destroy */
  size_t n_rows;
  Row* rows;
} Registration;

/* strlen, at most max (strnlen is POSIX, not C11). */
static size_t bounded_length(const char* text, size_t max) {
  const char* end = memchr(text, '\0', max);
  return end != NULL ? (size_t)(end - text) : max;
}

static void fail(Registration* r, const char* format, const char* detail) {
  if (r->error->failed) return;
  char message[MESSAGE];
  snprintf(message, sizeof message, format, detail);
  if (strncmp(message, r->op, strlen(r->op)) == 0) {
    snprintf(r->error->message, MESSAGE, "%s", message);
  } else {
    /* "op: message", cut at the record's size (copied by hand: gcc's -Wformat-truncation
     * flags the equivalent snprintf, which the wheel's build keeps free of warnings). */
    char* out = r->error->message;
    size_t n = bounded_length(r->op, MESSAGE - 3);
    memcpy(out, r->op, n);
    memcpy(out + n, ": ", 2);
    size_t m = bounded_length(message, MESSAGE - n - 3);
    memcpy(out + n + 2, message, m);
    out[n + 2 + m] = '\0';
  }
  r->error->failed = 1;
}

static char* copy_text(const char* text) {
  size_t n = strlen(text);
  char* out = malloc(n + 1);
  if (out) memcpy(out, text, n + 1);
  return out;
}

OPM_LITE_EXPORT Registration* opm_litert_new(const char* op, int n_in, int n_out,
                                             const OPMB_ShapeFn* shape, LayoutsFn layouts,
                                             OpmLiteError* error) {
  if (n_in > MAX_TENSORS || n_out > MAX_TENSORS || (!shape && !layouts) || !error) return NULL;
  Registration* r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->op = copy_text(op);
  r->n_in = n_in;
  r->n_out = n_out;
  r->shape = shape;
  r->layouts = layouts;
  r->error = error;
  r->status = bridge->api->NewStatus();
  if (!r->op || !r->status) {
    free(r->op);
    if (r->status) bridge->api->DeleteStatus(r->status);
    free(r);
    return NULL;
  }
  return r;
}

/* attrs[0..n) and their copied names and values (each may be NULL), then attrs. */
static void free_attrs(Attr* attrs, size_t n) {
  if (!attrs) return;
  for (size_t k = 0; k < n; ++k) {
    free(attrs[k].name);
    free(attrs[k].data);
  }
  free(attrs);
}

/* A row: the kernel for these input dtypes and its attrs (values copied: 8-byte words for a
 * scalar or a list, the bytes of a string). 0 when added; 1, with nothing of the row kept,
 * when memory ran out. */
OPM_LITE_EXPORT int opm_litert_add_row(Registration* r, const int32_t* dtypes,
                                       const OPMB_Kernel* kernel, int n_attrs,
                                       const char* const* names, const int32_t* kinds,
                                       const int64_t* lengths, const void* const* data) {
  Row* rows = realloc(r->rows, (r->n_rows + 1) * sizeof *rows);
  if (!rows) return 1;
  r->rows = rows;
  Row* row = &rows[r->n_rows];
  memset(row, 0, sizeof *row);
  memcpy(row->dtypes, dtypes, (size_t)r->n_in * sizeof *dtypes);
  row->kernel = kernel;
  row->attrs = calloc((size_t)n_attrs + 1, sizeof *row->attrs);
  if (!row->attrs) return 1;
  for (int k = 0; k < n_attrs; ++k) {
    Attr* a = &row->attrs[k];
    a->name = copy_text(names[k]);
    a->kind = kinds[k];
    a->length = (size_t)lengths[k];
    size_t bytes = a->kind == A_STRING ? a->length : a->length * 8;
    a->data = malloc(bytes + 1);
    if (!a->name || !a->data) {
      free_attrs(row->attrs, (size_t)k + 1);
      row->attrs = NULL;
      return 1;
    }
    memcpy(a->data, data[k], bytes);
  }
  row->n_attrs = (size_t)n_attrs;
  r->n_rows += 1;
  return 0;
}

static void delete_states(Registration* r) {
  for (size_t i = 0; i < r->n_rows; ++i) {
    Row* row = &r->rows[i];
    if (row->made) bridge->kernel_delete(row->kernel, row->state);
    row->made = 0;
    row->state = NULL;
    free(row->failure);
    row->failure = NULL;
  }
}

/* After LiteRT destroyed the compiled model (every node's Destroy has run). */
OPM_LITE_EXPORT void opm_litert_free(Registration* r) {
  if (!r) return;
  delete_states(r);
  for (size_t i = 0; i < r->n_rows; ++i) free_attrs(r->rows[i].attrs, r->rows[i].n_attrs);
  free(r->rows);
  free(r->op);
  bridge->api->DeleteStatus(r->status);
  free(r);
}

/* ---- attrs: the construction and shape interfaces read a row's -------------------------- */
static const Attr* find_attr(const Row* row, const char* name, int kind, OPM_Status* status) {
  for (size_t k = 0; k < row->n_attrs; ++k) {
    if (strcmp(row->attrs[k].name, name) == 0 && row->attrs[k].kind == kind)
      return &row->attrs[k];
  }
  char message[256];
  snprintf(message, sizeof message, "attr '%s' is missing or of another kind", name);
  bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, message);
  return NULL;
}

typedef struct {
  OPMB_KernelConstruction base;
  const Row* row;
} Construction;

static const Row* row_of(OPMB_KernelConstruction* c) { return ((Construction*)c)->row; }

static void c_get_type(OPMB_KernelConstruction* c, const char* name, OPM_DataType* value,
                       OPM_Status* status) {
  const Attr* a = find_attr(row_of(c), name, A_TYPE, status);
  if (a) *value = (OPM_DataType)((const int64_t*)a->data)[0];
}

static void c_get_int64(OPMB_KernelConstruction* c, const char* name, int64_t* value,
                        OPM_Status* status) {
  const Attr* a = find_attr(row_of(c), name, A_INT, status);
  if (a) *value = ((const int64_t*)a->data)[0];
}

static void c_get_float(OPMB_KernelConstruction* c, const char* name, float* value,
                        OPM_Status* status) {
  const Attr* a = find_attr(row_of(c), name, A_FLOAT, status);
  if (a) *value = (float)((const double*)a->data)[0];
}

static void c_get_bool(OPMB_KernelConstruction* c, const char* name, uint8_t* value,
                       OPM_Status* status) {
  const Attr* a = find_attr(row_of(c), name, A_BOOL, status);
  if (a) *value = ((const int64_t*)a->data)[0] != 0;
}

static void c_get_string(OPMB_KernelConstruction* c, const char* name, char* value,
                         size_t max_length, size_t* length, OPM_Status* status) {
  const Attr* a = find_attr(row_of(c), name, A_STRING, status);
  if (!a) return;
  *length = a->length;
  memcpy(value, a->data, a->length < max_length ? a->length : max_length);
}

static void c_get_int64_list(OPMB_KernelConstruction* c, const char* name, int64_t* values,
                             size_t max_values, size_t* length, OPM_Status* status) {
  const Attr* a = find_attr(row_of(c), name, A_INTS, status);
  if (!a) return;
  *length = a->length;
  for (size_t k = 0; k < a->length && k < max_values; ++k) values[k] = ((int64_t*)a->data)[k];
}

static void c_get_float_list(OPMB_KernelConstruction* c, const char* name, float* values,
                             size_t max_values, size_t* length, OPM_Status* status) {
  const Attr* a = find_attr(row_of(c), name, A_FLOATS, status);
  if (!a) return;
  *length = a->length;
  for (size_t k = 0; k < a->length && k < max_values; ++k)
    values[k] = (float)((double*)a->data)[k];
}

static const OPMB_KernelConstructionOps construction_ops = {
    sizeof(OPMB_KernelConstructionOps), c_get_type,       c_get_int64,     c_get_float,
    c_get_bool,                         c_get_string,     c_get_int64_list, c_get_float_list};

/* ---- Init and Destroy: each node of the registration; the states live while one does ----- */
static LiteRtStatus init(void* user_data, const void* options, size_t size) {
  (void)options; /* the registration holds its nodes' attrs, read from these options */
  (void)size;
  Registration* r = user_data;
  if (r->nodes++ > 0) return OK;
  OPM_Status* status = bridge->api->NewStatus();
  for (size_t i = 0; i < r->n_rows; ++i) {
    Row* row = &r->rows[i];
    Construction c = {{&construction_ops}, row};
    row->state = bridge->kernel_create(row->kernel, &c.base, status);
    if (bridge->api->GetCode(status) == OPM_OK) {
      row->made = 1;
    } else {
      row->failure = copy_text(bridge->api->Message(status));
      bridge->api->SetStatus(status, OPM_OK, "");
    }
  }
  bridge->api->DeleteStatus(status);
  return OK;
}

static LiteRtStatus destroy(void* user_data) {
  Registration* r = user_data;
  if (r->nodes > 0 && --r->nodes == 0) delete_states(r);
  return OK;
}

/* ---- GetOutputLayouts (LiteRT's prepare) ------------------------------------------------ */
typedef struct {
  OPMB_ShapeContext base;
  Registration* r;
  size_t n_in, n_out;
  const LiteRtLayout* in;
  LiteRtLayout* out;
  int* set;
} ShapeContext;

static ShapeContext* shapes_of(OPMB_ShapeContext* c) { return (ShapeContext*)c; }
static int s_num_inputs(OPMB_ShapeContext* c) { return (int)shapes_of(c)->n_in; }
static int s_num_outputs(OPMB_ShapeContext* c) { return (int)shapes_of(c)->n_out; }

static int64_t s_input_rank(OPMB_ShapeContext* c, int i) {
  ShapeContext* s = shapes_of(c);
  return i >= 0 && (size_t)i < s->n_in ? (int64_t)s->in[i].rank : -1;
}

static int64_t s_input_dim(OPMB_ShapeContext* c, int i, int64_t d) {
  ShapeContext* s = shapes_of(c);
  if (i < 0 || (size_t)i >= s->n_in || d < 0 || d >= (int64_t)s->in[i].rank) return -1;
  return s->in[i].dimensions[d];
}

static void s_set_output(OPMB_ShapeContext* c, int i, int64_t rank, const int64_t* dims,
                         OPM_Status* status) {
  ShapeContext* s = shapes_of(c);
  int known = rank >= 0 && rank <= MAX_RANK;
  for (int64_t d = 0; known && d < rank; ++d) known = dims[d] >= 0 && dims[d] <= INT32_MAX;
  if (i < 0 || (size_t)i >= s->n_out || !known) {
    bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT,
                           "its shape function does not give a static output shape");
    return;
  }
  memset(&s->out[i], 0, sizeof s->out[i]);
  s->out[i].rank = (unsigned)rank;
  for (int64_t d = 0; d < rank; ++d) s->out[i].dimensions[d] = (int32_t)dims[d];
  s->set[i] = 1;
}

static void s_get_type(OPMB_ShapeContext* c, const char* name, OPM_DataType* value,
                       OPM_Status* status) {
  const Attr* a = find_attr(&shapes_of(c)->r->rows[0], name, A_TYPE, status);
  if (a) *value = (OPM_DataType)((const int64_t*)a->data)[0];
}

static void s_get_int64(OPMB_ShapeContext* c, const char* name, int64_t* value,
                        OPM_Status* status) {
  const Attr* a = find_attr(&shapes_of(c)->r->rows[0], name, A_INT, status);
  if (a) *value = ((const int64_t*)a->data)[0];
}

static const OPMB_ShapeContextOps shape_ops = {
    sizeof(OPMB_ShapeContextOps), s_num_inputs, s_num_outputs, s_input_rank,
    s_input_dim,                  s_set_output, s_get_type,    s_get_int64};

static LiteRtStatus output_layouts(void* user_data, size_t n_in, const LiteRtLayout* in,
                                   size_t n_out, LiteRtLayout* out) {
  Registration* r = user_data;
  if (!r->shape || r->n_rows != 1) return r->layouts(NULL, n_in, in, n_out, out);
  if (n_out > MAX_TENSORS) {
    fail(r, "%s", "it has more outputs than the shim takes");
    return INVALID_ARGUMENT;
  }
  int set[MAX_TENSORS] = {0};
  ShapeContext c = {{&shape_ops}, r, n_in, n_out, in, out, set};
  OPM_Status* status = bridge->api->NewStatus();
  bridge->shape_infer(r->shape, &c.base, status);
  int code = bridge->api->GetCode(status);
  if (code != OPM_OK) fail(r, "%s", bridge->api->Message(status));
  bridge->api->DeleteStatus(status);
  for (size_t i = 0; code == OPM_OK && i < n_out; ++i) {
    if (!set[i]) {
      fail(r, "%s", "its shape function does not give every output's shape");
      code = OPM_INVALID_ARGUMENT;
    }
  }
  return code == OPM_OK ? OK : INVALID_ARGUMENT;
}

/* ---- Run -------------------------------------------------------------------------------- */
static int32_t opm_dtype(int element_type) {
  switch (element_type) { /* LiteRtElementType (TfLiteType) to TensorFlow's DataType */
    case 1: return OPM_FLOAT;
    case 2: return OPM_INT32;
    case 3: return OPM_UINT8;
    case 4: return OPM_INT64;
    case 6: return OPM_BOOL;
    case 7: return OPM_INT16;
    case 8: return OPM_COMPLEX64;
    case 9: return OPM_INT8;
    case 10: return OPM_HALF;
    case 11: return OPM_DOUBLE;
    case 12: return OPM_COMPLEX128;
    case 13: return OPM_UINT64;
    case 16: return OPM_UINT32;
    case 17: return OPM_UINT16;
    default: return -1;
  }
}

typedef struct {
  OPMB_Tensor tensor;
  int64_t dims[MAX_RANK];
} Buffer;

typedef struct {
  OPMB_KernelContext base;
  int n_in, n_out;
  Buffer* in;
  Buffer* out;
} Context;

static Context* context_of(OPMB_KernelContext* c) { return (Context*)c; }
static int k_num_inputs(OPMB_KernelContext* c) { return context_of(c)->n_in; }
static int k_num_outputs(OPMB_KernelContext* c) { return context_of(c)->n_out; }

static const OPMB_Tensor* k_input(OPMB_KernelContext* c, int i, OPM_Status* status) {
  Context* k = context_of(c);
  if (i >= 0 && i < k->n_in) return &k->in[i].tensor;
  bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, "no such input");
  return NULL;
}

/* LiteRT sized the output in prepare: the kernel must ask for exactly that. */
static const OPMB_Tensor* k_allocate(OPMB_KernelContext* c, int i, OPM_DataType dtype,
                                     const int64_t* dims, int num_dims, OPM_Status* status) {
  Context* k = context_of(c);
  if (i < 0 || i >= k->n_out) {
    bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, "no such output");
    return NULL;
  }
  OPMB_Tensor* t = &k->out[i].tensor;
  int same = dtype == t->dtype && num_dims == t->ndim;
  for (int d = 0; same && d < num_dims; ++d) same = dims[d] == t->dims[d];
  if (!same) {
    char message[256];
    int n = snprintf(message, sizeof message, "the kernel made output %d of dtype %d [", i,
                     (int)dtype);
    for (int d = 0; d < num_dims && n < 200; ++d)
      n += snprintf(message + n, sizeof message - (size_t)n, d ? ", %lld" : "%lld",
                    (long long)dims[d]);
    snprintf(message + n, sizeof message - (size_t)n,
             "] where LiteRT's prepare step sized it as dtype %d with rank %d", (int)t->dtype,
             (int)t->ndim);
    bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, message);
    return NULL;
  }
  return t;
}

static const OPMB_KernelContextOps context_ops = {sizeof(OPMB_KernelContextOps), k_num_inputs,
                                                  k_num_outputs, k_input, k_allocate};

/* Buffer b's type, shape and host memory, locked in `mode`; 0 when done. */
static int open_buffer(Registration* r, LiteRtTensorBuffer b, int mode, Buffer* out) {
  LiteRtRankedTensorType type;
  if (tensor_type(b, &type) != OK) {
    fail(r, "%s", "LiteRT gave no tensor type for a buffer");
    return 1;
  }
  int32_t dtype = opm_dtype(type.element_type);
  if (dtype < 0) {
    char what[64];
    snprintf(what, sizeof what, "%d", type.element_type);
    fail(r, "LiteRT element type %s has no opmarket dtype", what);
    return 1;
  }
  size_t count = 1;
  for (unsigned d = 0; d < type.layout.rank; ++d) {
    out->dims[d] = type.layout.dimensions[d];
    count *= (size_t)type.layout.dimensions[d];
  }
  out->tensor.dtype = dtype;
  out->tensor.ndim = (int32_t)type.layout.rank;
  out->tensor.dims = out->dims;
  out->tensor.nbytes = count * bridge->api->DataTypeSize(dtype);
  out->tensor.data = NULL;
  if (lock_buffer(b, &out->tensor.data, mode) != OK) {
    fail(r, "%s", "LiteRT could not lock a tensor buffer");
    return 1;
  }
  return 0;
}

static LiteRtStatus run(void* user_data, size_t n_in, const LiteRtTensorBuffer* inputs,
                        size_t n_out, LiteRtTensorBuffer* outputs) {
  Registration* r = user_data;
  if ((int)n_in != r->n_in || (int)n_out != r->n_out) {
    fail(r, "%s", "LiteRT ran the node with another number of inputs or outputs");
    return INVALID_ARGUMENT;
  }
  Buffer in[MAX_TENSORS], out[MAX_TENSORS];
  size_t locked_in = 0, locked_out = 0;
  LiteRtStatus result = RUNTIME_FAILURE;
  for (; locked_in < n_in; ++locked_in)
    if (open_buffer(r, inputs[locked_in], LOCK_READ, &in[locked_in])) goto done;
  for (; locked_out < n_out; ++locked_out)
    if (open_buffer(r, outputs[locked_out], LOCK_WRITE, &out[locked_out])) goto done;
  Row* row = NULL;
  for (size_t i = 0; i < r->n_rows && !row; ++i) {
    row = &r->rows[i];
    for (size_t k = 0; k < n_in && row; ++k)
      if (row->dtypes[k] != in[k].tensor.dtype) row = NULL;
  }
  if (!row) {
    fail(r, "%s", "it has no kernel for these input dtypes");
    goto done;
  }
  if (!row->made) {
    fail(r, "%s", row->failure ? row->failure : "its kernel was not created");
    goto done;
  }
  Context c = {{&context_ops}, r->n_in, r->n_out, in, out};
  bridge->kernel_compute(row->kernel, row->state, &c.base, r->status);
  if (bridge->api->GetCode(r->status) == OPM_OK) {
    result = OK;
  } else {
    fail(r, "%s", bridge->api->Message(r->status));
    bridge->api->SetStatus(r->status, OPM_OK, "");
  }
done:
  while (locked_out > 0) unlock_buffer(outputs[--locked_out]);
  while (locked_in > 0) unlock_buffer(inputs[--locked_in]);
  return result;
}

/* The callbacks of every registration; its user data is the Registration. */
OPM_LITE_EXPORT const LiteRtCustomOpKernel opm_litert_kernel = {init, output_layouts, run,
                                                                destroy};
