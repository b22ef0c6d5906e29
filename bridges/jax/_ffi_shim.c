/* opmarket's XLA FFI handler: runs a C-ABI plugin kernel on XLA's buffers, with no Python.
 *
 * Shipped built in opmarket's wheel against _xla_ffi_c_api.h (opmarket's declarations of XLA
 * FFI's stable C API, one API version), or built on first use against jax.ffi.include_dir()
 * (xla/ffi/api/c_api.h) with -DOPM_XLA_FFI_HEADERS for a jaxlib of another API version; then
 * registered with JAX as the custom-call target "opmarket_capi". Each custom call carries
 * FFI attributes:
 *
 *   opm_kernel  int64  the kernel's OPMB_Kernel handle (opmarket's host owns the plugin)
 *   opm_site    int64  a number per (kernel, attrs) that the bridge hands out: the kernel's
 *                      state, made by its create from the attributes below on the first
 *                      call, is kept under it
 *   <attr>      the op's attrs: int64 scalars (int), int32 scalars (type: TensorFlow's
 *               DataType number), f32 scalars (float), bool scalars, strings, int64
 *               arrays (list(int)) and f32 arrays (list(float))
 *
 * Inputs are the op's inputs, results its outputs, which XLA allocates from the shapes the
 * op's shape function gave at trace time: allocate_output checks the kernel asks for
 * exactly those.
 *
 * The second handler, opm_jax_cuda_call, is the target "opmarket_cuda" for platform CUDA:
 * its opm_kernel is a GPU companion's device entry (opmarket/cuda_kernel.h), called on XLA's
 * device buffers with the stream and device ordinal from the FFI execution context
 * (XLA_FFI_Stream_Get, XLA_FFI_DeviceOrdinal_Get); it keeps no state and needs no CUDA
 * library of its own, so the one build serves CPU-only jaxlibs too.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "opmarket/capi_bridge.h"
#include "opmarket/cuda_kernel.h"
/* opmarket's wheel carries the handler built against opmarket's declarations of the API
 * version it serves; built on first use for another version, against jaxlib's own header. */
#ifdef OPM_XLA_FFI_HEADERS
#include "xla/ffi/api/c_api.h"
#else
#include "_xla_ffi_c_api.h"
#endif

/* What Python looks up (the build hides everything else). */
#define OPM_JAX_EXPORT __attribute__((visibility("default")))

#define MAX_ARGS 64
#define MAX_SITES 4096

static const OPMB_BridgeApi* bridge;
static _Atomic(void*) states[MAX_SITES];
static atomic_char made[MAX_SITES];
static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;

/* The XLA FFI API version the handler was built for, major * 1000 + minor. */
OPM_JAX_EXPORT int opm_jax_ffi_version(void) {
  return XLA_FFI_API_MAJOR * 1000 + XLA_FFI_API_MINOR;
}

/* Called once from Python with the host's table; 0 when it can be used. */
OPM_JAX_EXPORT int opm_jax_init(const OPMB_BridgeApi* api) {
  if (api == NULL || api->struct_size < sizeof(OPMB_BridgeApi) ||
      api->version < OPMB_BRIDGE_API_VERSION)
    return 1;
  bridge = api;
  return 0;
}

/* --- dtypes ---------------------------------------------------------------------------- */
static OPM_DataType opm_dtype(XLA_FFI_DataType t) {
  switch (t) {
    case XLA_FFI_DataType_F32: return 1;
    case XLA_FFI_DataType_F64: return 2;
    case XLA_FFI_DataType_S32: return 3;
    case XLA_FFI_DataType_U8: return 4;
    case XLA_FFI_DataType_S16: return 5;
    case XLA_FFI_DataType_S8: return 6;
    case XLA_FFI_DataType_C64: return 8;
    case XLA_FFI_DataType_S64: return 9;
    case XLA_FFI_DataType_PRED: return 10;
    case XLA_FFI_DataType_BF16: return 14;
    case XLA_FFI_DataType_U16: return 17;
    case XLA_FFI_DataType_C128: return 18;
    case XLA_FFI_DataType_F16: return 19;
    case XLA_FFI_DataType_U32: return 22;
    case XLA_FFI_DataType_U64: return 23;
    case XLA_FFI_DataType_F8E5M2: return 24;
    case XLA_FFI_DataType_F8E4M3FN: return 25;
    default: return 0;
  }
}

