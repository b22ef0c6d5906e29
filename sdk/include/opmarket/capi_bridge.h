/* opmarket/capi_bridge.h: how a framework bridge runs C-ABI plugin kernels natively (C99).
 *
 * For the authors of framework bridges (TensorFlow, JAX/XLA FFI, PyTorch shims), not of
 * plugins: a plugin only ever sees opmarket/c_api.h.
 *
 * opmarket's host (the C extension inside opmarket.registry) dlopens each C-ABI plugin once
 * and runs its OPM_InitPlugin once; the plugin keeps the host's OPM_Api table. A bridge does
 * not load the plugin again: it asks the host to create, run and delete a registered kernel,
 * and plugs its framework's tensors and attrs in through two small interfaces:
 *
 *   OPMB_KernelConstruction  the node's attrs, while the kernel's create runs;
 *   OPMB_KernelContext       the inputs and outputs, while the kernel's compute runs;
 *   OPMB_ShapeContext        input shapes and attrs, while the op's shape function runs.
 *
 * Each is a struct whose first member points to a table of operations. Put it first in your
 * own struct, fill the table with your functions, and cast back inside them:
 *
 *   typedef struct { OPMB_KernelContext base; TF_OpKernelContext* tf; ... } MyContext;
 *   static const OPMB_Tensor* my_input(OPMB_KernelContext* c, int i, OPM_Status* s) {
 *     MyContext* self = (MyContext*)c; ...
 *   }
 *   static const OPMB_KernelContextOps my_ops = {sizeof(OPMB_KernelContextOps),
 *                                                my_num_inputs, my_num_outputs,
 *                                                my_input, my_allocate_output};
 *   MyContext ctx = {{&my_ops}, tf_ctx};
 *   bridge->kernel_compute(kernel, state, &ctx.base, status);
 *
 * Getting the table and the kernels (Python, once, at set-up):
 *
 *   capsule = opmarket.registry.capi_bridge()       # PyCapsule named OPMB_CAPSULE_NAME
 *   include = opmarket.registry.capi_bridge_include()  # -I for this header and c_api.h
 *   for spec in opmarket.registry.get_registry().kernels(op):   # KernelSpec
 *       handle = opmarket.registry.native_kernel_handle(spec)   # int, or None: not C-ABI
 *   shape = opmarket.registry.native_shape_fn_handle(registry.shape_fn(op))  # int or None
 *
 *   and in C: const OPMB_BridgeApi* bridge =
 *                 (const OPMB_BridgeApi*)PyCapsule_GetPointer(capsule, OPMB_CAPSULE_NAME);
 *             const OPMB_Kernel* kernel = (const OPMB_Kernel*)(uintptr_t)handle;
 *   (a shim without Python gets both as integers: ctypes can read the capsule's pointer).
 *   Check bridge->struct_size and bridge->version before using a field.
 *
 * Rules:
 *   - Handles and the table live as long as the process (plugins are never unloaded).
 *   - Nothing on this path touches Python: kernel_create, kernel_compute, kernel_delete and
 *     shape_infer may be called from any thread, without the GIL. The host adds no lock:
 *     running compute on one state from several threads at once is up to the plugin
 *     (TensorFlow's rule: Compute does not change the kernel).
 *   - Statuses are the host's: make one with bridge->api->NewStatus(), read it with
 *     GetCode/Message, free it with DeleteStatus. An operation of yours that fails sets the
 *     status it was given (bridge->api->SetStatus) and returns NULL (or leaves *value).
 *   - Tensors are on host memory, C-contiguous, row-major. An OPMB_Tensor you return, its
 *     dims and its data stay valid until kernel_compute returns; you own them.
 *   - The four context operations are required; a NULL attr getter is reported to the
 *     plugin as UNIMPLEMENTED when it asks for such an attr.
 *   - Versioning as in c_api.h: the tables and OPMB_BridgeApi only gain fields at their end
 *     (struct_size says how many), OPMB_BRIDGE_API_VERSION grows when they do.
 */
