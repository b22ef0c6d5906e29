/* The host side of opmarket/c_api.h and opmarket/capi_bridge.h: the function table a C-ABI
 * plugin calls, the per-call trampoline from a Python call to a plugin's compute function,
 * and the table through which framework bridges run the same kernels on their own tensors.
 *
 * The CPython extension opmarket.registry._capi_host, built when opmarket is installed
 * (setup.py) against CPython's limited API (one abi3 binary for every CPython >= 3.11) and
 * numpy's C API (built against numpy 2, it runs on numpy >= 1.23: NPY_FEATURE_VERSION), so a
 * C-ABI plugin needs no compiler at run time. registry/_capi.py loads plugins through it;
 * docs/c-api.md has the measurements.
 *
 * The Python path (loading, shape functions, the Kernel type) runs with the GIL held. The
 * bridge path (OPMB_BridgeApi: create, compute, delete on a bridge's contexts) touches no
 * Python and takes no lock: the table's functions a kernel calls there are plain C.
 *
 * This file: statuses, data types, attrs of a dict, the two tables and the module; the
 * other parts are listed in _capi_host.h.
 */
#define OPMARKET_CAPI_HOST_MAIN /* this file imports numpy's C API */
#include "_capi_host.h"

/* The host defines the table the inline calls would use; it never calls them itself. */
const OPM_Api* OPM_api = 0;

static PyObject* make_error = NULL;  /* (code, message) -> exception instance */
PyObject* extra_descrs = NULL;      /* {dtype number: numpy dtype} beyond numpy's own */

/* --- statuses ------------------------------------------------------------------------ */
static OPM_Status* h_NewStatus(void) {
  OPM_Status* s = (OPM_Status*)calloc(1, sizeof(OPM_Status));
  return s;
}
static void h_DeleteStatus(OPM_Status* s) {
  if (!s) return;
  free(s->message);
  free(s);
}
void h_SetStatus(OPM_Status* s, OPM_Code code, const char* message) {
  if (!s) return;
  free(s->message);
  s->code = code;
  s->message = strdup(message ? message : "");
}
static OPM_Code h_GetCode(const OPM_Status* s) { return s ? s->code : OPM_INTERNAL; }
const char* h_Message(const OPM_Status* s) {
  return s && s->message ? s->message : "";
}
void status_from_python(OPM_Status* s, OPM_Code code, const char* context) {
  /* A Python error raised by the host while serving a plugin call: clear it, keep its text. */
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject* text = value ? PyObject_Str(value) : NULL;
  const char* msg = utf8(text);
  char buf[1024];
  snprintf(buf, sizeof buf, "%s: %s", context, msg ? msg : "internal error");
  PyErr_Clear();
  h_SetStatus(s, code, buf);
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
}

