/* TensorFlow's Bitcast (tensorflow/core/ops/array_ops.cc, tensorflow/c/kernels/bitcast_op.cc)
 * as an opmarket C-ABI plugin: plain C99 against opmarket/c_api.h, no Python, no C++.
 *
 * Reinterprets the bytes of the input as another dtype. With equal sizes the shape stays;
 * to a smaller type a last dimension of size in/out is appended; to a larger type the last
 * dimension must be out/in and is removed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <opmarket/c_api.h>

#define TYPES                                                                          \
  "{bfloat16, half, float, double, int64, int32, uint8, uint16, uint32, uint64, int8, " \
  "int16, complex64, complex128, qint8, quint8, qint16, quint16, qint32}"

static const char* type_name(OPM_DataType t) {
  switch (t) {
    case OPM_FLOAT: return "float";
    case OPM_DOUBLE: return "double";
    case OPM_INT32: return "int32";
    case OPM_UINT8: return "uint8";
    case OPM_INT16: return "int16";
    case OPM_INT8: return "int8";
    case OPM_COMPLEX64: return "complex64";
    case OPM_INT64: return "int64";
    case OPM_BOOL: return "bool";
    case OPM_BFLOAT16: return "bfloat16";
    case OPM_UINT16: return "uint16";
    case OPM_COMPLEX128: return "complex128";
    case OPM_HALF: return "half";
    case OPM_UINT32: return "uint32";
    case OPM_UINT64: return "uint64";
    default: return "(unsupported)";
  }
}

/* The shape function, as TensorFlow's. */
static void bitcast_shape(OPM_ShapeInferenceContext* ctx, OPM_Status* status) {
  OPM_ShapeHandle* input = OPM_ShapeInferenceContextGetInput(ctx, 0, status);
  if (OPM_GetCode(status) != OPM_OK) return;
  int64_t rank = OPM_ShapeInferenceContextRank(ctx, input);
  if (rank < 0) {
    OPM_ShapeInferenceContextSetOutput(ctx, 0, OPM_ShapeInferenceContextUnknownShape(ctx),
                                       status);
    return;
  }
  OPM_DataType in_type, out_type;
  OPM_ShapeInferenceContext_GetAttrType(ctx, "T", &in_type, status);
  if (OPM_GetCode(status) != OPM_OK) return;
  OPM_ShapeInferenceContext_GetAttrType(ctx, "type", &out_type, status);
  if (OPM_GetCode(status) != OPM_OK) return;
  size_t in_size = OPM_DataTypeSize(in_type), out_size = OPM_DataTypeSize(out_type);
  char msg[200];
  if (in_size == 0 || out_size == 0) {
    snprintf(msg, sizeof msg, "Cannot bitcast types %s to %s because one of the type sizes "
             "is zero.", type_name(in_type), type_name(out_type));
    OPM_SetStatus(status, OPM_INVALID_ARGUMENT, msg);
    return;
  }
  int64_t dims[65];
  if (rank > 64) {
    OPM_SetStatus(status, OPM_INVALID_ARGUMENT, "Bitcast supports at most rank 64");
    return;
  }
  for (int64_t i = 0; i < rank; ++i) dims[i] = OPM_ShapeInferenceContextDim(ctx, input, i);
  int64_t new_rank = rank;
  if (in_size < out_size) {
    OPM_ShapeInferenceContextWithRankAtLeast(ctx, input, 1, status);
    if (OPM_GetCode(status) != OPM_OK) return;
    int64_t divisor = (int64_t)(out_size / in_size);
    int64_t last = dims[rank - 1];
    if (last >= 0 && last != divisor) {
      snprintf(msg, sizeof msg, "Cannot bitcast due to shape. %lld does not match %lld",
               (long long)last, (long long)divisor);
      OPM_SetStatus(status, OPM_INVALID_ARGUMENT, msg);
      return;
    }
    new_rank = rank - 1;
  } else if (in_size > out_size) {
    dims[new_rank++] = (int64_t)(in_size / out_size);
  }
  OPM_ShapeInferenceContextSetOutput(
      ctx, 0, OPM_ShapeInferenceContextMakeShape(ctx, dims, new_rank), status);
}

typedef struct {
  OPM_DataType in_type, out_type;
  size_t in_size, out_size;
} bitcast_kernel;

static void* bitcast_create(OPM_OpKernelConstruction* ctx) {
  bitcast_kernel* k = (bitcast_kernel*)calloc(1, sizeof *k);
  OPM_Status* status = OPM_NewStatus();
  if (!k) {
    OPM_SetStatus(status, OPM_RESOURCE_EXHAUSTED, "out of memory");
    OPM_OpKernelConstruction_Failure(ctx, status);
    OPM_DeleteStatus(status);
    return NULL;
  }
  OPM_OpKernelConstruction_GetAttrType(ctx, "T", &k->in_type, status);
  if (OPM_GetCode(status) == OPM_OK)
    OPM_OpKernelConstruction_GetAttrType(ctx, "type", &k->out_type, status);
  if (OPM_GetCode(status) == OPM_OK) {
    k->in_size = OPM_DataTypeSize(k->in_type);
    k->out_size = OPM_DataTypeSize(k->out_type);
    if (k->in_size == 0 || k->out_size == 0) {
      char msg[160];
      snprintf(msg, sizeof msg, "Cannot bitcast types %s to %s because one of the type "
               "sizes is zero.", type_name(k->in_type), type_name(k->out_type));
      OPM_SetStatus(status, OPM_INVALID_ARGUMENT, msg);
    }
  }
  if (OPM_GetCode(status) != OPM_OK) OPM_OpKernelConstruction_Failure(ctx, status);
  OPM_DeleteStatus(status);
  return k;
}