/* --- errors ------------------------------------------------------------------------------ */
static XLA_FFI_Error* ffi_error(const XLA_FFI_Api* api, XLA_FFI_Error_Code code,
                                const char* message) {
  XLA_FFI_Error_Create_Args args;
  memset(&args, 0, sizeof args);
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = message;
  args.errc = code;
  return api->XLA_FFI_Error_Create(&args);
}

static XLA_FFI_Error* status_error(const XLA_FFI_Api* api, const OPMB_Kernel* kernel,
                                   OPM_Status* status) {
  char message[1024];
  const char* name = bridge->kernel_name(kernel);
  const char* text = bridge->api->Message(status);
  size_t n = strlen(name);
  /* The host's message may already start with the kernel's name: say it once. */
  if (strncmp(text, name, n) == 0 && text[n] == ':')
    snprintf(message, sizeof message, "%s", text);
  else
    snprintf(message, sizeof message, "%s: %s", name, text);
  OPM_Code code = bridge->api->GetCode(status);
  return ffi_error(api, (XLA_FFI_Error_Code)code, message);
}

/* --- attributes ---------------------------------------------------------------------------- */
static int find_attr(const XLA_FFI_Attrs* attrs, const char* name) {
  size_t n = strlen(name);
  for (int64_t i = 0; i < attrs->size; ++i) {
    const XLA_FFI_ByteSpan* s = attrs->names[i];
    if (s->len == n && memcmp(s->ptr, name, n) == 0) return (int)i;
  }
  return -1;
}

static const XLA_FFI_Scalar* scalar_attr(const XLA_FFI_Attrs* attrs, const char* name) {
  int i = find_attr(attrs, name);
  if (i < 0 || attrs->types[i] != XLA_FFI_AttrType_SCALAR) return NULL;
  return (const XLA_FFI_Scalar*)attrs->attrs[i];
}

typedef struct {
  OPMB_KernelConstruction base;
  const XLA_FFI_Attrs* attrs;
} Construction;

static void missing(OPM_Status* status, const char* name, const char* kind) {
  char message[256];
  snprintf(message, sizeof message, "no %s attr '%s' in the custom call's FFI attributes",
           kind, name);
  bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, message);
}

static int64_t scalar_int(const XLA_FFI_Scalar* s, int* ok) {
  *ok = 1;
  switch (s->dtype) {
    case XLA_FFI_DataType_S64: return *(const int64_t*)s->value;
    case XLA_FFI_DataType_S32: return *(const int32_t*)s->value;
    case XLA_FFI_DataType_S8: return *(const int8_t*)s->value;
    case XLA_FFI_DataType_PRED: return *(const uint8_t*)s->value;
    default: *ok = 0; return 0;
  }
}

static void get_type(OPMB_KernelConstruction* c, const char* name, OPM_DataType* value,
                     OPM_Status* status) {
  const XLA_FFI_Scalar* s = scalar_attr(((Construction*)c)->attrs, name);
  int ok = 0;
  int64_t v = s ? scalar_int(s, &ok) : 0;
  if (!ok) return missing(status, name, "type");
  *value = (OPM_DataType)v;
}

static void get_int(OPMB_KernelConstruction* c, const char* name, int64_t* value,
                    OPM_Status* status) {
  const XLA_FFI_Scalar* s = scalar_attr(((Construction*)c)->attrs, name);
  int ok = 0;
  int64_t v = s ? scalar_int(s, &ok) : 0;
  if (!ok) return missing(status, name, "int");
  *value = v;
}

