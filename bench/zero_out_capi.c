/* bench/dispatch.py's C-ABI kernel: ZeroOut on int32 in plain C against opmarket/c_api.h,
 * declaring Bench>ZeroOutC with the spec of the benchmark's numpy op. */
#include <stdlib.h>
#include <string.h>

#include <opmarket/c_api.h>

/* One status per kernel instance, made in create: compute allocates nothing of its own. */
typedef struct {
  int64_t preserve_index;
  OPM_Status* status;
} zero_out;

static void* create(OPM_OpKernelConstruction* ctx) {
  zero_out* k = (zero_out*)calloc(1, sizeof *k);
  k->status = OPM_NewStatus();
  OPM_OpKernelConstruction_GetAttrInt64(ctx, "preserve_index", &k->preserve_index, k->status);
  if (OPM_GetCode(k->status) != OPM_OK) OPM_OpKernelConstruction_Failure(ctx, k->status);
  return k;
}

static void destroy(void* kernel) {
  zero_out* k = (zero_out*)kernel;
  OPM_DeleteStatus(k->status);
  free(k);
}

static void compute(void* kernel, OPM_OpKernelContext* ctx) {
  zero_out* k = (zero_out*)kernel;
  OPM_Tensor* x = OPM_GetInput(ctx, 0, k->status);
  if (OPM_GetCode(k->status) != OPM_OK) {
    OPM_OpKernelContext_Failure(ctx, k->status);
    return;
  }
  int64_t n = OPM_Dim(x, 0);
  if (k->preserve_index >= n) {
    OPM_SetStatus(k->status, OPM_INVALID_ARGUMENT, "preserve_index out of range");
    OPM_OpKernelContext_Failure(ctx, k->status);
    return;
  }
  OPM_Tensor* out = OPM_AllocateOutput(ctx, 0, OPM_INT32, &n, 1, k->status);
  if (OPM_GetCode(k->status) != OPM_OK) {
    OPM_OpKernelContext_Failure(ctx, k->status);
    return;
  }
  int32_t* o = (int32_t*)OPM_TensorData(out);
  memset(o, 0, (size_t)n * sizeof *o);
  o[k->preserve_index] = ((const int32_t*)OPM_TensorData(x))[k->preserve_index];
}

static void init(OPM_Status* status) {
  OPM_OpDefinitionBuilder* b = OPM_NewOpDefinitionBuilder("Bench>ZeroOutC");
  OPM_OpDefinitionBuilderAddInput(b, "to_zero: T");
  OPM_OpDefinitionBuilderAddOutput(b, "zeroed: T");
  OPM_OpDefinitionBuilderAddAttr(b, "T: {float, double, int32} = DT_INT32");
  OPM_OpDefinitionBuilderAddAttr(b, "preserve_index: int >= 0 = 0");
  OPM_RegisterOpDefinition(b, status);
  if (OPM_GetCode(status) != OPM_OK) return;
  OPM_KernelBuilder* kb = OPM_NewKernelBuilder("Bench>ZeroOutC", "CPU", &create, &compute,
                                               &destroy);
  OPM_KernelBuilder_TypeConstraint(kb, "T", OPM_INT32, status);
  OPM_RegisterKernelBuilder("ZeroOutC", kb, status);
}

OPM_PLUGIN_INIT(init)
