/* opmarket's TensorFlow shim: registers opmarket ops and kernels with TensorFlow through its
 * C op and kernel API (tensorflow/c/ops.h, tensorflow/c/kernels.h), when Python asks.
 *
 * TensorFlow's shape-inference and kernel-create callbacks carry no user data, so the
 * shim has a fixed table of trampolines (OPM_TF_SLOTS of each, generated below the
 * hand-written part by opmarket.tensorflow._build): trampoline N tells Python "slot N".
 * Kernels whose bodies are Python (numpy, pybind11) call back into Python per call; C-ABI
 * kernels (opmarket/c_api.h) run in the shim, on TensorFlow's tensors, with no Python; so do
 * GPU companions' device entries (opmarket/cuda_kernel.h), synchronizing (_shim_device.cc).
 *
 * The shim links the C/C++ runtime only: no Python, and no TensorFlow either. TensorFlow's
 * functions are found in the process's libtensorflow_framework when Python calls
 * opm_tf_bind (_tf_c_api.h), so one build serves every TensorFlow that has them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string> /* the device part's attrs */
#include <vector>

#include "_tf_c_api.h"

#include "opmarket/capi_bridge.h"
#include "opmarket/cuda_kernel.h" /* plain C: the device door's call, no CUDA */

#define OPM_TF_EXPORT __attribute__((visibility("default")))

/* The shim is C++ with C linkage (TensorFlow's own headers, which it was first written
 * against, declare their opaque types as C++ structs). */