static void get_float(OPMB_KernelConstruction* c, const char* name, float* value,
                      OPM_Status* status) {
  const XLA_FFI_Scalar* s = scalar_attr(((Construction*)c)->attrs, name);
  if (s && s->dtype == XLA_FFI_DataType_F32) {
    *value = *(const float*)s->value;
  } else if (s && s->dtype == XLA_FFI_DataType_F64) {
    *value = (float)*(const double*)s->value;
  } else {
    missing(status, name, "float");
  }
}

static void get_bool(OPMB_KernelConstruction* c, const char* name, uint8_t* value,
                     OPM_Status* status) {
  const XLA_FFI_Scalar* s = scalar_attr(((Construction*)c)->attrs, name);
  int ok = 0;
  int64_t v = s ? scalar_int(s, &ok) : 0;
  if (!ok) return missing(status, name, "bool");
  *value = v != 0;
}

static void get_string(OPMB_KernelConstruction* c, const char* name, char* value,
                       size_t max_length, size_t* length, OPM_Status* status) {
  const XLA_FFI_Attrs* attrs = ((Construction*)c)->attrs;
  int i = find_attr(attrs, name);
  if (i < 0 || attrs->types[i] != XLA_FFI_AttrType_STRING) return missing(status, name,
                                                                            "string");
  const XLA_FFI_ByteSpan* s = (const XLA_FFI_ByteSpan*)attrs->attrs[i];
  memcpy(value, s->ptr, s->len < max_length ? s->len : max_length);
  *length = s->len;
}

static const XLA_FFI_Array* array_attr(const XLA_FFI_Attrs* attrs, const char* name) {
  int i = find_attr(attrs, name);
  if (i < 0 || attrs->types[i] != XLA_FFI_AttrType_ARRAY) return NULL;
  return (const XLA_FFI_Array*)attrs->attrs[i];
}

static void get_int64_list(OPMB_KernelConstruction* c, const char* name, int64_t* values,
                           size_t max_values, size_t* length, OPM_Status* status) {
  const XLA_FFI_Array* a = array_attr(((Construction*)c)->attrs, name);
  if (a == NULL || (a->dtype != XLA_FFI_DataType_S64 && a->dtype != XLA_FFI_DataType_S32))
    return missing(status, name, "list(int)");
  for (size_t i = 0; i < a->size && i < max_values; ++i)
    values[i] = a->dtype == XLA_FFI_DataType_S64 ? ((const int64_t*)a->data)[i]
                                                 : ((const int32_t*)a->data)[i];
  *length = a->size;
}

static void get_float_list(OPMB_KernelConstruction* c, const char* name, float* values,
                           size_t max_values, size_t* length, OPM_Status* status) {
  const XLA_FFI_Array* a = array_attr(((Construction*)c)->attrs, name);
  if (a == NULL || (a->dtype != XLA_FFI_DataType_F32 && a->dtype != XLA_FFI_DataType_F64))
    return missing(status, name, "list(float)");
  for (size_t i = 0; i < a->size && i < max_values; ++i)
    values[i] = a->dtype == XLA_FFI_DataType_F32 ? ((const float*)a->data)[i]
                                                 : (float)((const double*)a->data)[i];
  *length = a->size;
}

static const OPMB_KernelConstructionOps construction_ops = {
    sizeof(OPMB_KernelConstructionOps), get_type, get_int, get_float, get_bool, get_string,
    get_int64_list, get_float_list};

/* --- tensors ----------------------------------------------------------------------------- */
typedef struct {
  OPMB_KernelContext base;
  XLA_FFI_CallFrame* frame;
  OPMB_Tensor tensors[MAX_ARGS];
} Context;

static int num_inputs(OPMB_KernelContext* c) { return (int)((Context*)c)->frame->args.size; }
static int num_outputs(OPMB_KernelContext* c) { return (int)((Context*)c)->frame->rets.size; }

static size_t fill(OPMB_Tensor* t, const XLA_FFI_Buffer* b) {
  t->dtype = opm_dtype(b->dtype);
  t->ndim = (int32_t)b->rank;
  t->dims = b->dims;
  t->data = b->data;
  size_t n = bridge->api->DataTypeSize(t->dtype);
  for (int64_t i = 0; i < b->rank; ++i) n *= (size_t)b->dims[i];
  t->nbytes = n;
  return n;
}

