/* bench/bridge_jax.py's baseline: ZeroOut's C-ABI kernel behind an XLA FFI handler written
 * directly for it, as a JAX user would register it with jax.ffi.register_ffi_target: one
 * float32 input, one output, the kernel's state made once (preserve_index 0) before the
 * first call. No attributes are read per call. */
#include <stdint.h>
#include <string.h>

#include "opmarket/capi_bridge.h"
#include "xla/ffi/api/c_api.h"

static const OPMB_BridgeApi* bridge;
static const OPMB_Kernel* kernel;
static void* state;

static void attr_type(OPMB_KernelConstruction* c, const char* name, OPM_DataType* value,
                      OPM_Status* status) {
  (void)c, (void)name, (void)status;
  *value = 1; /* OPM_FLOAT */
}

static void attr_int(OPMB_KernelConstruction* c, const char* name, int64_t* value,
                     OPM_Status* status) {
  (void)c, (void)name, (void)status;
  *value = 0; /* preserve_index */
}

static const OPMB_KernelConstructionOps construction_ops = {
    sizeof(OPMB_KernelConstructionOps), attr_type, attr_int, NULL, NULL, NULL};

/* Makes the kernel's state; 0 on success. */
int bench_init(const OPMB_BridgeApi* api, const OPMB_Kernel* k) {
  bridge = api;
  kernel = k;
  OPMB_KernelConstruction construction = {&construction_ops};
  OPM_Status* status = api->api->NewStatus();
  state = api->kernel_create(k, &construction, status);
  int code = api->api->GetCode(status);
  api->api->DeleteStatus(status);
  return code;
}

typedef struct {
  OPMB_KernelContext base;
  XLA_FFI_CallFrame* frame;
  OPMB_Tensor in, out;
} Context;

static int num_inputs(OPMB_KernelContext* c) { (void)c; return 1; }
static int num_outputs(OPMB_KernelContext* c) { (void)c; return 1; }

static const OPMB_Tensor* get_input(OPMB_KernelContext* c, int i, OPM_Status* status) {
  (void)i, (void)status;
  Context* self = (Context*)c;
  const XLA_FFI_Buffer* b = (const XLA_FFI_Buffer*)self->frame->args.args[0];
  self->in = (OPMB_Tensor){1, (int32_t)b->rank, b->dims, b->data,
                           (size_t)b->dims[0] * sizeof(float)};
  return &self->in;
}

static const OPMB_Tensor* allocate_output(OPMB_KernelContext* c, int i, OPM_DataType dtype,
                                          const int64_t* dims, int num_dims,
                                          OPM_Status* status) {
  (void)i, (void)dtype, (void)dims, (void)num_dims, (void)status;
  Context* self = (Context*)c;
  const XLA_FFI_Buffer* b = (const XLA_FFI_Buffer*)self->frame->rets.rets[0];
  self->out = (OPMB_Tensor){1, (int32_t)b->rank, b->dims, b->data,
                            (size_t)b->dims[0] * sizeof(float)};
  return &self->out;
}

static const OPMB_KernelContextOps context_ops = {
    sizeof(OPMB_KernelContextOps), num_inputs, num_outputs, get_input, allocate_output};

XLA_FFI_Error* bench_zero_out(XLA_FFI_CallFrame* frame) {
  if (frame->extension_start != NULL &&
      frame->extension_start->type == XLA_FFI_Extension_Metadata) {
    XLA_FFI_Metadata_Extension* ext = (XLA_FFI_Metadata_Extension*)frame->extension_start;
    ext->metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
    ext->metadata->api_version.extension_start = NULL;
    ext->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
    ext->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
    ext->metadata->traits = 0;
    ext->metadata->state_type_id.type_id = 0;
    return NULL;
  }
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  static __thread OPM_Status* status;
  if (status == NULL) status = bridge->api->NewStatus();
  Context context = {{&context_ops}, frame, {0}, {0}};
  bridge->kernel_compute(kernel, state, &context.base, status);
  if (bridge->api->GetCode(status) == OPM_OK) return NULL;
  XLA_FFI_Error_Create_Args args;
  memset(&args, 0, sizeof args);
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = bridge->api->Message(status);
  args.errc = XLA_FFI_Error_Code_INTERNAL;
  return frame->api->XLA_FFI_Error_Create(&args);
}