PyObject* raise_status(OPM_Code code, const char* message) {
  PyObject* exc = PyObject_CallFunction(make_error, "is", (int)code, message);
  if (exc) {
    PyErr_SetObject((PyObject*)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return NULL;
}


void unimplemented(OPM_Status* s, const char* what) {
  char buf[160];
  snprintf(buf, sizeof buf, "%s is not available here (the framework bridge lacks it)", what);
  h_SetStatus(s, OPM_UNIMPLEMENTED, buf);
}

/* A failure of the plugin's, for a bridge: its code, and "name: message". */
void fail_with_name(OPM_Status* status, const char* name, const OPM_Status* why) {
  size_t size = strlen(name) + strlen(h_Message(why)) + 3;
  char* text = (char*)malloc(size);
  if (text) snprintf(text, size, "%s: %s", name, h_Message(why));
  h_SetStatus(status, why->code, text ? text : h_Message(why));
  free(text);
}

/* --- data types ---------------------------------------------------------------------- */
static size_t h_DataTypeSize(OPM_DataType t) {
  switch (t) {
    case OPM_BOOL: case OPM_INT8: case OPM_UINT8: return 1;
    case OPM_INT16: case OPM_UINT16: case OPM_HALF: case OPM_BFLOAT16: return 2;
    case OPM_FLOAT: case OPM_INT32: case OPM_UINT32: return 4;
    case OPM_DOUBLE: case OPM_INT64: case OPM_UINT64: case OPM_COMPLEX64: return 8;
    case OPM_COMPLEX128: return 16;
    default: return 0;
  }
}

static int npy_of(OPM_DataType t) {
  switch (t) {
    case OPM_BOOL: return NPY_BOOL;
    case OPM_INT8: return NPY_INT8;
    case OPM_UINT8: return NPY_UINT8;
    case OPM_INT16: return NPY_INT16;
    case OPM_UINT16: return NPY_UINT16;
    case OPM_INT32: return NPY_INT32;
    case OPM_UINT32: return NPY_UINT32;
    case OPM_INT64: return NPY_INT64;
    case OPM_UINT64: return NPY_UINT64;
    case OPM_HALF: return NPY_FLOAT16;
    case OPM_FLOAT: return NPY_FLOAT32;
    case OPM_DOUBLE: return NPY_FLOAT64;
    case OPM_COMPLEX64: return NPY_COMPLEX64;
    case OPM_COMPLEX128: return NPY_COMPLEX128;
    default: return -1;
  }
}

/* numpy's descriptors of the types in npy_of, by OPM number: made once, so that allocating
 * an output skips looking them up (PyArray_SimpleNew would, on every call). */
PyArray_Descr* builtin_descrs[NUM_DTYPES];

static int make_builtin_descrs(void) {
  for (int t = 0; t < NUM_DTYPES; ++t) {
    int npy = npy_of(t);
    if (npy < 0) continue;
    builtin_descrs[t] = PyArray_DescrFromType(npy);
    if (!builtin_descrs[t]) return -1;
  }
  return 0;
}

/* --- attrs, for shape functions and create ------------------------------------------- */
PyObject* get_attr(PyObject* attrs, const char* name, OPM_Status* status) {
  PyObject* v = attrs ? PyDict_GetItemString(attrs, name) : NULL;
  if (!v) {
    char buf[512];
    snprintf(buf, sizeof buf, "no attr named '%s'", name ? name : "");
    h_SetStatus(status, OPM_INVALID_ARGUMENT, buf);
  }
  return v; /* borrowed */
}

int attr_int64(PyObject* attrs, const char* name, int64_t* out, OPM_Status* status,
                      const char* want) {
  PyObject* v = get_attr(attrs, name, status);
  if (!v) return -1;
  if (PyFloat_Check(v) || PyUnicode_Check(v) || !PyNumber_Check(v)) {
    char buf[512];
    PyObject* type_name = PyType_GetName(Py_TYPE(v));
    const char* tn = utf8(type_name);
    snprintf(buf, sizeof buf, "attr '%s' is a %s, not %s", name, tn ? tn : "?", want);
    Py_XDECREF(type_name);
    PyErr_Clear();
    h_SetStatus(status, OPM_INVALID_ARGUMENT, buf);
    return -1;
  }
  long long x = PyLong_AsLongLong(v);
  if (x == -1 && PyErr_Occurred()) {
    status_from_python(status, OPM_INVALID_ARGUMENT, name);
    return -1;
  }
  *out = (int64_t)x;
  h_SetStatus(status, OPM_OK, "");
  return 0;
}

/* --- the tables ----------------------------------------------------------------------- */
const OPM_Api host_api = {
    sizeof(OPM_Api), OPM_C_API_VERSION,
    h_NewStatus, h_DeleteStatus, h_SetStatus, h_GetCode, h_Message,
    h_DataTypeSize,
    h_NewOpDefinitionBuilder, h_AddInput, h_AddOutput, h_AddAttr, h_SetDoc, h_SetFlag,
    h_SetShapeFn, h_RegisterOpDefinition, h_DeleteOpDefinitionBuilder,
    h_SICNumInputs, h_SICGetInput, h_SICRank, h_SICDim, h_SICWithRank, h_SICWithRankAtLeast,
    h_SICMakeShape, h_SICUnknownShape, h_SICSetOutput, h_SICGetAttrType, h_SICGetAttrInt64,
    h_NewKernelBuilder, h_TypeConstraint, h_HostMemory, h_Priority, h_Label,
    h_RegisterKernelBuilder, h_DeleteKernelBuilder,
    h_OKCGetAttrType, h_OKCGetAttrInt32, h_OKCGetAttrInt64, h_OKCGetAttrFloat,
    h_OKCGetAttrBool, h_OKCGetAttrString, h_OKCFailure,
    h_NumInputs, h_NumOutputs, h_GetInput, h_AllocateOutput, h_OKCtxFailure,
    h_TensorType, h_NumDims, h_Dim, h_TensorData, h_TensorByteSize,
    h_TensorElementCount,
    h_OKCGetAttrInt64List, h_OKCGetAttrFloatList,
};

static const OPMB_BridgeApi bridge_api = {
    sizeof(OPMB_BridgeApi), OPMB_BRIDGE_API_VERSION, &host_api,
    b_kernel_create, b_kernel_compute, b_kernel_delete, b_kernel_name, b_shape_infer,
};

/* configure(make_error, extra_descrs) */
static PyObject* py_configure(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *fn, *extra;
  if (!PyArg_ParseTuple(args, "OO!", &fn, &PyDict_Type, &extra)) return NULL;
  SET_REF(make_error, Py_NewRef(fn));
  SET_REF(extra_descrs, Py_NewRef(extra));
  Py_RETURN_NONE;
}

static PyObject* KernelType = NULL;

static PyMethodDef module_methods[] = {
    {"load", py_load, METH_VARARGS, "load(path, check) -> dict"},
    {"infer", py_infer, METH_VARARGS, "infer(fn, input_shapes, attrs, num_outputs) -> list"},
    {"configure", py_configure, METH_VARARGS, "configure(make_error, extra_descrs)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "opmarket.registry._capi_host",
                                        "The host of opmarket/c_api.h and capi_bridge.h.", -1,
                                        module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__capi_host(void) {
  import_array();
  if (!builtin_descrs[OPM_FLOAT] && make_builtin_descrs() < 0) return NULL;
  if (!KernelType) {
    KernelType = new_kernel_type();
    if (!KernelType) return NULL;
  }
  PyObject* m = PyModule_Create(&module_def);
  if (!m) return NULL;
  PyObject* bridge = PyCapsule_New((void*)&bridge_api, OPMB_CAPSULE_NAME, NULL);
  if (!bridge || PyModule_AddObjectRef(m, "Kernel", KernelType) < 0 ||
      PyModule_AddObjectRef(m, "bridge", bridge) < 0 ||
      PyModule_AddIntConstant(m, "API_VERSION", OPM_C_API_VERSION) < 0 ||
      PyModule_AddIntConstant(m, "BRIDGE_API_VERSION", OPMB_BRIDGE_API_VERSION) < 0) {
    Py_XDECREF(bridge);
    Py_DECREF(m);
    return NULL;
  }
  Py_DECREF(bridge);
  return m;
}
