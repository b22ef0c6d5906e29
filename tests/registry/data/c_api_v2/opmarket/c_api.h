/* opmarket/c_api.h: the ABI-stable C API for opmarket ops and kernels (C99).
 *
 * TensorFlow's kernel and op registration C API (the modular-TensorFlow RFC) in opmarket's
 * terms. A plugin is a plain shared library, built by any C compiler against this header,
 * that links neither Python nor a C++ runtime; opmarket dlopens it, hands its one exported
 * entry point the host's function table, and the plugin registers ops (REGISTER_OP spec
 * strings) and kernels through it. Nothing here relies on static initialisation.
 *
 * The stability promise (docs/c-api.md): a new version of this header only appends. Types
 * stay opaque; OPM_Api and OPM_PluginInit carry their size and gain fields at their end;
 * enum values and function signatures never change; nothing the host allocates is freed by
 * the plugin's allocator or the other way round (statuses, builders, tensors and shape
 * handles are created and destroyed by the host). A plugin built against version N loads on
 * every host of version >= N; a host refuses a plugin that needs a newer version.
 *
 * Writing a plugin:
 *
 *   #include <opmarket/c_api.h>
 *   static void init(OPM_Status* status) {
 *     OPM_OpDefinitionBuilder* b = OPM_NewOpDefinitionBuilder("Bitcast");
 *     OPM_OpDefinitionBuilderAddInput(b, "input: T");
 *     ...
 *     OPM_RegisterOpDefinition(b, status);
 *   }
 *   OPM_PLUGIN_INIT(init)
 */
#ifndef OPMARKET_C_API_H_
#define OPMARKET_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header. Version 2 appended TensorElementCount to OPM_Api. */
#define OPM_C_API_VERSION 2

/* The one symbol a plugin library exports (OPM_PLUGIN_INIT defines it). */
#define OPM_PLUGIN_ENTRY_POINT "OPM_InitPlugin"

/* --- data types: TensorFlow's DataType numbers --------------------------------------- */
typedef int32_t OPM_DataType;
enum {
  OPM_FLOAT = 1, OPM_DOUBLE = 2, OPM_INT32 = 3, OPM_UINT8 = 4, OPM_INT16 = 5,
  OPM_INT8 = 6, OPM_STRING = 7, OPM_COMPLEX64 = 8, OPM_INT64 = 9, OPM_BOOL = 10,
  OPM_BFLOAT16 = 14, OPM_UINT16 = 17, OPM_COMPLEX128 = 18, OPM_HALF = 19,
  OPM_UINT32 = 22, OPM_UINT64 = 23
};

/* --- status codes: TensorFlow's (absl's) codes --------------------------------------- */
typedef int32_t OPM_Code;
enum {
  OPM_OK = 0, OPM_CANCELLED = 1, OPM_UNKNOWN = 2, OPM_INVALID_ARGUMENT = 3,
  OPM_DEADLINE_EXCEEDED = 4, OPM_NOT_FOUND = 5, OPM_ALREADY_EXISTS = 6,
  OPM_PERMISSION_DENIED = 7, OPM_RESOURCE_EXHAUSTED = 8, OPM_FAILED_PRECONDITION = 9,
  OPM_ABORTED = 10, OPM_OUT_OF_RANGE = 11, OPM_UNIMPLEMENTED = 12, OPM_INTERNAL = 13,
  OPM_UNAVAILABLE = 14, OPM_DATA_LOSS = 15, OPM_UNAUTHENTICATED = 16
};

/* --- opaque types, owned by the host -------------------------------------------------- */
typedef struct OPM_Status OPM_Status;
typedef struct OPM_OpDefinitionBuilder OPM_OpDefinitionBuilder;
typedef struct OPM_ShapeInferenceContext OPM_ShapeInferenceContext;
typedef struct OPM_ShapeHandle OPM_ShapeHandle;
typedef struct OPM_KernelBuilder OPM_KernelBuilder;
typedef struct OPM_OpKernelConstruction OPM_OpKernelConstruction;
typedef struct OPM_OpKernelContext OPM_OpKernelContext;
typedef struct OPM_Tensor OPM_Tensor;

typedef void (*OPM_ShapeInferenceFn)(OPM_ShapeInferenceContext* ctx, OPM_Status* status);
typedef void* (*OPM_KernelCreateFn)(OPM_OpKernelConstruction* ctx);
typedef void (*OPM_KernelComputeFn)(void* kernel, OPM_OpKernelContext* ctx);
typedef void (*OPM_KernelDeleteFn)(void* kernel);

