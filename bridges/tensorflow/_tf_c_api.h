/* The part of TensorFlow's C op and kernel API (ops.h, kernels.h, tf_status.h, tf_tensor.h,
 * tf_buffer.h) that opmarket's TensorFlow shim calls, declared here so that the shim compiles
 * without TensorFlow installed and ships built in opmarket's wheel.
 *
 * These are ABI facts of TensorFlow's stable C API: the enum values, the one struct the shim
 * reads (TF_Buffer) and the functions' signatures. The shim does not link
 * libtensorflow_framework: each function is a pointer of the same name, filled by
 * opm_tf_bind_api() from the library TensorFlow already loaded, so the shim carries no search
 * path of the machine it was built on and can say which functions a TensorFlow lacks.
 * tests/bridges/test_shipped_shims.py checks every declaration against the installed
 * TensorFlow's own headers. */
#ifndef OPM_TF_C_API_H_
#define OPM_TF_C_API_H_

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The library TensorFlow's C API lives in, by its soname (the same for every TensorFlow 2). */
#define OPM_TF_FRAMEWORK "libtensorflow_framework.so.2"

/* The status codes the shim uses (the same numbers as OPM_Code) and the one dtype it names. */
#define OPM_TF_CONSTANTS(X)    \
  X(TF_OK, 0)                  \
  X(TF_INVALID_ARGUMENT, 3)    \
  X(TF_RESOURCE_EXHAUSTED, 8)  \
  X(TF_FAILED_PRECONDITION, 9) \
  X(TF_UNIMPLEMENTED, 12)      \
  X(TF_INTERNAL, 13)           \
  X(TF_FLOAT, 1)

/* With OPM_TF_CHECK_DECLARATIONS defined, TensorFlow's own headers come first and this one
 * adds only its lists, for the test that compares the two. */
#ifndef OPM_TF_CHECK_DECLARATIONS
typedef struct TF_Status TF_Status;
typedef struct TF_Tensor TF_Tensor;
typedef struct TF_OpDefinitionBuilder TF_OpDefinitionBuilder;
typedef struct TF_ShapeInferenceContext TF_ShapeInferenceContext;
typedef struct TF_ShapeHandle TF_ShapeHandle;
typedef struct TF_DimensionHandle TF_DimensionHandle;
typedef struct TF_KernelBuilder TF_KernelBuilder;
typedef struct TF_OpKernelConstruction TF_OpKernelConstruction;
typedef struct TF_OpKernelContext TF_OpKernelContext;

typedef unsigned char TF_Bool;

typedef struct TF_Buffer {
  const void* data;
  size_t length;
  void (*data_deallocator)(void* data, size_t length);
} TF_Buffer;

typedef enum TF_Code {
  TF_OK = 0,
  TF_INVALID_ARGUMENT = 3,
  TF_RESOURCE_EXHAUSTED = 8,
  TF_FAILED_PRECONDITION = 9,
  TF_UNIMPLEMENTED = 12,
  TF_INTERNAL = 13,
} TF_Code;

typedef enum TF_DataType { TF_FLOAT = 1 } TF_DataType;
#endif

typedef void (*opm_tf_shape_fn)(TF_ShapeInferenceContext*, TF_Status*);
typedef void* (*opm_tf_create_fn)(TF_OpKernelConstruction*);
typedef void (*opm_tf_compute_fn)(void*, TF_OpKernelContext*);
typedef void (*opm_tf_delete_fn)(void*);