extern "C" {

/* Finds TensorFlow's functions in the loaded TensorFlow: how many it lacks (their names in
 * `missing`), or -1 when no TensorFlow is loaded. Python calls it first, once. */
OPM_TF_EXPORT int32_t opm_tf_bind(char* missing, uint64_t cap) {
  return (int32_t)opm_tf_bind_api(missing, (size_t)cap);
}

typedef void (*opm_shape_cb)(int32_t slot, TF_ShapeInferenceContext* ctx, TF_Status* status);
typedef int64_t (*opm_create_cb)(int32_t slot, TF_OpKernelConstruction* ctx);
typedef void (*opm_compute_cb)(int64_t handle, TF_OpKernelContext* ctx);
typedef void (*opm_delete_cb)(int64_t handle);

static opm_shape_cb g_shape = NULL;
static opm_create_cb g_create = NULL;
static opm_compute_cb g_compute = NULL;
static opm_delete_cb g_delete = NULL;

/* Python installs its callbacks once; it clears them at exit, after which kernels that
 * TensorFlow still holds are dropped without calling back. */
OPM_TF_EXPORT void opm_tf_set_callbacks(opm_shape_cb shape, opm_create_cb create,
                                        opm_compute_cb compute, opm_delete_cb del) {
  g_shape = shape;
  g_create = create;
  g_compute = compute;
  g_delete = del;
}

/* ---- shape inference ------------------------------------------------------------------ */

static void shape_common(int32_t slot, TF_ShapeInferenceContext* ctx, TF_Status* status) {
  /* Every output starts unknown; the callback refines the ones it knows. */
  TF_ShapeInferenceContextSetUnknownShape(ctx, status);
  if (TF_GetCode(status) != TF_OK) return;
  if (g_shape == NULL) return;
  g_shape(slot, ctx, status);
}

/* Rank of input i (-1: unknown) and up to max dims (-1: unknown dim). */
OPM_TF_EXPORT int64_t opm_tf_input_shape(TF_ShapeInferenceContext* ctx, int i, int64_t* dims,
                                         int64_t max, TF_Status* status) {
  TF_ShapeHandle* h = TF_NewShapeHandle();
  TF_ShapeInferenceContextGetInput(ctx, i, h, status);
  int64_t rank = -1;
  if (TF_GetCode(status) == TF_OK && TF_ShapeInferenceContextRankKnown(ctx, h)) {
    rank = TF_ShapeInferenceContextRank(ctx, h);
    TF_DimensionHandle* d = TF_NewDimensionHandle();
    for (int64_t k = 0; k < rank && k < max; ++k) {
      TF_ShapeInferenceContextDim(ctx, h, k, d);
      dims[k] = TF_DimensionHandleValueKnown(d) ? TF_DimensionHandleValue(d) : -1;
    }
    TF_DeleteDimensionHandle(d);
  }
  TF_DeleteShapeHandle(h);
  return rank;
}

OPM_TF_EXPORT int64_t opm_tf_num_inputs(TF_ShapeInferenceContext* ctx) {
  return TF_ShapeInferenceContextNumInputs(ctx);
}

/* A type attr of the node (the only attrs TensorFlow's C shape API exposes). */
OPM_TF_EXPORT int32_t opm_tf_shape_attr_type(TF_ShapeInferenceContext* ctx, const char* name) {
  TF_Status* status = TF_NewStatus();
  TF_DataType t = TF_FLOAT;
  TF_ShapeInferenceContext_GetAttrType(ctx, name, &t, status);
  int32_t out = TF_GetCode(status) == TF_OK ? (int32_t)t : -1;
  TF_DeleteStatus(status);
  return out;
}

static TF_ShapeHandle* unknown_vector(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeHandle* unset = TF_NewShapeHandle(); /* no shape: WithRank makes [?] from it */
  TF_ShapeHandle* out = TF_NewShapeHandle();
  TF_ShapeInferenceContextWithRank(ctx, unset, 1, out, status);
  TF_DeleteShapeHandle(unset);
  return out;
}

/* Output i gets dims[0..rank) (-1: unknown dim); rank -1 leaves it unknown. */
OPM_TF_EXPORT void opm_tf_set_output_shape(TF_ShapeInferenceContext* ctx, int i, int64_t rank,
                                           const int64_t* dims, TF_Status* status) {
  if (rank < 0) return;
  TF_ShapeHandle* result = NULL;
  if (rank == 0) {
    result = TF_ShapeInferenceContextScalar(ctx);
  }
  for (int64_t k = 0; k < rank && TF_GetCode(status) == TF_OK; ++k) {
    TF_ShapeHandle* piece = dims[k] >= 0
                                ? TF_ShapeInferenceContextVectorFromSize(ctx, (size_t)dims[k])
                                : unknown_vector(ctx, status);
    if (result == NULL) {
      result = piece;
      continue;
    }
    TF_ShapeHandle* joined = TF_NewShapeHandle();
    TF_ShapeInferenceContextConcatenateShapes(ctx, result, piece, joined, status);
    TF_DeleteShapeHandle(result);
    TF_DeleteShapeHandle(piece);
    result = joined;
  }
  if (result != NULL) {
    if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, i, result, status);
    TF_DeleteShapeHandle(result);
  }
}

/* ---- op registration ------------------------------------------------------------------ */

static void (*shape_trampoline(int32_t slot))(TF_ShapeInferenceContext*, TF_Status*);
static void* (*create_trampoline(int32_t slot))(TF_OpKernelConstruction*);

/* Registers op `name` from REGISTER_OP spec strings (specs: inputs, outputs, attrs, each
 * list NULL-terminated); shape_slot >= 0 gives it the Python shape function of that slot. */
OPM_TF_EXPORT void opm_tf_register_op(const char* name, const char** inputs,
                                      const char** outputs, const char** attrs,
                                      int32_t flags, int32_t shape_slot, TF_Status* status) {
  TF_OpDefinitionBuilder* b = TF_NewOpDefinitionBuilder(name);
  for (const char** s = attrs; *s != NULL; ++s) TF_OpDefinitionBuilderAddAttr(b, *s);
  for (const char** s = inputs; *s != NULL; ++s) TF_OpDefinitionBuilderAddInput(b, *s);
  for (const char** s = outputs; *s != NULL; ++s) TF_OpDefinitionBuilderAddOutput(b, *s);
  if (flags & 1) TF_OpDefinitionBuilderSetIsStateful(b, 1);
  if (flags & 2) TF_OpDefinitionBuilderSetIsCommutative(b, 1);
  if (flags & 4) TF_OpDefinitionBuilderSetIsAggregate(b, 1);
  if (flags & 8) TF_OpDefinitionBuilderSetAllowsUninitializedInput(b, 1);
  if (shape_slot >= 0) {
    void (*fn)(TF_ShapeInferenceContext*, TF_Status*) = shape_trampoline(shape_slot);
    if (fn == NULL) {
      TF_DeleteOpDefinitionBuilder(b);
      TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "opmarket's TensorFlow shim: out of shape slots");
      return;
    }
    TF_OpDefinitionBuilderSetShapeInferenceFunction(b, fn);
  }
  TF_RegisterOpDefinition(b, status);
}