/* Op flags for OPM_OpDefinitionBuilderSetFlag. */
enum {
  OPM_OP_STATEFUL = 1, OPM_OP_COMMUTATIVE = 2, OPM_OP_AGGREGATE = 3,
  OPM_OP_ALLOWS_UNINITIALIZED_INPUT = 4
};

/* The host's function table. Fields are only ever appended; struct_size says how many this
 * host has. Unknown dims are -1 and an unknown rank is -1 in shape inference. */
typedef struct OPM_Api {
  size_t struct_size;
  uint32_t api_version;

  /* statuses */
  OPM_Status* (*NewStatus)(void);
  void (*DeleteStatus)(OPM_Status* s);
  void (*SetStatus)(OPM_Status* s, OPM_Code code, const char* message);
  OPM_Code (*GetCode)(const OPM_Status* s);
  const char* (*Message)(const OPM_Status* s); /* valid until the status changes */

  /* data types */
  size_t (*DataTypeSize)(OPM_DataType dtype); /* 0 for a type without a fixed size */

  /* ops: REGISTER_OP spec strings, parsed by opmarket's spec parser on registration */
  OPM_OpDefinitionBuilder* (*NewOpDefinitionBuilder)(const char* op_name);
  void (*OpDefinitionBuilderAddInput)(OPM_OpDefinitionBuilder* b, const char* spec);
  void (*OpDefinitionBuilderAddOutput)(OPM_OpDefinitionBuilder* b, const char* spec);
  void (*OpDefinitionBuilderAddAttr)(OPM_OpDefinitionBuilder* b, const char* spec);
  void (*OpDefinitionBuilderSetDoc)(OPM_OpDefinitionBuilder* b, const char* doc);
  void (*OpDefinitionBuilderSetFlag)(OPM_OpDefinitionBuilder* b, int flag, int value);
  void (*OpDefinitionBuilderSetShapeInferenceFunction)(OPM_OpDefinitionBuilder* b,
                                                       OPM_ShapeInferenceFn fn);
  /* Registers and frees the builder; status says why an op was refused. */
  void (*RegisterOpDefinition)(OPM_OpDefinitionBuilder* b, OPM_Status* status);
  void (*DeleteOpDefinitionBuilder)(OPM_OpDefinitionBuilder* b);

  /* shape inference: handles live until the shape function returns */
  int64_t (*ShapeInferenceContextNumInputs)(OPM_ShapeInferenceContext* ctx);
  OPM_ShapeHandle* (*ShapeInferenceContextGetInput)(OPM_ShapeInferenceContext* ctx, int i,
                                                     OPM_Status* status);
  int64_t (*ShapeInferenceContextRank)(OPM_ShapeInferenceContext* ctx,
                                       const OPM_ShapeHandle* shape); /* -1: unknown */
  int64_t (*ShapeInferenceContextDim)(OPM_ShapeInferenceContext* ctx,
                                      const OPM_ShapeHandle* shape, int64_t i); /* -1 */
  OPM_ShapeHandle* (*ShapeInferenceContextWithRank)(OPM_ShapeInferenceContext* ctx,
                                                     const OPM_ShapeHandle* shape,
                                                     int64_t rank, OPM_Status* status);
  OPM_ShapeHandle* (*ShapeInferenceContextWithRankAtLeast)(OPM_ShapeInferenceContext* ctx,
                                                            const OPM_ShapeHandle* shape,
                                                            int64_t rank, OPM_Status* status);
  OPM_ShapeHandle* (*ShapeInferenceContextMakeShape)(OPM_ShapeInferenceContext* ctx,
                                                      const int64_t* dims, int64_t rank);
  OPM_ShapeHandle* (*ShapeInferenceContextUnknownShape)(OPM_ShapeInferenceContext* ctx);
  void (*ShapeInferenceContextSetOutput)(OPM_ShapeInferenceContext* ctx, int i,
                                         const OPM_ShapeHandle* shape, OPM_Status* status);
  void (*ShapeInferenceContext_GetAttrType)(OPM_ShapeInferenceContext* ctx,
                                            const char* attr_name, OPM_DataType* value,
                                            OPM_Status* status);
  void (*ShapeInferenceContext_GetAttrInt64)(OPM_ShapeInferenceContext* ctx,
                                             const char* attr_name, int64_t* value,
                                             OPM_Status* status);

  /* kernels */
  OPM_KernelBuilder* (*NewKernelBuilder)(const char* op_name, const char* device_name,
                                         OPM_KernelCreateFn create,
                                         OPM_KernelComputeFn compute,
                                         OPM_KernelDeleteFn delete_fn);
  /* Adds dtype to the types the kernel takes for the type attr attr_name. */
  void (*KernelBuilder_TypeConstraint)(OPM_KernelBuilder* b, const char* attr_name,
                                       OPM_DataType dtype, OPM_Status* status);
  void (*KernelBuilder_HostMemory)(OPM_KernelBuilder* b, const char* arg_name);
  void (*KernelBuilder_Priority)(OPM_KernelBuilder* b, int32_t priority);
  void (*KernelBuilder_Label)(OPM_KernelBuilder* b, const char* label);
  /* Registers and frees the builder. */
  void (*RegisterKernelBuilder)(const char* kernel_name, OPM_KernelBuilder* b,
                                OPM_Status* status);
  void (*DeleteKernelBuilder)(OPM_KernelBuilder* b);

  /* in create: the node's attrs; a failure makes the call fail with the status */
  void (*OpKernelConstruction_GetAttrType)(OPM_OpKernelConstruction* ctx,
                                           const char* attr_name, OPM_DataType* value,
                                           OPM_Status* status);
  void (*OpKernelConstruction_GetAttrInt32)(OPM_OpKernelConstruction* ctx,
                                            const char* attr_name, int32_t* value,
                                            OPM_Status* status);
  void (*OpKernelConstruction_GetAttrInt64)(OPM_OpKernelConstruction* ctx,
                                            const char* attr_name, int64_t* value,
                                            OPM_Status* status);
  void (*OpKernelConstruction_GetAttrFloat)(OPM_OpKernelConstruction* ctx,
                                            const char* attr_name, float* value,
                                            OPM_Status* status);
  void (*OpKernelConstruction_GetAttrBool)(OPM_OpKernelConstruction* ctx,
                                           const char* attr_name, uint8_t* value,
                                           OPM_Status* status);
  /* Copies at most max_length bytes (no terminator added); *length gets the full length. */
  void (*OpKernelConstruction_GetAttrString)(OPM_OpKernelConstruction* ctx,
                                             const char* attr_name, char* value,
                                             size_t max_length, size_t* length,
                                             OPM_Status* status);
  void (*OpKernelConstruction_Failure)(OPM_OpKernelConstruction* ctx, OPM_Status* status);

  /* in compute */
  int (*NumInputs)(OPM_OpKernelContext* ctx);
  int (*NumOutputs)(OPM_OpKernelContext* ctx);
  /* A borrowed tensor, valid until compute returns. */
  OPM_Tensor* (*GetInput)(OPM_OpKernelContext* ctx, int i, OPM_Status* status);
  /* A new, uninitialised output, owned by the host, valid until compute returns. */
  OPM_Tensor* (*AllocateOutput)(OPM_OpKernelContext* ctx, int i, OPM_DataType dtype,
                                const int64_t* dims, int num_dims, OPM_Status* status);
  void (*OpKernelContext_Failure)(OPM_OpKernelContext* ctx, OPM_Status* status);

  /* tensors: C-contiguous, row-major */
  OPM_DataType (*TensorType)(const OPM_Tensor* t);
  int (*NumDims)(const OPM_Tensor* t);
  int64_t (*Dim)(const OPM_Tensor* t, int i);
  void* (*TensorData)(const OPM_Tensor* t);
  size_t (*TensorByteSize)(const OPM_Tensor* t);

  /* --- version 2 ------------------------------------------------------------------- */
  int64_t (*TensorElementCount)(const OPM_Tensor* t);
} OPM_Api;

