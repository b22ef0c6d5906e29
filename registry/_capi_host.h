/* Internal to opmarket's C-ABI host: what its source files share (registry/_capi_host*.c,
 * one extension module, opmarket.registry._capi_host; setup.py builds them together with
 * hidden visibility, so none of these names leaves the module).
 *
 *   _capi_host.c         statuses, data types, attrs of a dict; the tables and the module
 *   _capi_host_load.c    dlopen a library, run its init, record what it registers
 *   _capi_host_shape.c   shape inference: the plugins' table, Python's infer, the bridges'
 *   _capi_host_kernel.c  kernel contexts and tensors; create, compute, delete (bridges too)
 *   _capi_host_numpy.c   the Python path: attrs from a dict, numpy arrays, the Kernel type
 */
#ifndef OPMARKET_CAPI_HOST_H_
#define OPMARKET_CAPI_HOST_H_

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL opmarket_capi_host_ARRAY_API
#ifndef OPMARKET_CAPI_HOST_MAIN
#define NO_IMPORT_ARRAY /* _capi_host.c imports numpy's C API for all of them */
#endif
#include <numpy/arrayobject.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opmarket/c_api.h"
#include "opmarket/capi_bridge.h"

/* The bridge's tensor dims are int64_t, numpy's npy_intp: the same on every 64-bit CPython. */
_Static_assert(sizeof(npy_intp) == sizeof(int64_t), "opmarket's C-ABI host needs 64-bit sizes");

#define SET_REF(slot, value)            \
  do {                                  \
    PyObject* old_ = (PyObject*)(slot); \
    (slot) = (value);                   \
    Py_XDECREF(old_);                   \
  } while (0)

struct OPM_Status {
  OPM_Code code;
  char* message;
};

/* One registered kernel, as the Kernel type and the bridges reach it: made when the kernel
 * registers, never freed (a library is never unloaded). Its address is the kernel handle. */
struct OPMB_Kernel {
  OPM_KernelCreateFn create;
  OPM_KernelComputeFn compute;
  OPM_KernelDeleteFn del;
  char* name; /* "Op (kernel Name)", for messages */
};

/* One op's shape function, as the bridges reach it: made when the op registers, never
 * freed. Its address is the handle. */
struct OPMB_ShapeFn {
  OPM_ShapeInferenceFn fn;
  char* name; /* the op's */
};

/* The numbers below this are TensorFlow's DataType values that numpy holds natively. */
#define NUM_DTYPES 24

extern const OPM_Api host_api;
extern PyObject* extra_descrs;                /* {dtype number: numpy dtype} beyond numpy's */
extern PyArray_Descr* builtin_descrs[NUM_DTYPES]; /* numpy's, by OPM number, or NULL */

/* --- _capi_host.c: statuses, data types, attrs of a dict; the tables and the module */
/* A str's UTF-8 (PyUnicode_AsUTF8 joins the limited API only in 3.13). */
static inline const char* utf8(PyObject* s) {
  return s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
}
void h_SetStatus(OPM_Status* s, OPM_Code code, const char* message);
const char* h_Message(const OPM_Status* s);
void status_from_python(OPM_Status* s, OPM_Code code, const char* context);
PyObject* raise_status(OPM_Code code, const char* message);
void unimplemented(OPM_Status* s, const char* what);
void fail_with_name(OPM_Status* status, const char* name, const OPM_Status* why);
PyObject* get_attr(PyObject* attrs, const char* name, OPM_Status* status);
int attr_int64(PyObject* attrs, const char* name, int64_t* out, OPM_Status* status,
               const char* want);
static inline void clear_status(OPM_Status* s) {
  if (s && s->code != OPM_OK) h_SetStatus(s, OPM_OK, "");
}

/* --- _capi_host_load.c: dlopen a library, run its init, record what it registers */
OPM_OpDefinitionBuilder* h_NewOpDefinitionBuilder(const char* name);
void h_AddInput(OPM_OpDefinitionBuilder* b, const char* spec);
void h_AddOutput(OPM_OpDefinitionBuilder* b, const char* spec);
void h_AddAttr(OPM_OpDefinitionBuilder* b, const char* spec);
void h_SetDoc(OPM_OpDefinitionBuilder* b, const char* doc);
void h_SetFlag(OPM_OpDefinitionBuilder* b, int flag, int value);
void h_SetShapeFn(OPM_OpDefinitionBuilder* b, OPM_ShapeInferenceFn fn);
void h_DeleteOpDefinitionBuilder(OPM_OpDefinitionBuilder* b);
void h_RegisterOpDefinition(OPM_OpDefinitionBuilder* b, OPM_Status* status);
OPM_KernelBuilder* h_NewKernelBuilder(const char* op, const char* device, OPM_KernelCreateFn create,
                                      OPM_KernelComputeFn compute, OPM_KernelDeleteFn del);
void h_TypeConstraint(OPM_KernelBuilder* b, const char* attr, OPM_DataType dtype,
                      OPM_Status* status);