/* ---- kernels with a Python body ------------------------------------------------------- */

static void* native_create(int32_t slot, TF_OpKernelConstruction* ctx);
static void* device_create(int32_t slot, TF_OpKernelConstruction* ctx);

static void* create_common(int32_t slot, TF_OpKernelConstruction* ctx) {
  void* native = native_create(slot, ctx);
  if (native != NULL) return native;
  void* device = device_create(slot, ctx);
  if (device != NULL) return device;
  if (g_create == NULL) return NULL;
  int64_t handle = g_create(slot, ctx);
  if (handle == 0) return NULL;
  int64_t* state = (int64_t*)malloc(sizeof *state);
  if (state != NULL) *state = handle;
  return state;
}

static void py_compute(void* state, TF_OpKernelContext* ctx) {
  if (state == NULL || g_compute == NULL) {
    TF_Status* s = TF_NewStatus();
    TF_SetStatus(s, TF_FAILED_PRECONDITION, "opmarket: the kernel was not created");
    TF_OpKernelContext_Failure(ctx, s);
    TF_DeleteStatus(s);
    return;
  }
  g_compute(*(int64_t*)state, ctx);
}

static void py_delete(void* state) {
  if (state == NULL) return;
  if (g_delete != NULL) g_delete(*(int64_t*)state);
  free(state);
}

static void add_constraints(TF_KernelBuilder* b, const char** type_attrs, const int32_t* dtypes,
                            int32_t n, TF_Status* status) {
  for (int32_t k = 0; k < n && TF_GetCode(status) == TF_OK; ++k) {
    TF_KernelBuilder_TypeConstraint(b, type_attrs[k], (TF_DataType)dtypes[k], status);
  }
}

/* Registers builder b as kernel_name, with its constraints, label and priority (every kind of
 * kernel the shim registers ends here). */
static void register_builder(const char* kernel_name, TF_KernelBuilder* b,
                             const char** type_attrs, const int32_t* dtypes, int32_t n,
                             const char* label, int32_t priority, TF_Status* status) {
  add_constraints(b, type_attrs, dtypes, n, status);
  if (TF_GetCode(status) != TF_OK) {
    TF_DeleteKernelBuilder(b);
    return;
  }
  if (label != NULL && label[0] != '\0') TF_KernelBuilder_Label(b, label);
  TF_KernelBuilder_Priority(b, priority);
  TF_RegisterKernelBuilder(kernel_name, b, status);
}

/* A kernel whose create (slot), compute and delete call Python. Constraints are n pairs
 * (type attr, dtype); an attr listed several times allows each dtype. */
OPM_TF_EXPORT void opm_tf_register_python_kernel(const char* kernel_name, const char* op,
                                                 const char* device, int32_t slot,
                                                 const char** type_attrs, const int32_t* dtypes,
                                                 int32_t n, const char* label, int32_t priority,
                                                 TF_Status* status) {
  void* (*create)(TF_OpKernelConstruction*) = create_trampoline(slot);
  if (create == NULL) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "opmarket's TensorFlow shim: out of kernel slots");
    return;
  }
  register_builder(kernel_name, TF_NewKernelBuilder(op, device, create, &py_compute, &py_delete),
                   type_attrs, dtypes, n, label, priority, status);
}

/* ---- what a Python body reads and writes ---------------------------------------------- */