/* What the host hands the entry point. Fields are only ever appended. */
typedef struct OPM_PluginInit {
  size_t struct_size;
  uint32_t host_api_version;   /* in: the newest version the host implements */
  const OPM_Api* api;          /* in */
  OPM_Status* status;          /* in: set it to fail the load with a message */
  uint32_t plugin_api_version; /* out: the version the plugin was built against */
} OPM_PluginInit;

typedef void (*OPM_InitPluginFn)(OPM_PluginInit* init);

#if defined(_WIN32)
#define OPM_EXPORT __declspec(dllexport)
#else
#define OPM_EXPORT __attribute__((visibility("default")))
#endif
#ifdef __cplusplus
#define OPM_EXTERN_C extern "C"
#else
#define OPM_EXTERN_C
#endif

/* The table the calls below go through: set by the entry point, one per library. */
#if defined(__GNUC__)
extern const OPM_Api* OPM_api __attribute__((visibility("hidden")));
#else
extern const OPM_Api* OPM_api;
#endif

/* OPM_PLUGIN_INIT(fn): define the entry point, which states this header's version, stops
 * there on a host too old for it, and otherwise calls fn(status) to register. */
#define OPM_PLUGIN_INIT(fn)                                                        \
  const OPM_Api* OPM_api = 0;                                                      \
  OPM_EXTERN_C OPM_EXPORT void OPM_InitPlugin(OPM_PluginInit* opm_init_) {         \
    opm_init_->plugin_api_version = OPM_C_API_VERSION;                             \
    if (opm_init_->host_api_version < OPM_C_API_VERSION) return;                   \
    if (!opm_init_->api || opm_init_->api->struct_size < sizeof(OPM_Api)) return;  \
    OPM_api = opm_init_->api;                                                      \
    fn(opm_init_->status);                                                         \
  }