#ifndef OPMARKET_CAPI_BRIDGE_H_
#define OPMARKET_CAPI_BRIDGE_H_

#include <stddef.h>
#include <stdint.h>

#include "opmarket/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header's tables. Version 2 appended the list attr getters to
 * OPMB_KernelConstructionOps (a table of version 1 has a smaller struct_size: the host
 * answers UNIMPLEMENTED for what it lacks). */
#define OPMB_BRIDGE_API_VERSION 2

/* The name of the PyCapsule that holds the host's OPMB_BridgeApi. */
#define OPMB_CAPSULE_NAME "opmarket.capi_bridge"

/* One registered C-ABI kernel (its create, compute and delete functions): opaque. */
typedef struct OPMB_Kernel OPMB_Kernel;

/* A tensor as a bridge hands it over: plain data, no ownership. */
typedef struct OPMB_Tensor {
  OPM_DataType dtype;   /* TensorFlow's number (OPM_FLOAT, ...) */
  int32_t ndim;         /* rank; 0 for a scalar */
  const int64_t* dims;  /* ndim sizes, each >= 0 */
  void* data;           /* C-contiguous, row-major, host memory */
  size_t nbytes;        /* the product of dims times OPM_DataTypeSize(dtype) */
} OPMB_Tensor;

/* --- the construction interface: attrs, while create runs ---------------------------- */
typedef struct OPMB_KernelConstruction OPMB_KernelConstruction;

typedef struct OPMB_KernelConstructionOps {
  size_t struct_size; /* sizeof(OPMB_KernelConstructionOps) */
  /* A missing attr, or one of another kind, sets INVALID_ARGUMENT with its name. */
  void (*get_attr_type)(OPMB_KernelConstruction* ctx, const char* name, OPM_DataType* value,
                        OPM_Status* status);
  /* Also serves the plugin's GetAttrInt32 (the host checks the range). */
  void (*get_attr_int64)(OPMB_KernelConstruction* ctx, const char* name, int64_t* value,
                         OPM_Status* status);
  void (*get_attr_float)(OPMB_KernelConstruction* ctx, const char* name, float* value,
                         OPM_Status* status);
  void (*get_attr_bool)(OPMB_KernelConstruction* ctx, const char* name, uint8_t* value,
                        OPM_Status* status);
  /* Copies at most max_length bytes (no terminator); *length gets the full length. */
  void (*get_attr_string)(OPMB_KernelConstruction* ctx, const char* name, char* value,
                          size_t max_length, size_t* length, OPM_Status* status);
  /* --- version 2: list(int) and list(float) attrs, as get_attr_string: copies at most
   * max_values values, *length gets the full length; NULL: UNIMPLEMENTED. */
  void (*get_attr_int64_list)(OPMB_KernelConstruction* ctx, const char* name, int64_t* values,
                              size_t max_values, size_t* length, OPM_Status* status);
  void (*get_attr_float_list)(OPMB_KernelConstruction* ctx, const char* name, float* values,
                              size_t max_values, size_t* length, OPM_Status* status);
} OPMB_KernelConstructionOps;

struct OPMB_KernelConstruction {
  const OPMB_KernelConstructionOps* ops;
};

/* --- the compute interface: inputs and outputs, while compute runs ------------------- */
typedef struct OPMB_KernelContext OPMB_KernelContext;

typedef struct OPMB_KernelContextOps {
  size_t struct_size; /* sizeof(OPMB_KernelContextOps) */
  int (*num_inputs)(OPMB_KernelContext* ctx);
  int (*num_outputs)(OPMB_KernelContext* ctx);
  /* Input i; NULL with the status set when there is none. */
  const OPMB_Tensor* (*get_input)(OPMB_KernelContext* ctx, int i, OPM_Status* status);
  /* A new, uninitialised output i of this dtype and shape, which the kernel fills; NULL
   * with the status set when it cannot be made. The host checks i and the dims first. */
  const OPMB_Tensor* (*allocate_output)(OPMB_KernelContext* ctx, int i, OPM_DataType dtype,
                                        const int64_t* dims, int num_dims,
                                        OPM_Status* status);
} OPMB_KernelContextOps;