OPM_TF_EXPORT TF_Buffer* opm_tf_node_def(TF_OpKernelConstruction* ctx, TF_Status* status) {
  return TF_OpKernelConstruction_GetNodeDef(ctx, status);
}

OPM_TF_EXPORT void opm_tf_construction_failure(TF_OpKernelConstruction* ctx, int32_t code,
                                               const char* message) {
  TF_Status* s = TF_NewStatus();
  TF_SetStatus(s, (TF_Code)code, message);
  TF_OpKernelConstruction_Failure(ctx, s);
  TF_DeleteStatus(s);
}

OPM_TF_EXPORT void opm_tf_failure(TF_OpKernelContext* ctx, int32_t code, const char* message) {
  TF_Status* s = TF_NewStatus();
  TF_SetStatus(s, (TF_Code)code, message);
  TF_OpKernelContext_Failure(ctx, s);
  TF_DeleteStatus(s);
}

OPM_TF_EXPORT int32_t opm_tf_num_kernel_inputs(TF_OpKernelContext* ctx) {
  return TF_NumInputs(ctx);
}

#define OPM_TF_MAX_DIMS 16

typedef struct {
  int32_t dtype;
  int32_t ndim;
  int64_t dims[OPM_TF_MAX_DIMS];
  void* data;
  uint64_t nbytes;
  TF_Tensor* tensor; /* released by opm_tf_release_inputs */
} opm_tf_tensor_info;

/* Fills infos[0..n) with the kernel's inputs; 0 on success. */
OPM_TF_EXPORT int32_t opm_tf_inputs(TF_OpKernelContext* ctx, opm_tf_tensor_info* infos,
                                    int32_t n, TF_Status* status) {
  for (int32_t i = 0; i < n; ++i) infos[i].tensor = NULL;
  for (int32_t i = 0; i < n; ++i) {
    TF_Tensor* t = NULL;
    TF_GetInput(ctx, i, &t, status);
    if (TF_GetCode(status) != TF_OK) return -1;
    infos[i].tensor = t;
    infos[i].dtype = (int32_t)TF_TensorType(t);
    int nd = TF_NumDims(t);
    if (nd > OPM_TF_MAX_DIMS) {
      TF_SetStatus(status, TF_UNIMPLEMENTED, "opmarket: a tensor of more than 16 dimensions");
      return -1;
    }
    infos[i].ndim = nd;
    for (int k = 0; k < nd; ++k) infos[i].dims[k] = TF_Dim(t, k);
    infos[i].data = TF_TensorData(t);
    infos[i].nbytes = (uint64_t)TF_TensorByteSize(t);
  }
  return 0;
}

OPM_TF_EXPORT void opm_tf_release_inputs(opm_tf_tensor_info* infos, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    if (infos[i].tensor != NULL) TF_DeleteTensor(infos[i].tensor);
    infos[i].tensor = NULL;
  }
}

/* Allocates output i and copies nbytes of data into it. */
OPM_TF_EXPORT void opm_tf_set_output(TF_OpKernelContext* ctx, int32_t i, int32_t dtype,
                                     const int64_t* dims, int32_t ndim, const void* data,
                                     uint64_t nbytes, TF_Status* status) {
  TF_Tensor* t = TF_AllocateOutput(ctx, i, (TF_DataType)dtype, dims, ndim, (size_t)nbytes,
                                   status);
  if (TF_GetCode(status) != TF_OK) return;
  if (nbytes > 0 && TF_TensorByteSize(t) == nbytes) memcpy(TF_TensorData(t), data, nbytes);
  else if (TF_TensorByteSize(t) != nbytes)
    TF_SetStatus(status, TF_INTERNAL, "opmarket: output size does not match its shape");
  TF_DeleteTensor(t);
}

OPM_TF_EXPORT const void* opm_tf_buffer_data(TF_Buffer* b) { return b->data; }
OPM_TF_EXPORT uint64_t opm_tf_buffer_length(TF_Buffer* b) { return (uint64_t)b->length; }