/* --- the calls, in the RFC's names ---------------------------------------------------- */
static inline OPM_Status* OPM_NewStatus(void) { return OPM_api->NewStatus(); }
static inline void OPM_DeleteStatus(OPM_Status* s) { OPM_api->DeleteStatus(s); }
static inline void OPM_SetStatus(OPM_Status* s, OPM_Code code, const char* message) {
  OPM_api->SetStatus(s, code, message);
}
static inline OPM_Code OPM_GetCode(const OPM_Status* s) { return OPM_api->GetCode(s); }
static inline const char* OPM_Message(const OPM_Status* s) { return OPM_api->Message(s); }
static inline size_t OPM_DataTypeSize(OPM_DataType t) { return OPM_api->DataTypeSize(t); }

static inline OPM_OpDefinitionBuilder* OPM_NewOpDefinitionBuilder(const char* op_name) {
  return OPM_api->NewOpDefinitionBuilder(op_name);
}
static inline void OPM_OpDefinitionBuilderAddInput(OPM_OpDefinitionBuilder* b,
                                                   const char* spec) {
  OPM_api->OpDefinitionBuilderAddInput(b, spec);
}
static inline void OPM_OpDefinitionBuilderAddOutput(OPM_OpDefinitionBuilder* b,
                                                    const char* spec) {
  OPM_api->OpDefinitionBuilderAddOutput(b, spec);
}
static inline void OPM_OpDefinitionBuilderAddAttr(OPM_OpDefinitionBuilder* b,
                                                  const char* spec) {
  OPM_api->OpDefinitionBuilderAddAttr(b, spec);
}
static inline void OPM_OpDefinitionBuilderSetDoc(OPM_OpDefinitionBuilder* b, const char* doc) {
  OPM_api->OpDefinitionBuilderSetDoc(b, doc);
}
static inline void OPM_OpDefinitionBuilderSetIsStateful(OPM_OpDefinitionBuilder* b, int v) {
  OPM_api->OpDefinitionBuilderSetFlag(b, OPM_OP_STATEFUL, v);
}
static inline void OPM_OpDefinitionBuilderSetIsCommutative(OPM_OpDefinitionBuilder* b, int v) {
  OPM_api->OpDefinitionBuilderSetFlag(b, OPM_OP_COMMUTATIVE, v);
}
static inline void OPM_OpDefinitionBuilderSetIsAggregate(OPM_OpDefinitionBuilder* b, int v) {
  OPM_api->OpDefinitionBuilderSetFlag(b, OPM_OP_AGGREGATE, v);
}
static inline void OPM_OpDefinitionBuilderSetAllowsUninitializedInput(
    OPM_OpDefinitionBuilder* b, int v) {
  OPM_api->OpDefinitionBuilderSetFlag(b, OPM_OP_ALLOWS_UNINITIALIZED_INPUT, v);
}
static inline void OPM_OpDefinitionBuilderSetShapeInferenceFunction(
    OPM_OpDefinitionBuilder* b, OPM_ShapeInferenceFn fn) {
  OPM_api->OpDefinitionBuilderSetShapeInferenceFunction(b, fn);
}
static inline void OPM_RegisterOpDefinition(OPM_OpDefinitionBuilder* b, OPM_Status* status) {
  OPM_api->RegisterOpDefinition(b, status);
}
static inline void OPM_DeleteOpDefinitionBuilder(OPM_OpDefinitionBuilder* b) {
  OPM_api->DeleteOpDefinitionBuilder(b);
}