static const OPMB_Tensor* get_input(OPMB_KernelContext* c, int i, OPM_Status* status) {
  Context* self = (Context*)c;
  if (i < 0 || i >= self->frame->args.size) {
    bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, "no such input");
    return NULL;
  }
  OPMB_Tensor* t = &self->tensors[i];
  fill(t, (const XLA_FFI_Buffer*)self->frame->args.args[i]);
  return t;
}

static const OPMB_Tensor* allocate_output(OPMB_KernelContext* c, int i, OPM_DataType dtype,
                                          const int64_t* dims, int num_dims,
                                          OPM_Status* status) {
  Context* self = (Context*)c;
  XLA_FFI_CallFrame* frame = self->frame;
  if (i < 0 || i >= frame->rets.size) {
    bridge->api->SetStatus(status, OPM_INVALID_ARGUMENT, "no such output");
    return NULL;
  }
  const XLA_FFI_Buffer* b = (const XLA_FFI_Buffer*)frame->rets.rets[i];
  int same = opm_dtype(b->dtype) == dtype && b->rank == num_dims;
  for (int d = 0; same && d < num_dims; ++d) same = b->dims[d] == dims[d];
  if (!same) {
    bridge->api->SetStatus(status, OPM_INTERNAL,
                           "the kernel allocated an output of another dtype or shape than "
                           "the op's shape function gave at trace time");
    return NULL;
  }
  OPMB_Tensor* t = &self->tensors[frame->args.size + i];
  fill(t, b);
  return t;
}

static const OPMB_KernelContextOps context_ops = {
    sizeof(OPMB_KernelContextOps), num_inputs, num_outputs, get_input, allocate_output};

/* --- the handler ------------------------------------------------------------------------- */
static XLA_FFI_Error* metadata(XLA_FFI_CallFrame* frame) {
  XLA_FFI_Metadata_Extension* ext = (XLA_FFI_Metadata_Extension*)frame->extension_start;
  ext->metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
  ext->metadata->api_version.extension_start = NULL;
  ext->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
  ext->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
  ext->metadata->traits = 0;
  ext->metadata->state_type_id.type_id = 0;
  return NULL;
}

static OPM_Status* thread_status(void) {
  static __thread OPM_Status* status;
  if (status == NULL) status = bridge->api->NewStatus();
  return status;
}

OPM_JAX_EXPORT XLA_FFI_Error* opm_jax_capi_call(XLA_FFI_CallFrame* frame) {
  if (frame->extension_start != NULL &&
      frame->extension_start->type == XLA_FFI_Extension_Metadata)
    return metadata(frame);
  const XLA_FFI_Api* api = frame->api;
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  if (bridge == NULL)
    return ffi_error(api, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                     "opmarket_capi: the bridge table was not set (opm_jax_init)");
  const XLA_FFI_Scalar* k = scalar_attr(&frame->attrs, "opm_kernel");
  const XLA_FFI_Scalar* site_attr = scalar_attr(&frame->attrs, "opm_site");
  if (k == NULL || site_attr == NULL || k->dtype != XLA_FFI_DataType_S64 ||
      site_attr->dtype != XLA_FFI_DataType_S64)
    return ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "opmarket_capi: the call has no int64 opm_kernel and opm_site attributes");
  const OPMB_Kernel* kernel = (const OPMB_Kernel*)(uintptr_t)*(const int64_t*)k->value;
  int64_t site = *(const int64_t*)site_attr->value;
  if (frame->args.size + frame->rets.size > MAX_ARGS)
    return ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "opmarket_capi: too many inputs and outputs");
  OPM_Status* status = thread_status();
  bridge->api->SetStatus(status, OPM_OK, "");

  /* The kernel's state for this site: made once, from the attributes. */
  void* state = NULL;
  int owned = site < 0 || site >= MAX_SITES;
  if (!owned && atomic_load_explicit(&made[site], memory_order_acquire)) {
    state = atomic_load_explicit(&states[site], memory_order_relaxed);
  } else {
    if (!owned) pthread_mutex_lock(&make_lock);
    if (!owned && atomic_load_explicit(&made[site], memory_order_acquire)) {
      state = atomic_load_explicit(&states[site], memory_order_relaxed);
    } else {
      Construction construction = {{&construction_ops}, &frame->attrs};
      state = bridge->kernel_create(kernel, &construction.base, status);
      if (bridge->api->GetCode(status) != OPM_OK) {
        if (!owned) pthread_mutex_unlock(&make_lock);
        return status_error(api, kernel, status);
      }
      if (!owned) {
        atomic_store_explicit(&states[site], state, memory_order_relaxed);
        atomic_store_explicit(&made[site], 1, memory_order_release);
      }
    }
    if (!owned) pthread_mutex_unlock(&make_lock);
  }

  Context context;
  context.base.ops = &context_ops;
  context.frame = frame;
  bridge->kernel_compute(kernel, state, &context.base, status);
  if (owned) bridge->kernel_delete(kernel, state);
  if (bridge->api->GetCode(status) != OPM_OK) return status_error(api, kernel, status);
  return NULL;
}