/* X(return type, name, parameters): every TensorFlow function the shim calls. */
#define OPM_TF_FUNCTIONS(X)                                                                   \
  X(TF_Status*, TF_NewStatus, (void))                                                         \
  X(void, TF_DeleteStatus, (TF_Status*))                                                      \
  X(void, TF_SetStatus, (TF_Status*, TF_Code, const char*))                                   \
  X(TF_Code, TF_GetCode, (const TF_Status*))                                                  \
  X(const char*, TF_Message, (const TF_Status*))                                              \
  X(void, TF_DeleteTensor, (TF_Tensor*))                                                      \
  X(TF_DataType, TF_TensorType, (const TF_Tensor*))                                           \
  X(int, TF_NumDims, (const TF_Tensor*))                                                      \
  X(int64_t, TF_Dim, (const TF_Tensor*, int))                                                 \
  X(size_t, TF_TensorByteSize, (const TF_Tensor*))                                            \
  X(void*, TF_TensorData, (const TF_Tensor*))                                                 \
  X(TF_OpDefinitionBuilder*, TF_NewOpDefinitionBuilder, (const char*))                        \
  X(void, TF_RegisterOpDefinition, (TF_OpDefinitionBuilder*, TF_Status*))                     \
  X(void, TF_DeleteOpDefinitionBuilder, (TF_OpDefinitionBuilder*))                            \
  X(void, TF_OpDefinitionBuilderAddAttr, (TF_OpDefinitionBuilder*, const char*))              \
  X(void, TF_OpDefinitionBuilderAddInput, (TF_OpDefinitionBuilder*, const char*))             \
  X(void, TF_OpDefinitionBuilderAddOutput, (TF_OpDefinitionBuilder*, const char*))            \
  X(void, TF_OpDefinitionBuilderSetIsCommutative, (TF_OpDefinitionBuilder*, bool))            \
  X(void, TF_OpDefinitionBuilderSetIsAggregate, (TF_OpDefinitionBuilder*, bool))              \
  X(void, TF_OpDefinitionBuilderSetIsStateful, (TF_OpDefinitionBuilder*, bool))               \
  X(void, TF_OpDefinitionBuilderSetAllowsUninitializedInput, (TF_OpDefinitionBuilder*, bool)) \
  X(void, TF_OpDefinitionBuilderSetShapeInferenceFunction,                                    \
    (TF_OpDefinitionBuilder*, opm_tf_shape_fn))                                               \
  X(int64_t, TF_ShapeInferenceContextNumInputs, (TF_ShapeInferenceContext*))                  \
  X(TF_ShapeHandle*, TF_NewShapeHandle, (void))                                               \
  X(void, TF_ShapeInferenceContextGetInput,                                                   \
    (TF_ShapeInferenceContext*, int, TF_ShapeHandle*, TF_Status*))                            \
  X(void, TF_ShapeInferenceContextSetOutput,                                                  \
    (TF_ShapeInferenceContext*, int, TF_ShapeHandle*, TF_Status*))                            \
  X(TF_ShapeHandle*, TF_ShapeInferenceContextScalar, (TF_ShapeInferenceContext*))             \
  X(TF_ShapeHandle*, TF_ShapeInferenceContextVectorFromSize,                                  \
    (TF_ShapeInferenceContext*, size_t))                                                      \
  X(TF_DimensionHandle*, TF_NewDimensionHandle, (void))                                       \
  X(void, TF_ShapeInferenceContext_GetAttrType,                                               \
    (TF_ShapeInferenceContext*, const char*, TF_DataType*, TF_Status*))                       \
  X(int64_t, TF_ShapeInferenceContextRank, (TF_ShapeInferenceContext*, TF_ShapeHandle*))      \
  X(int, TF_ShapeInferenceContextRankKnown, (TF_ShapeInferenceContext*, TF_ShapeHandle*))     \
  X(void, TF_ShapeInferenceContextWithRank,                                                   \
    (TF_ShapeInferenceContext*, TF_ShapeHandle*, int64_t, TF_ShapeHandle*, TF_Status*))       \
  X(void, TF_ShapeInferenceContextConcatenateShapes,                                          \
    (TF_ShapeInferenceContext*, TF_ShapeHandle*, TF_ShapeHandle*, TF_ShapeHandle*,            \
     TF_Status*))                                                                             \
  X(void, TF_ShapeInferenceContextDim,                                                        \
    (TF_ShapeInferenceContext*, TF_ShapeHandle*, int64_t, TF_DimensionHandle*))               \
  X(int, TF_DimensionHandleValueKnown, (TF_DimensionHandle*))                                 \
  X(int64_t, TF_DimensionHandleValue, (TF_DimensionHandle*))                                  \
  X(void, TF_ShapeInferenceContextSetUnknownShape, (TF_ShapeInferenceContext*, TF_Status*))   \
  X(void, TF_DeleteShapeHandle, (TF_ShapeHandle*))                                            \
  X(void, TF_DeleteDimensionHandle, (TF_DimensionHandle*))                                    \
  X(TF_KernelBuilder*, TF_NewKernelBuilder,                                                   \
    (const char*, const char*, opm_tf_create_fn, opm_tf_compute_fn, opm_tf_delete_fn))        \
  X(void, TF_KernelBuilder_TypeConstraint,                                                    \
    (TF_KernelBuilder*, const char*, const TF_DataType, TF_Status*))                          \
  X(void, TF_KernelBuilder_Priority, (TF_KernelBuilder*, int32_t))                            \
  X(void, TF_KernelBuilder_Label, (TF_KernelBuilder*, const char*))                           \
  X(void, TF_RegisterKernelBuilder, (const char*, TF_KernelBuilder*, TF_Status*))             \
  X(void, TF_DeleteKernelBuilder, (TF_KernelBuilder*))                                        \
  X(int, TF_NumInputs, (TF_OpKernelContext*))                                                 \
  X(int, TF_NumOutputs, (TF_OpKernelContext*))                                                \
  X(void, TF_GetInput, (TF_OpKernelContext*, int, TF_Tensor**, TF_Status*))                   \
  X(void, TF_OpKernelContext_Failure, (TF_OpKernelContext*, TF_Status*))                      \
  X(void, TF_OpKernelConstruction_Failure, (TF_OpKernelConstruction*, TF_Status*))            \
  X(void, TF_OpKernelConstruction_GetAttrSize,                                                \
    (TF_OpKernelConstruction*, const char*, int32_t*, int32_t*, TF_Status*))                  \
  X(void, TF_OpKernelConstruction_GetAttrType,                                                \
    (TF_OpKernelConstruction*, const char*, TF_DataType*, TF_Status*))                        \
  X(void, TF_OpKernelConstruction_GetAttrInt64,                                               \
    (TF_OpKernelConstruction*, const char*, int64_t*, TF_Status*))                            \
  X(void, TF_OpKernelConstruction_GetAttrFloat,                                               \
    (TF_OpKernelConstruction*, const char*, float*, TF_Status*))                              \
  X(void, TF_OpKernelConstruction_GetAttrBool,                                                \
    (TF_OpKernelConstruction*, const char*, TF_Bool*, TF_Status*))                            \
  X(void, TF_OpKernelConstruction_GetAttrString,                                              \
    (TF_OpKernelConstruction*, const char*, char*, size_t, TF_Status*))                       \
  X(void, TF_OpKernelConstruction_GetAttrInt64List,                                           \
    (TF_OpKernelConstruction*, const char*, int64_t*, int, TF_Status*))                       \
  X(void, TF_OpKernelConstruction_GetAttrFloatList,                                           \
    (TF_OpKernelConstruction*, const char*, float*, int, TF_Status*))                         \
  X(TF_Buffer*, TF_OpKernelConstruction_GetNodeDef, (TF_OpKernelConstruction*, TF_Status*))   \
  X(TF_Tensor*, TF_AllocateOutput,                                                            \
    (TF_OpKernelContext*, int, TF_DataType, const int64_t*, int, size_t, TF_Status*))          \
  X(int, TF_GetDeviceId, (TF_OpKernelContext*))