static inline int64_t OPM_ShapeInferenceContextNumInputs(OPM_ShapeInferenceContext* ctx) {
  return OPM_api->ShapeInferenceContextNumInputs(ctx);
}
static inline OPM_ShapeHandle* OPM_ShapeInferenceContextGetInput(
    OPM_ShapeInferenceContext* ctx, int i, OPM_Status* status) {
  return OPM_api->ShapeInferenceContextGetInput(ctx, i, status);
}
static inline int64_t OPM_ShapeInferenceContextRank(OPM_ShapeInferenceContext* ctx,
                                                    const OPM_ShapeHandle* s) {
  return OPM_api->ShapeInferenceContextRank(ctx, s);
}
static inline int64_t OPM_ShapeInferenceContextDim(OPM_ShapeInferenceContext* ctx,
                                                   const OPM_ShapeHandle* s, int64_t i) {
  return OPM_api->ShapeInferenceContextDim(ctx, s, i);
}
static inline OPM_ShapeHandle* OPM_ShapeInferenceContextWithRank(
    OPM_ShapeInferenceContext* ctx, const OPM_ShapeHandle* s, int64_t rank,
    OPM_Status* status) {
  return OPM_api->ShapeInferenceContextWithRank(ctx, s, rank, status);
}
static inline OPM_ShapeHandle* OPM_ShapeInferenceContextWithRankAtLeast(
    OPM_ShapeInferenceContext* ctx, const OPM_ShapeHandle* s, int64_t rank,
    OPM_Status* status) {
  return OPM_api->ShapeInferenceContextWithRankAtLeast(ctx, s, rank, status);
}
static inline OPM_ShapeHandle* OPM_ShapeInferenceContextMakeShape(
    OPM_ShapeInferenceContext* ctx, const int64_t* dims, int64_t rank) {
  return OPM_api->ShapeInferenceContextMakeShape(ctx, dims, rank);
}
static inline OPM_ShapeHandle* OPM_ShapeInferenceContextUnknownShape(
    OPM_ShapeInferenceContext* ctx) {
  return OPM_api->ShapeInferenceContextUnknownShape(ctx);
}
static inline void OPM_ShapeInferenceContextSetOutput(OPM_ShapeInferenceContext* ctx, int i,
                                                      const OPM_ShapeHandle* s,
                                                      OPM_Status* status) {
  OPM_api->ShapeInferenceContextSetOutput(ctx, i, s, status);
}
static inline void OPM_ShapeInferenceContext_GetAttrType(OPM_ShapeInferenceContext* ctx,
                                                         const char* name, OPM_DataType* v,
                                                         OPM_Status* status) {
  OPM_api->ShapeInferenceContext_GetAttrType(ctx, name, v, status);
}
static inline void OPM_ShapeInferenceContext_GetAttrInt64(OPM_ShapeInferenceContext* ctx,
                                                          const char* name, int64_t* v,
                                                          OPM_Status* status) {
  OPM_api->ShapeInferenceContext_GetAttrInt64(ctx, name, v, status);
}

static inline OPM_KernelBuilder* OPM_NewKernelBuilder(const char* op_name,
                                                      const char* device_name,
                                                      OPM_KernelCreateFn create,
                                                      OPM_KernelComputeFn compute,
                                                      OPM_KernelDeleteFn delete_fn) {
  return OPM_api->NewKernelBuilder(op_name, device_name, create, compute, delete_fn);
}
static inline void OPM_KernelBuilder_TypeConstraint(OPM_KernelBuilder* b, const char* attr,
                                                    OPM_DataType dtype, OPM_Status* status) {
  OPM_api->KernelBuilder_TypeConstraint(b, attr, dtype, status);
}
static inline void OPM_KernelBuilder_HostMemory(OPM_KernelBuilder* b, const char* arg) {
  OPM_api->KernelBuilder_HostMemory(b, arg);
}
static inline void OPM_KernelBuilder_Priority(OPM_KernelBuilder* b, int32_t priority) {
  OPM_api->KernelBuilder_Priority(b, priority);
}
static inline void OPM_KernelBuilder_Label(OPM_KernelBuilder* b, const char* label) {
  OPM_api->KernelBuilder_Label(b, label);
}
static inline void OPM_RegisterKernelBuilder(const char* name, OPM_KernelBuilder* b,
                                             OPM_Status* status) {
  OPM_api->RegisterKernelBuilder(name, b, status);
}
static inline void OPM_DeleteKernelBuilder(OPM_KernelBuilder* b) {
  OPM_api->DeleteKernelBuilder(b);
}