struct OPMB_KernelContext {
  const OPMB_KernelContextOps* ops;
};

/* --- the shape interface: an op's shape function, while a graph is built ------------- */
typedef struct OPMB_ShapeContext OPMB_ShapeContext;

typedef struct OPMB_ShapeContextOps {
  size_t struct_size; /* sizeof(OPMB_ShapeContextOps) */
  int (*num_inputs)(OPMB_ShapeContext* ctx);
  int (*num_outputs)(OPMB_ShapeContext* ctx);
  /* Input i's rank, -1 when unknown, and its dim d (0 <= d < rank), -1 when unknown. */
  int64_t (*input_rank)(OPMB_ShapeContext* ctx, int i);
  int64_t (*input_dim)(OPMB_ShapeContext* ctx, int i, int64_t d);
  /* Called once for each output the shape function set, after it returned: rank -1 is an
   * unknown shape (dims NULL); a dim -1 is unknown. Set the status to refuse it. */
  void (*set_output)(OPMB_ShapeContext* ctx, int i, int64_t rank, const int64_t* dims,
                     OPM_Status* status);
  /* The node's attrs, as in OPMB_KernelConstructionOps; NULL: UNIMPLEMENTED. */
  void (*get_attr_type)(OPMB_ShapeContext* ctx, const char* name, OPM_DataType* value,
                        OPM_Status* status);
  void (*get_attr_int64)(OPMB_ShapeContext* ctx, const char* name, int64_t* value,
                         OPM_Status* status);
} OPMB_ShapeContextOps;

struct OPMB_ShapeContext {
  const OPMB_ShapeContextOps* ops;
};

/* The shape function a C-ABI library registered for an op: opaque. */
typedef struct OPMB_ShapeFn OPMB_ShapeFn;

/* --- the host's table, in the PyCapsule OPMB_CAPSULE_NAME ---------------------------- */
typedef struct OPMB_BridgeApi {
  size_t struct_size; /* sizeof(OPMB_BridgeApi) of the host */
  uint32_t version;   /* OPMB_BRIDGE_API_VERSION of the host */
  /* The table the plugins got: statuses (NewStatus, DeleteStatus, SetStatus, GetCode,
   * Message) and DataTypeSize are the ones a bridge uses. */
  const OPM_Api* api;
  /* Runs the kernel's create with the attrs of ctx; returns its state (NULL is a valid
   * state: a kernel without create has none). On failure (the plugin called
   * OPM_OpKernelConstruction_Failure) the status has its code and "Op (kernel Name): " and
   * its message, and the state is already deleted. */
  void* (*kernel_create)(const OPMB_Kernel* kernel, OPMB_KernelConstruction* ctx,
                         OPM_Status* status);
  /* Runs the kernel's compute on ctx's tensors. The status is OK, or the failure the plugin
   * reported (code, and "Op (kernel Name): " and its message), or INTERNAL when it left an
   * output unallocated. */
  void (*kernel_compute)(const OPMB_Kernel* kernel, void* state, OPMB_KernelContext* ctx,
                         OPM_Status* status);
  /* Runs the kernel's delete on a state kernel_create returned (nothing for NULL). */
  void (*kernel_delete)(const OPMB_Kernel* kernel, void* state);
  /* "Op (kernel Name)", for messages; valid as long as the process. */
  const char* (*kernel_name)(const OPMB_Kernel* kernel);
  /* Runs an op's shape function (opmarket.registry.native_shape_fn_handle) on ctx's input
   * shapes and attrs, then hands each output it set to ctx's set_output. The status is OK,
   * or the function's failure (its code, and "Op: " and its message). No Python either. */
  void (*shape_infer)(const OPMB_ShapeFn* fn, OPMB_ShapeContext* ctx, OPM_Status* status);
} OPMB_BridgeApi;

#ifdef __cplusplus
}
#endif

#endif /* OPMARKET_CAPI_BRIDGE_H_ */