#ifndef OPM_TF_CHECK_DECLARATIONS
/* One function pointer per TensorFlow function, named as the function, so the shim's calls
 * read as calls into TensorFlow. */
#define OPM_TF_POINTER(ret, name, params) static ret(*name) params = NULL;
OPM_TF_FUNCTIONS(OPM_TF_POINTER)
#undef OPM_TF_POINTER

/* Fills the pointers from the TensorFlow this process loaded; the names it cannot find go
 * into `missing` (space-separated, cut at `cap` bytes). Returns how many are missing, or -1
 * when no TensorFlow is loaded. Called once, before anything else in the shim. */
static int opm_tf_bind_api(char* missing, size_t cap) {
  void* lib = dlopen(OPM_TF_FRAMEWORK, RTLD_NOW | RTLD_NOLOAD);
  if (lib == NULL) return -1;
  int n = 0;
  if (cap > 0) missing[0] = '\0';
#define OPM_TF_BIND(ret, name, params)                                              \
  *(void**)(&name) = dlsym(lib, #name);                                             \
  if (name == NULL) {                                                               \
    ++n;                                                                            \
    size_t used = strlen(missing);                                                  \
    if (used + sizeof(#name) + 1 < cap) {                                           \
      memcpy(missing + used, used ? " " #name : #name, sizeof(#name) + (used ? 1 : 0)); \
    }                                                                               \
  }
  OPM_TF_FUNCTIONS(OPM_TF_BIND)
#undef OPM_TF_BIND
  dlclose(lib); /* TensorFlow keeps it loaded: the NOLOAD open only took a reference */
  return n;
}
#endif

#endif /* OPM_TF_C_API_H_ */