static void bitcast_compute(void* kernel, OPM_OpKernelContext* ctx) {
  const bitcast_kernel* k = (const bitcast_kernel*)kernel;
  OPM_Status* status = OPM_NewStatus();
  OPM_Tensor* input = OPM_GetInput(ctx, 0, status);
  int rank = 0;
  int64_t dims[65];
  if (OPM_GetCode(status) == OPM_OK) {
    rank = OPM_NumDims(input);
    if (rank > 64) {
      OPM_SetStatus(status, OPM_INVALID_ARGUMENT, "Bitcast supports at most rank 64");
    } else if (!(k->in_size >= k->out_size ||
                 (rank > 0 && OPM_Dim(input, rank - 1) ==
                                  (int64_t)(k->out_size / k->in_size)))) {
      char msg[160];
      snprintf(msg, sizeof msg, "Cannot bitcast from %s to %s: the last dimension must be "
               "%lld", type_name(k->in_type), type_name(k->out_type),
               (long long)(k->out_size / k->in_size));
      OPM_SetStatus(status, OPM_INVALID_ARGUMENT, msg);
    }
  }
  if (OPM_GetCode(status) == OPM_OK) {
    int new_rank = rank;
    for (int i = 0; i < rank; ++i) dims[i] = OPM_Dim(input, i);
    if (k->out_size < k->in_size) {
      dims[new_rank++] = (int64_t)(k->in_size / k->out_size);
    } else if (k->out_size > k->in_size) {
      --new_rank;
    }
    OPM_Tensor* output = OPM_AllocateOutput(ctx, 0, k->out_type, dims, new_rank, status);
    if (OPM_GetCode(status) == OPM_OK) {
      memcpy(OPM_TensorData(output), OPM_TensorData(input), OPM_TensorByteSize(input));
    }
  }
  if (OPM_GetCode(status) != OPM_OK) OPM_OpKernelContext_Failure(ctx, status);
  OPM_DeleteStatus(status);
}

static void bitcast_delete(void* kernel) { free(kernel); }

/* The kernel takes every type whose elements numpy holds. */
static const OPM_DataType kTypes[] = {
    OPM_BFLOAT16, OPM_HALF,  OPM_FLOAT,  OPM_DOUBLE, OPM_INT64,     OPM_INT32,     OPM_UINT8,
    OPM_UINT16,   OPM_UINT32, OPM_UINT64, OPM_INT8,  OPM_INT16,     OPM_COMPLEX64, OPM_COMPLEX128};

static void init(OPM_Status* status) {
  OPM_OpDefinitionBuilder* b = OPM_NewOpDefinitionBuilder("Opm>Bitcast");
  OPM_OpDefinitionBuilderAddInput(b, "input: T");
  OPM_OpDefinitionBuilderAddOutput(b, "output: type");
  OPM_OpDefinitionBuilderAddAttr(b, "T: " TYPES);
  OPM_OpDefinitionBuilderAddAttr(b, "type: " TYPES);
  OPM_OpDefinitionBuilderSetDoc(
      b, "Bitcasts a tensor from one type to another without copying data.\n\n"
         "Given a tensor `input`, this operation returns a tensor that has the same buffer "
         "data as `input` with datatype `type`. If the input datatype `T` is larger than "
         "the output datatype `type` then the shape changes from [...] to [..., "
         "sizeof(`T`)/sizeof(`type`)]; if `T` is smaller, the last dimension must equal "
         "sizeof(`type`)/sizeof(`T`) and is removed.");
  OPM_OpDefinitionBuilderSetShapeInferenceFunction(b, &bitcast_shape);
  OPM_RegisterOpDefinition(b, status);
  if (OPM_GetCode(status) != OPM_OK) return;

  OPM_KernelBuilder* kb = OPM_NewKernelBuilder("Opm>Bitcast", "CPU", &bitcast_create,
                                               &bitcast_compute, &bitcast_delete);
  for (size_t i = 0; i < sizeof kTypes / sizeof kTypes[0]; ++i) {
    OPM_KernelBuilder_TypeConstraint(kb, "T", kTypes[i], status);
    if (OPM_GetCode(status) == OPM_OK)
      OPM_KernelBuilder_TypeConstraint(kb, "type", kTypes[i], status);
    if (OPM_GetCode(status) != OPM_OK) {
      OPM_DeleteKernelBuilder(kb);
      return;
    }
  }
  OPM_RegisterKernelBuilder("BitcastOp", kb, status);
}

OPM_PLUGIN_INIT(init)