/* --- the CUDA handler: a device entry on XLA's GPU buffers ------------------------------- */
static XLA_FFI_Error* cuda_status_error(const XLA_FFI_Api* api, OPM_Status* status) {
  char message[1024];
  snprintf(message, sizeof message, "opmarket_cuda: %s", bridge->api->Message(status));
  OPM_Code code = bridge->api->GetCode(status);
  return ffi_error(api, (XLA_FFI_Error_Code)(code > 0 && code <= 16 ? code : 13), message);
}

OPM_JAX_EXPORT XLA_FFI_Error* opm_jax_cuda_call(XLA_FFI_CallFrame* frame) {
  if (frame->extension_start != NULL &&
      frame->extension_start->type == XLA_FFI_Extension_Metadata)
    return metadata(frame);
  const XLA_FFI_Api* api = frame->api;
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  if (bridge == NULL)
    return ffi_error(api, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                     "opmarket_cuda: the bridge table was not set (opm_jax_init)");
  const XLA_FFI_Scalar* k = scalar_attr(&frame->attrs, "opm_kernel");
  if (k == NULL || k->dtype != XLA_FFI_DataType_S64 || *(const int64_t*)k->value == 0)
    return ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "opmarket_cuda: the call has no int64 opm_kernel attribute");
  if (frame->args.size + frame->rets.size > MAX_ARGS)
    return ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "opmarket_cuda: too many inputs and outputs");
  if (api->struct_size < offsetof(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get) + sizeof(void*))
    return ffi_error(api, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                     "opmarket_cuda: this XLA's FFI API has no device ordinal getter");
  OPM_CudaKernelFn entry = (OPM_CudaKernelFn)(uintptr_t)*(const int64_t*)k->value;
  XLA_FFI_Stream_Get_Args stream = {XLA_FFI_Stream_Get_Args_STRUCT_SIZE, NULL, frame->ctx,
                                    NULL};
  XLA_FFI_Error* error = api->XLA_FFI_Stream_Get(&stream);
  if (error != NULL) return error;
  XLA_FFI_DeviceOrdinal_Get_Args ordinal = {XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE, NULL,
                                            frame->ctx, 0};
  error = api->XLA_FFI_DeviceOrdinal_Get(&ordinal);
  if (error != NULL) return error;

  OPM_Status* status = thread_status();
  bridge->api->SetStatus(status, OPM_OK, "");
  Construction construction = {{&construction_ops}, &frame->attrs};
  Context context;
  context.base.ops = &context_ops;
  context.frame = frame;
  OPM_CudaKernelCall call = {sizeof(OPM_CudaKernelCall), OPM_CUDA_KERNEL_VERSION,
                             ordinal.device_ordinal, stream.stream, bridge->api, status,
                             &construction.base, &context.base,
                             0 /* flags: XLA's stream, no synchronisation */};
  entry(&call);
  if (bridge->api->GetCode(status) != OPM_OK) return cuda_status_error(api, status);
  return NULL;
}