void h_HostMemory(OPM_KernelBuilder* b, const char* arg);
void h_Priority(OPM_KernelBuilder* b, int32_t priority);
void h_Label(OPM_KernelBuilder* b, const char* label);
void h_DeleteKernelBuilder(OPM_KernelBuilder* b);
void h_RegisterKernelBuilder(const char* name, OPM_KernelBuilder* b, OPM_Status* status);
PyObject* py_load(PyObject* self, PyObject* args);

/* --- _capi_host_shape.c: shape inference (the plugins' table, Python, the bridges) */
int64_t h_SICNumInputs(OPM_ShapeInferenceContext* c);
OPM_ShapeHandle* h_SICGetInput(OPM_ShapeInferenceContext* c, int i, OPM_Status* s);
int64_t h_SICRank(OPM_ShapeInferenceContext* c, const OPM_ShapeHandle* h);
int64_t h_SICDim(OPM_ShapeInferenceContext* c, const OPM_ShapeHandle* h, int64_t i);
OPM_ShapeHandle* h_SICMakeShape(OPM_ShapeInferenceContext* c, const int64_t* dims, int64_t rank);
OPM_ShapeHandle* h_SICUnknownShape(OPM_ShapeInferenceContext* c);
OPM_ShapeHandle* h_SICWithRank(OPM_ShapeInferenceContext* c, const OPM_ShapeHandle* h, int64_t rank,
                               OPM_Status* s);
OPM_ShapeHandle* h_SICWithRankAtLeast(OPM_ShapeInferenceContext* c, const OPM_ShapeHandle* h,
                                      int64_t rank, OPM_Status* s);
void h_SICSetOutput(OPM_ShapeInferenceContext* c, int i, const OPM_ShapeHandle* h, OPM_Status* s);
void h_SICGetAttrType(OPM_ShapeInferenceContext* c, const char* name, OPM_DataType* v,
                      OPM_Status* s);
void h_SICGetAttrInt64(OPM_ShapeInferenceContext* c, const char* name, int64_t* v, OPM_Status* s);
void b_shape_infer(const OPMB_ShapeFn* fn, OPMB_ShapeContext* impl, OPM_Status* status);
PyObject* py_infer(PyObject* self, PyObject* args);

/* --- _capi_host_kernel.c: kernel contexts and tensors; create, compute, delete */
void h_OKCGetAttrType(OPM_OpKernelConstruction* c, const char* name, OPM_DataType* v,
                      OPM_Status* s);
void h_OKCGetAttrInt64(OPM_OpKernelConstruction* c, const char* name, int64_t* v, OPM_Status* s);
void h_OKCGetAttrInt32(OPM_OpKernelConstruction* c, const char* name, int32_t* v, OPM_Status* s);
void h_OKCGetAttrFloat(OPM_OpKernelConstruction* c, const char* name, float* v, OPM_Status* s);
void h_OKCGetAttrBool(OPM_OpKernelConstruction* c, const char* name, uint8_t* v, OPM_Status* s);
void h_OKCGetAttrString(OPM_OpKernelConstruction* c, const char* name, char* v, size_t max_length,
                        size_t* length, OPM_Status* s);
void h_OKCGetAttrInt64List(OPM_OpKernelConstruction* c, const char* name, int64_t* v,
                           size_t max_values, size_t* length, OPM_Status* s);
void h_OKCGetAttrFloatList(OPM_OpKernelConstruction* c, const char* name, float* v,
                           size_t max_values, size_t* length, OPM_Status* s);
void h_OKCFailure(OPM_OpKernelConstruction* c, OPM_Status* s);
int h_NumInputs(OPM_OpKernelContext* c);
int h_NumOutputs(OPM_OpKernelContext* c);
OPM_Tensor* h_GetInput(OPM_OpKernelContext* c, int i, OPM_Status* s);
OPM_Tensor* h_AllocateOutput(OPM_OpKernelContext* c, int i, OPM_DataType dtype, const int64_t* dims,
                             int num_dims, OPM_Status* s);
void h_OKCtxFailure(OPM_OpKernelContext* c, OPM_Status* s);
OPM_DataType h_TensorType(const OPM_Tensor* t);
int h_NumDims(const OPM_Tensor* t);
int64_t h_Dim(const OPM_Tensor* t, int i);
void* h_TensorData(const OPM_Tensor* t);
size_t h_TensorByteSize(const OPM_Tensor* t);
int64_t h_TensorElementCount(const OPM_Tensor* t);
void* b_kernel_create(const OPMB_Kernel* k, OPMB_KernelConstruction* impl, OPM_Status* status);
void run_compute(const OPMB_Kernel* k, void* state, OPMB_KernelContext* impl, int num_inputs,
                 int num_outputs, OPM_Status* status);
void b_kernel_compute(const OPMB_Kernel* k, void* state, OPMB_KernelContext* impl,
                      OPM_Status* status);
void b_kernel_delete(const OPMB_Kernel* k, void* state);
const char* b_kernel_name(const OPMB_Kernel* k);

/* --- _capi_host_numpy.c: the Python path: attrs from a dict, numpy arrays, the Kernel type */
PyObject* new_kernel_type(void);

#endif /* OPMARKET_CAPI_HOST_H_ */