static inline void OPM_OpKernelConstruction_GetAttrType(OPM_OpKernelConstruction* ctx,
                                                        const char* name, OPM_DataType* v,
                                                        OPM_Status* status) {
  OPM_api->OpKernelConstruction_GetAttrType(ctx, name, v, status);
}
static inline void OPM_OpKernelConstruction_GetAttrInt32(OPM_OpKernelConstruction* ctx,
                                                         const char* name, int32_t* v,
                                                         OPM_Status* status) {
  OPM_api->OpKernelConstruction_GetAttrInt32(ctx, name, v, status);
}
static inline void OPM_OpKernelConstruction_GetAttrInt64(OPM_OpKernelConstruction* ctx,
                                                         const char* name, int64_t* v,
                                                         OPM_Status* status) {
  OPM_api->OpKernelConstruction_GetAttrInt64(ctx, name, v, status);
}
static inline void OPM_OpKernelConstruction_GetAttrFloat(OPM_OpKernelConstruction* ctx,
                                                         const char* name, float* v,
                                                         OPM_Status* status) {
  OPM_api->OpKernelConstruction_GetAttrFloat(ctx, name, v, status);
}
static inline void OPM_OpKernelConstruction_GetAttrBool(OPM_OpKernelConstruction* ctx,
                                                        const char* name, uint8_t* v,
                                                        OPM_Status* status) {
  OPM_api->OpKernelConstruction_GetAttrBool(ctx, name, v, status);
}
static inline void OPM_OpKernelConstruction_GetAttrString(OPM_OpKernelConstruction* ctx,
                                                          const char* name, char* v,
                                                          size_t max_length, size_t* length,
                                                          OPM_Status* status) {
  OPM_api->OpKernelConstruction_GetAttrString(ctx, name, v, max_length, length, status);
}
static inline void OPM_OpKernelConstruction_Failure(OPM_OpKernelConstruction* ctx,
                                                    OPM_Status* status) {
  OPM_api->OpKernelConstruction_Failure(ctx, status);
}

static inline int OPM_NumInputs(OPM_OpKernelContext* ctx) { return OPM_api->NumInputs(ctx); }
static inline int OPM_NumOutputs(OPM_OpKernelContext* ctx) { return OPM_api->NumOutputs(ctx); }
static inline OPM_Tensor* OPM_GetInput(OPM_OpKernelContext* ctx, int i, OPM_Status* status) {
  return OPM_api->GetInput(ctx, i, status);
}
static inline OPM_Tensor* OPM_AllocateOutput(OPM_OpKernelContext* ctx, int i,
                                             OPM_DataType dtype, const int64_t* dims,
                                             int num_dims, OPM_Status* status) {
  return OPM_api->AllocateOutput(ctx, i, dtype, dims, num_dims, status);
}
static inline void OPM_OpKernelContext_Failure(OPM_OpKernelContext* ctx, OPM_Status* status) {
  OPM_api->OpKernelContext_Failure(ctx, status);
}

static inline OPM_DataType OPM_TensorType(const OPM_Tensor* t) { return OPM_api->TensorType(t); }
static inline int OPM_NumDims(const OPM_Tensor* t) { return OPM_api->NumDims(t); }
static inline int64_t OPM_Dim(const OPM_Tensor* t, int i) { return OPM_api->Dim(t, i); }
static inline void* OPM_TensorData(const OPM_Tensor* t) { return OPM_api->TensorData(t); }
static inline size_t OPM_TensorByteSize(const OPM_Tensor* t) {
  return OPM_api->TensorByteSize(t);
}
static inline int64_t OPM_TensorElementCount(const OPM_Tensor* t) {
  return OPM_api->TensorElementCount(t);
}

#ifdef __cplusplus
}
#endif

#endif /* OPMARKET_C_API_H_ */
