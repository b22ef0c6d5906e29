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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL opmarket_capi_host_ARRAY_API
#include <numpy/arrayobject.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opmarket/c_api.h"
#include "opmarket/capi_bridge.h"

/* The bridge's tensor dims are int64_t, numpy's npy_intp: the same on every 64-bit CPython. */
_Static_assert(sizeof(npy_intp) == sizeof(int64_t), "opmarket's C-ABI host needs 64-bit sizes");

#define SET_REF(slot, value)       \
  do {                             \
    PyObject* old_ = (PyObject*)(slot); \
    (slot) = (value);              \
    Py_XDECREF(old_);              \
  } while (0)

/* A str's UTF-8 (PyUnicode_AsUTF8 joins the limited API only in 3.13). */
static const char* utf8(PyObject* s) { return s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL; }

/* The host defines the table the inline calls would use; it never calls them itself. */
const OPM_Api* OPM_api = 0;

static PyObject* make_error = NULL;  /* (code, message) -> exception instance */
static PyObject* extra_descrs = NULL; /* {dtype number: numpy dtype} beyond numpy's own */

/* --- statuses ------------------------------------------------------------------------ */
struct OPM_Status {
  OPM_Code code;
  char* message;
};

static OPM_Status* h_NewStatus(void) {
  OPM_Status* s = (OPM_Status*)calloc(1, sizeof(OPM_Status));
  return s;
}
static void h_DeleteStatus(OPM_Status* s) {
  if (!s) return;
  free(s->message);
  free(s);
}
static void h_SetStatus(OPM_Status* s, OPM_Code code, const char* message) {
  if (!s) return;
  free(s->message);
  s->code = code;
  s->message = strdup(message ? message : "");
}
static OPM_Code h_GetCode(const OPM_Status* s) { return s ? s->code : OPM_INTERNAL; }
static const char* h_Message(const OPM_Status* s) {
  return s && s->message ? s->message : "";
}
static void status_from_python(OPM_Status* s, OPM_Code code, const char* context) {
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

static PyObject* raise_status(OPM_Code code, const char* message) {
  PyObject* exc = PyObject_CallFunction(make_error, "is", (int)code, message);
  if (exc) {
    PyErr_SetObject((PyObject*)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return NULL;
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
#define NUM_DTYPES 24
static PyArray_Descr* builtin_descrs[NUM_DTYPES];

static int make_builtin_descrs(void) {
  for (int t = 0; t < NUM_DTYPES; ++t) {
    int npy = npy_of(t);
    if (npy < 0) continue;
    builtin_descrs[t] = PyArray_DescrFromType(npy);
    if (!builtin_descrs[t]) return -1;
  }
  return 0;
}

static OPM_DataType dtype_of_array(PyArrayObject* a) {
  PyArray_Descr* d = PyArray_DESCR(a);
  int n = d->type_num;
  int size = (int)PyArray_ITEMSIZE(a);
  if (!PyArray_ISNOTSWAPPED(a)) return 0;
  if (PyTypeNum_ISBOOL(n)) return OPM_BOOL;
  if (PyTypeNum_ISSIGNED(n))
    return size == 1 ? OPM_INT8 : size == 2 ? OPM_INT16 : size == 4 ? OPM_INT32
         : size == 8 ? OPM_INT64 : 0;
  if (PyTypeNum_ISUNSIGNED(n))
    return size == 1 ? OPM_UINT8 : size == 2 ? OPM_UINT16 : size == 4 ? OPM_UINT32
         : size == 8 ? OPM_UINT64 : 0;
  if (n == NPY_HALF) return OPM_HALF;
  if (n == NPY_FLOAT) return OPM_FLOAT;
  if (n == NPY_DOUBLE) return OPM_DOUBLE;
  if (n == NPY_CFLOAT) return OPM_COMPLEX64;
  if (n == NPY_CDOUBLE) return OPM_COMPLEX128;
  if (extra_descrs) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(extra_descrs, &pos, &key, &value)) {
      if (PyArray_DescrCheck(value) && PyArray_EquivTypes(d, (PyArray_Descr*)value))
        return (OPM_DataType)PyLong_AsLong(key);
    }
  }
  return 0;
}

/* --- loading: what a plugin's init registers ------------------------------------------- */
typedef struct {
  PyObject* check; /* (kind, declaration) -> None or a message */
  PyObject* ops;
  PyObject* kernels;
} Session;

static Session* session = NULL;

struct OPM_OpDefinitionBuilder {
  PyObject* decl;
};
struct OPM_KernelBuilder {
  PyObject* decl;
};

static int append_str(PyObject* decl, const char* key, const char* value) {
  PyObject* list = PyDict_GetItemString(decl, key);
  PyObject* s = PyUnicode_DecodeUTF8(value ? value : "", strlen(value ? value : ""), "replace");
  if (!list || !s) {
    Py_XDECREF(s);
    PyErr_Clear();
    return -1;
  }
  int r = PyList_Append(list, s);
  Py_DECREF(s);
  if (r < 0) PyErr_Clear();
  return r;
}

static void set_item(PyObject* decl, const char* key, PyObject* value) {
  if (!value || PyDict_SetItemString(decl, key, value) < 0) PyErr_Clear();
  Py_XDECREF(value);
}

static OPM_OpDefinitionBuilder* h_NewOpDefinitionBuilder(const char* name) {
  OPM_OpDefinitionBuilder* b = (OPM_OpDefinitionBuilder*)calloc(1, sizeof *b);
  if (!b) return NULL;
  b->decl = Py_BuildValue("{s:s,s:[],s:[],s:[],s:s,s:{},s:O}", "name", name ? name : "",
                          "inputs", "outputs", "attrs", "doc", "", "flags", "shape_fn",
                          Py_None);
  if (!b->decl) {
    PyErr_Clear();
    free(b);
    return NULL;
  }
  return b;
}
static void h_AddInput(OPM_OpDefinitionBuilder* b, const char* spec) {
  if (b) append_str(b->decl, "inputs", spec);
}
static void h_AddOutput(OPM_OpDefinitionBuilder* b, const char* spec) {
  if (b) append_str(b->decl, "outputs", spec);
}
static void h_AddAttr(OPM_OpDefinitionBuilder* b, const char* spec) {
  if (b) append_str(b->decl, "attrs", spec);
}
static void h_SetDoc(OPM_OpDefinitionBuilder* b, const char* doc) {
  if (b) set_item(b->decl, "doc", PyUnicode_DecodeUTF8(doc ? doc : "", strlen(doc ? doc : ""),
                                                       "replace"));
}
static void h_SetFlag(OPM_OpDefinitionBuilder* b, int flag, int value) {
  if (!b) return;
  PyObject* flags = PyDict_GetItemString(b->decl, "flags");
  PyObject* key = PyLong_FromLong(flag);
  if (flags && key && PyDict_SetItem(flags, key, value ? Py_True : Py_False) < 0) PyErr_Clear();
  Py_XDECREF(key);
}
static void h_SetShapeFn(OPM_OpDefinitionBuilder* b, OPM_ShapeInferenceFn fn) {
  if (b) set_item(b->decl, "shape_fn", PyLong_FromVoidPtr((void*)fn));
}
static void h_DeleteOpDefinitionBuilder(OPM_OpDefinitionBuilder* b) {
  if (!b) return;
  Py_XDECREF(b->decl);
  free(b);
}

/* 1 when the declaration was accepted; else the status says why not. */
static int register_decl(const char* kind, PyObject* decl, int is_op, OPM_Status* status) {
  if (!session) {
    h_SetStatus(status, OPM_FAILED_PRECONDITION,
                "ops and kernels can only be registered while opmarket loads the library");
    return 0;
  }
  PyObject* found = PyObject_CallFunction(session->check, "sO", kind, decl);
  if (!found) {
    status_from_python(status, OPM_INTERNAL, "registration");
    return 0;
  }
  if (found != Py_None) {
    const char* msg = PyUnicode_Check(found) ? utf8(found) : "refused";
    h_SetStatus(status, OPM_INVALID_ARGUMENT, msg ? msg : "refused");
    Py_DECREF(found);
    PyErr_Clear();
    return 0;
  }
  Py_DECREF(found);
  if (PyList_Append(is_op ? session->ops : session->kernels, decl) < 0) {
    status_from_python(status, OPM_INTERNAL, "registration");
    return 0;
  }
  h_SetStatus(status, OPM_OK, "");
  return 1;
}

static void h_RegisterOpDefinition(OPM_OpDefinitionBuilder* b, OPM_Status* status) {
  if (!b) {
    h_SetStatus(status, OPM_INVALID_ARGUMENT, "no op definition builder");
    return;
  }
  register_decl("op", b->decl, 1, status);
  h_DeleteOpDefinitionBuilder(b);
}

static OPM_KernelBuilder* h_NewKernelBuilder(const char* op, const char* device,
                                             OPM_KernelCreateFn create,
                                             OPM_KernelComputeFn compute,
                                             OPM_KernelDeleteFn del) {
  OPM_KernelBuilder* b = (OPM_KernelBuilder*)calloc(1, sizeof *b);
  if (!b) return NULL;
  b->decl = Py_BuildValue("{s:s,s:s,s:N,s:N,s:N,s:{},s:[],s:i,s:s,s:s}", "op", op ? op : "",
                          "device", device ? device : "CPU",
                          "create", PyLong_FromVoidPtr((void*)create),
                          "compute", PyLong_FromVoidPtr((void*)compute),
                          "delete", PyLong_FromVoidPtr((void*)del),
                          "constraints", "host_memory", "priority", 0, "label", "",
                          "name", "");
  if (!b->decl) {
    PyErr_Clear();
    free(b);
    return NULL;
  }
  return b;
}
static void h_TypeConstraint(OPM_KernelBuilder* b, const char* attr, OPM_DataType dtype,
                             OPM_Status* status) {
  if (!b || !attr) {
    h_SetStatus(status, OPM_INVALID_ARGUMENT, "type constraint without a builder or attr");
    return;
  }
  PyObject* cons = PyDict_GetItemString(b->decl, "constraints");
  PyObject* list = PyDict_GetItemString(cons, attr);
  if (!list) {
    list = PyList_New(0);
    if (!list || PyDict_SetItemString(cons, attr, list) < 0) {
      Py_XDECREF(list);
      status_from_python(status, OPM_INTERNAL, "type constraint");
      return;
    }
    Py_DECREF(list);
  }
  PyObject* n = PyLong_FromLong(dtype);
  if (!n || PyList_Append(list, n) < 0) {
    Py_XDECREF(n);
    status_from_python(status, OPM_INTERNAL, "type constraint");
    return;
  }
  Py_DECREF(n);
  h_SetStatus(status, OPM_OK, "");
}
static void h_HostMemory(OPM_KernelBuilder* b, const char* arg) {
  if (b) append_str(b->decl, "host_memory", arg);
}
static void h_Priority(OPM_KernelBuilder* b, int32_t priority) {
  if (b) set_item(b->decl, "priority", PyLong_FromLong(priority));
}
static void h_Label(OPM_KernelBuilder* b, const char* label) {
  if (b) set_item(b->decl, "label", PyUnicode_FromString(label ? label : ""));
}
static void h_DeleteKernelBuilder(OPM_KernelBuilder* b) {
  if (!b) return;
  Py_XDECREF(b->decl);
  free(b);
}
/* One registered kernel, as the Kernel type and the bridges reach it: made when the kernel
 * registers, never freed (a library is never unloaded). Its address is the kernel handle. */
struct OPMB_Kernel {
  OPM_KernelCreateFn create;
  OPM_KernelComputeFn compute;
  OPM_KernelDeleteFn del;
  char* name; /* "Op (kernel Name)", for messages */
};

static OPMB_Kernel* new_kernel(PyObject* decl) {
  PyObject* create = PyDict_GetItemString(decl, "create");
  PyObject* compute = PyDict_GetItemString(decl, "compute");
  PyObject* del = PyDict_GetItemString(decl, "delete");
  PyObject* name = PyUnicode_FromFormat("%S (kernel %S)", PyDict_GetItemString(decl, "op"),
                                        PyDict_GetItemString(decl, "name"));
  const char* text = utf8(name);
  OPMB_Kernel* k = (OPMB_Kernel*)calloc(1, sizeof *k);
  if (k && text && create && compute && del) {
    k->create = (OPM_KernelCreateFn)PyLong_AsVoidPtr(create);
    k->compute = (OPM_KernelComputeFn)PyLong_AsVoidPtr(compute);
    k->del = (OPM_KernelDeleteFn)PyLong_AsVoidPtr(del);
    k->name = strdup(text);
  }
  Py_XDECREF(name);
  if (!k || !k->name || PyErr_Occurred()) {
    PyErr_Clear();
    if (k) free(k->name);
    free(k);
    return NULL;
  }
  return k;
}

static void h_RegisterKernelBuilder(const char* name, OPM_KernelBuilder* b,
                                    OPM_Status* status) {
  if (!b) {
    h_SetStatus(status, OPM_INVALID_ARGUMENT, "no kernel builder");
    return;
  }
  set_item(b->decl, "name", PyUnicode_FromString(name ? name : ""));
  if (register_decl("kernel", b->decl, 0, status)) {
    OPMB_Kernel* k = new_kernel(b->decl);
    if (k) set_item(b->decl, "handle", PyLong_FromVoidPtr(k));
    else h_SetStatus(status, OPM_RESOURCE_EXHAUSTED, "cannot record the kernel");
  }
  h_DeleteKernelBuilder(b);
}

/* --- attrs, for shape functions and create ------------------------------------------- */
static PyObject* get_attr(PyObject* attrs, const char* name, OPM_Status* status) {
  PyObject* v = attrs ? PyDict_GetItemString(attrs, name) : NULL;
  if (!v) {
    char buf[512];
    snprintf(buf, sizeof buf, "no attr named '%s'", name ? name : "");
    h_SetStatus(status, OPM_INVALID_ARGUMENT, buf);
  }
  return v; /* borrowed */
}

static int attr_int64(PyObject* attrs, const char* name, int64_t* out, OPM_Status* status,
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

/* --- shape inference ------------------------------------------------------------------ */
struct OPM_ShapeHandle {
  struct OPM_ShapeHandle* next; /* the context's list, freed when it ends */
  int64_t rank;                 /* -1: unknown */
  int64_t dims[];
};

struct OPM_ShapeInferenceContext {
  PyObject* attrs;
  Py_ssize_t num_inputs;
  OPM_ShapeHandle** inputs;
  Py_ssize_t num_outputs;
  const OPM_ShapeHandle** outputs;
  OPM_ShapeHandle* handles;
};

static OPM_ShapeHandle* new_handle(OPM_ShapeInferenceContext* c, int64_t rank) {
  OPM_ShapeHandle* h = (OPM_ShapeHandle*)malloc(sizeof *h + sizeof(int64_t) *
                                                (size_t)(rank > 0 ? rank : 0));
  if (!h) return NULL;
  h->rank = rank;
  h->next = c->handles;
  c->handles = h;
  return h;
}

static int64_t h_SICNumInputs(OPM_ShapeInferenceContext* c) { return c->num_inputs; }
static OPM_ShapeHandle* h_SICGetInput(OPM_ShapeInferenceContext* c, int i, OPM_Status* s) {
  if (i < 0 || i >= c->num_inputs) {
    char buf[128];
    snprintf(buf, sizeof buf, "input index %d out of range: %zd inputs", i, c->num_inputs);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  h_SetStatus(s, OPM_OK, "");
  return c->inputs[i];
}
static int64_t h_SICRank(OPM_ShapeInferenceContext* c, const OPM_ShapeHandle* h) {
  (void)c;
  return h ? h->rank : -1;
}
static int64_t h_SICDim(OPM_ShapeInferenceContext* c, const OPM_ShapeHandle* h, int64_t i) {
  (void)c;
  if (!h || h->rank < 0) return -1;
  if (i < 0) i += h->rank;
  if (i < 0 || i >= h->rank) return -1;
  return h->dims[i];
}
static OPM_ShapeHandle* h_SICMakeShape(OPM_ShapeInferenceContext* c, const int64_t* dims,
                                       int64_t rank) {
  OPM_ShapeHandle* h = new_handle(c, rank);
  if (h && rank > 0) {
    for (int64_t i = 0; i < rank; ++i) h->dims[i] = dims && dims[i] >= 0 ? dims[i] : -1;
  }
  return h;
}
static OPM_ShapeHandle* h_SICUnknownShape(OPM_ShapeInferenceContext* c) {
  return new_handle(c, -1);
}
static OPM_ShapeHandle* h_SICWithRank(OPM_ShapeInferenceContext* c, const OPM_ShapeHandle* h,
                                      int64_t rank, OPM_Status* s) {
  if (!h) {
    h_SetStatus(s, OPM_INVALID_ARGUMENT, "no shape");
    return NULL;
  }
  if (h->rank < 0) {
    h_SetStatus(s, OPM_OK, "");
    return h_SICMakeShape(c, NULL, rank);
  }
  if (h->rank != rank) {
    char buf[128];
    snprintf(buf, sizeof buf, "Shape must be rank %lld but is rank %lld", (long long)rank,
             (long long)h->rank);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  h_SetStatus(s, OPM_OK, "");
  return (OPM_ShapeHandle*)h;
}
static OPM_ShapeHandle* h_SICWithRankAtLeast(OPM_ShapeInferenceContext* c,
                                             const OPM_ShapeHandle* h, int64_t rank,
                                             OPM_Status* s) {
  (void)c;
  if (!h) {
    h_SetStatus(s, OPM_INVALID_ARGUMENT, "no shape");
    return NULL;
  }
  if (h->rank >= 0 && h->rank < rank) {
    char buf[128];
    snprintf(buf, sizeof buf, "Shape must be at least rank %lld but is rank %lld",
             (long long)rank, (long long)h->rank);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  h_SetStatus(s, OPM_OK, "");
  return (OPM_ShapeHandle*)h;
}
static void h_SICSetOutput(OPM_ShapeInferenceContext* c, int i, const OPM_ShapeHandle* h,
                           OPM_Status* s) {
  if (i < 0 || i >= c->num_outputs || !h) {
    char buf[128];
    snprintf(buf, sizeof buf, "output index %d out of range: %zd outputs", i, c->num_outputs);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return;
  }
  c->outputs[i] = h;
  h_SetStatus(s, OPM_OK, "");
}
static void h_SICGetAttrType(OPM_ShapeInferenceContext* c, const char* name, OPM_DataType* v,
                             OPM_Status* s) {
  int64_t x;
  if (attr_int64(c->attrs, name, &x, s, "a type") == 0) *v = (OPM_DataType)x;
}
static void h_SICGetAttrInt64(OPM_ShapeInferenceContext* c, const char* name, int64_t* v,
                              OPM_Status* s) {
  attr_int64(c->attrs, name, v, s, "an int");
}

static OPM_ShapeHandle* handle_from_python(OPM_ShapeInferenceContext* c, PyObject* shape) {
  if (shape == Py_None) return new_handle(c, -1);
  PyObject* seq = PySequence_Tuple(shape);
  if (!seq) return NULL;
  Py_ssize_t n = PyTuple_Size(seq);
  OPM_ShapeHandle* h = new_handle(c, n);
  for (Py_ssize_t i = 0; h && i < n; ++i) {
    PyObject* d = PyTuple_GetItem(seq, i);
    h->dims[i] = d == Py_None ? -1 : PyLong_AsLongLong(d);
  }
  Py_DECREF(seq);
  if (!h) PyErr_NoMemory();
  return PyErr_Occurred() ? NULL : h;
}

static PyObject* handle_to_python(const OPM_ShapeHandle* h) {
  if (!h || h->rank < 0) Py_RETURN_NONE;
  PyObject* t = PyTuple_New(h->rank);
  for (int64_t i = 0; t && i < h->rank; ++i) {
    PyObject* d = h->dims[i] < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(h->dims[i]);
    if (!d || PyTuple_SetItem(t, i, d) < 0) {
      Py_CLEAR(t);
      break;
    }
  }
  return t;
}

/* infer(fn, input_shapes, attrs, num_outputs) -> list of output shapes (None: not set) */
static PyObject* py_infer(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *fn_obj, *shapes, *attrs;
  Py_ssize_t num_outputs;
  if (!PyArg_ParseTuple(args, "OO!O!n", &fn_obj, &PyList_Type, &shapes, &PyDict_Type, &attrs,
                        &num_outputs))
    return NULL;
  OPM_ShapeInferenceFn fn = (OPM_ShapeInferenceFn)PyLong_AsVoidPtr(fn_obj);
  if (!fn) return NULL;
  OPM_ShapeInferenceContext c = {attrs, PyList_Size(shapes), NULL, num_outputs, NULL,
                                 NULL};
  PyObject* result = NULL;
  OPM_Status status = {OPM_OK, NULL};
  c.inputs = (OPM_ShapeHandle**)calloc((size_t)c.num_inputs + 1, sizeof(OPM_ShapeHandle*));
  c.outputs = (const OPM_ShapeHandle**)calloc((size_t)num_outputs + 1,
                                              sizeof(OPM_ShapeHandle*));
  if (!c.inputs || !c.outputs) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < c.num_inputs; ++i) {
    c.inputs[i] = handle_from_python(&c, PyList_GetItem(shapes, i));
    if (!c.inputs[i]) goto done;
  }
  fn(&c, &status);
  if (status.code != OPM_OK) {
    raise_status(status.code, h_Message(&status));
    goto done;
  }
  result = PyList_New(num_outputs);
  for (Py_ssize_t i = 0; result && i < num_outputs; ++i) {
    PyObject* s = c.outputs[i] ? handle_to_python(c.outputs[i]) : Py_NewRef(Py_None);
    if (!s) {
      Py_CLEAR(result);
      break;
    }
    if (PyList_SetItem(result, i, s) < 0) Py_CLEAR(result);
  }
done:
  while (c.handles) {
    OPM_ShapeHandle* next = c.handles->next;
    free(c.handles);
    c.handles = next;
  }
  free(c.inputs);
  free((void*)c.outputs);
  free(status.message);
  return result;
}

/* --- kernels: the two interfaces ------------------------------------------------------
 * A plugin's create and compute get the host's OPM_OpKernelConstruction/OPM_OpKernelContext,
 * which wrap an implementation of the bridge interfaces (opmarket/capi_bridge.h) and record
 * the plugin's failure. The Python path's implementations (a dict of attrs, numpy arrays)
 * follow; a bridge brings its own. */
struct OPM_OpKernelConstruction {
  OPMB_KernelConstruction* impl;
  OPM_Status status; /* what OPM_OpKernelConstruction_Failure reported */
};

struct OPM_OpKernelContext {
  OPMB_KernelContext* impl;
  const OPMB_KernelContextOps* ops;
  int num_inputs, num_outputs; /* asked once per compute */
  uint64_t allocated;          /* bit i: output i was allocated (the first 64) */
  OPM_Status status;           /* what OPM_OpKernelContext_Failure reported */
};

/* A plugin's OPM_Tensor is the implementation's OPMB_Tensor. */
#define AS_BRIDGE(t) ((const OPMB_Tensor*)(const void*)(t))
#define AS_PLUGIN(t) ((OPM_Tensor*)(void*)(t))

static void clear_status(OPM_Status* s) {
  if (s && s->code != OPM_OK) h_SetStatus(s, OPM_OK, "");
}

static void unimplemented(OPM_Status* s, const char* what) {
  char buf[160];
  snprintf(buf, sizeof buf, "%s is not available here (the framework bridge lacks it)", what);
  h_SetStatus(s, OPM_UNIMPLEMENTED, buf);
}

static void h_OKCGetAttrType(OPM_OpKernelConstruction* c, const char* name, OPM_DataType* v,
                             OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_type) {
    unimplemented(s, "a type attr");
    return;
  }
  c->impl->ops->get_attr_type(c->impl, name, v, s);
}
static void h_OKCGetAttrInt64(OPM_OpKernelConstruction* c, const char* name, int64_t* v,
                              OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_int64) {
    unimplemented(s, "an int attr");
    return;
  }
  c->impl->ops->get_attr_int64(c->impl, name, v, s);
}
static void h_OKCGetAttrInt32(OPM_OpKernelConstruction* c, const char* name, int32_t* v,
                              OPM_Status* s) {
  int64_t x = 0;
  OPM_Status own = {OPM_OK, NULL};
  OPM_Status* st = s ? s : &own;
  h_OKCGetAttrInt64(c, name, &x, st);
  if (st->code == OPM_OK) {
    if (x < INT32_MIN || x > INT32_MAX) {
      char buf[512];
      snprintf(buf, sizeof buf, "attr '%s' value %lld does not fit in int32", name,
               (long long)x);
      h_SetStatus(st, OPM_INVALID_ARGUMENT, buf);
    } else {
      *v = (int32_t)x;
    }
  }
  free(own.message);
}
static void h_OKCGetAttrFloat(OPM_OpKernelConstruction* c, const char* name, float* v,
                              OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_float) {
    unimplemented(s, "a float attr");
    return;
  }
  c->impl->ops->get_attr_float(c->impl, name, v, s);
}
static void h_OKCGetAttrBool(OPM_OpKernelConstruction* c, const char* name, uint8_t* v,
                             OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_bool) {
    unimplemented(s, "a bool attr");
    return;
  }
  c->impl->ops->get_attr_bool(c->impl, name, v, s);
}
static void h_OKCGetAttrString(OPM_OpKernelConstruction* c, const char* name, char* v,
                               size_t max_length, size_t* length, OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_string) {
    unimplemented(s, "a string attr");
    return;
  }
  c->impl->ops->get_attr_string(c->impl, name, v, max_length, length, s);
}
static void h_OKCFailure(OPM_OpKernelConstruction* c, OPM_Status* s) {
  if (c->status.code == OPM_OK) h_SetStatus(&c->status, s ? s->code : OPM_UNKNOWN,
                                            h_Message(s));
}

static int h_NumInputs(OPM_OpKernelContext* c) { return c->num_inputs; }
static int h_NumOutputs(OPM_OpKernelContext* c) { return c->num_outputs; }
static OPM_Tensor* h_GetInput(OPM_OpKernelContext* c, int i, OPM_Status* s) {
  int n = c->num_inputs;
  if (i < 0 || i >= n) {
    char buf[128];
    snprintf(buf, sizeof buf, "input index %d out of range: %d inputs", i, n);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  clear_status(s);
  const OPMB_Tensor* t = c->ops->get_input(c->impl, i, s);
  if (!t && s && s->code == OPM_OK) h_SetStatus(s, OPM_INTERNAL, "the bridge gave no input");
  return AS_PLUGIN(t);
}
static OPM_Tensor* h_AllocateOutput(OPM_OpKernelContext* c, int i, OPM_DataType dtype,
                                    const int64_t* dims, int num_dims, OPM_Status* s) {
  char buf[160];
  int n = c->num_outputs;
  if (i < 0 || i >= n) {
    snprintf(buf, sizeof buf, "output index %d out of range: %d outputs", i, n);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  if (num_dims < 0 || (num_dims > 0 && !dims)) {
    snprintf(buf, sizeof buf, "cannot allocate an output of rank %d", num_dims);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  for (int d = 0; d < num_dims; ++d) {
    if (dims[d] < 0) {
      h_SetStatus(s, OPM_INVALID_ARGUMENT, "negative dimension in AllocateOutput");
      return NULL;
    }
  }
  clear_status(s);
  const OPMB_Tensor* t = c->ops->allocate_output(c->impl, i, dtype, dims, num_dims, s);
  if (!t) {
    if (s && s->code == OPM_OK) h_SetStatus(s, OPM_INTERNAL, "the bridge gave no output");
    return NULL;
  }
  if (i < 64) c->allocated |= (uint64_t)1 << i;
  return AS_PLUGIN(t);
}
static void h_OKCtxFailure(OPM_OpKernelContext* c, OPM_Status* s) {
  if (c->status.code == OPM_OK) h_SetStatus(&c->status, s ? s->code : OPM_UNKNOWN,
                                            h_Message(s));
}

/* NULL-safe: a failed GetInput or AllocateOutput returns NULL, and a kernel that goes on
 * reading it must not crash the process (its failure status is reported instead). */
static OPM_DataType h_TensorType(const OPM_Tensor* t) { return t ? AS_BRIDGE(t)->dtype : 0; }
static int h_NumDims(const OPM_Tensor* t) { return t ? AS_BRIDGE(t)->ndim : 0; }
static int64_t h_Dim(const OPM_Tensor* t, int i) {
  return t && i >= 0 && i < AS_BRIDGE(t)->ndim ? AS_BRIDGE(t)->dims[i] : -1;
}
static void* h_TensorData(const OPM_Tensor* t) { return t ? AS_BRIDGE(t)->data : NULL; }
static size_t h_TensorByteSize(const OPM_Tensor* t) { return t ? AS_BRIDGE(t)->nbytes : 0; }
static int64_t h_TensorElementCount(const OPM_Tensor* t) {
  if (!t) return 0;
  int64_t count = 1;
  for (int d = 0; d < AS_BRIDGE(t)->ndim; ++d) count *= AS_BRIDGE(t)->dims[d];
  return count;
}

/* --- create, compute, delete: the bridge table, which the Kernel type uses too -------- */
static void fail_with_name(OPM_Status* status, const OPMB_Kernel* k, const OPM_Status* why) {
  size_t size = strlen(k->name) + strlen(h_Message(why)) + 3;
  char* text = (char*)malloc(size);
  if (text) snprintf(text, size, "%s: %s", k->name, h_Message(why));
  h_SetStatus(status, why->code, text ? text : h_Message(why));
  free(text);
}

static void* b_kernel_create(const OPMB_Kernel* k, OPMB_KernelConstruction* impl,
                             OPM_Status* status) {
  if (!k->create) {
    clear_status(status);
    return NULL;
  }
  OPM_OpKernelConstruction c = {impl, {OPM_OK, NULL}};
  void* state = k->create(&c);
  if (c.status.code != OPM_OK) {
    if (state && k->del) k->del(state);
    fail_with_name(status, k, &c.status);
    state = NULL;
  } else {
    clear_status(status);
  }
  free(c.status.message);
  return state;
}

/* compute with the numbers of inputs and outputs known (the Python path knows them). */
static void run_compute(const OPMB_Kernel* k, void* state, OPMB_KernelContext* impl,
                        int num_inputs, int num_outputs, OPM_Status* status) {
  OPM_OpKernelContext c = {impl, impl->ops, num_inputs, num_outputs, 0, {OPM_OK, NULL}};
  k->compute(state, &c);
  if (c.status.code != OPM_OK) {
    fail_with_name(status, k, &c.status);
    free(c.status.message);
    return;
  }
  int checked = num_outputs < 64 ? num_outputs : 64;
  uint64_t all = checked == 64 ? ~(uint64_t)0 : ((uint64_t)1 << checked) - 1;
  if ((c.allocated & all) != all) {
    int missing = 0;
    while (c.allocated & ((uint64_t)1 << missing)) ++missing;
    char buf[64];
    OPM_Status why = {OPM_INTERNAL, buf};
    snprintf(buf, sizeof buf, "the kernel allocated no output %d", missing);
    fail_with_name(status, k, &why);
    return;
  }
  clear_status(status);
}

static void b_kernel_compute(const OPMB_Kernel* k, void* state, OPMB_KernelContext* impl,
                             OPM_Status* status) {
  run_compute(k, state, impl, impl->ops->num_inputs(impl), impl->ops->num_outputs(impl),
              status);
}

static void b_kernel_delete(const OPMB_Kernel* k, void* state) {
  if (state && k->del) k->del(state);
}

static const char* b_kernel_name(const OPMB_Kernel* k) { return k->name; }

/* --- the Python path's construction: attrs from a dict (the GIL is held) --------------- */
typedef struct {
  OPMB_KernelConstruction base;
  PyObject* attrs;
} DictConstruction;

static PyObject* attrs_of(OPMB_KernelConstruction* c) { return ((DictConstruction*)c)->attrs; }

static void d_attr_type(OPMB_KernelConstruction* c, const char* name, OPM_DataType* v,
                        OPM_Status* s) {
  int64_t x;
  if (attr_int64(attrs_of(c), name, &x, s, "a type") == 0) *v = (OPM_DataType)x;
}
static void d_attr_int64(OPMB_KernelConstruction* c, const char* name, int64_t* v,
                         OPM_Status* s) {
  attr_int64(attrs_of(c), name, v, s, "an int");
}
static void d_attr_float(OPMB_KernelConstruction* c, const char* name, float* v,
                         OPM_Status* s) {
  PyObject* o = get_attr(attrs_of(c), name, s);
  if (!o) return;
  double x = PyFloat_AsDouble(o);
  if (x == -1.0 && PyErr_Occurred()) {
    status_from_python(s, OPM_INVALID_ARGUMENT, name);
    return;
  }
  *v = (float)x;
}
static void d_attr_bool(OPMB_KernelConstruction* c, const char* name, uint8_t* v,
                        OPM_Status* s) {
  PyObject* o = get_attr(attrs_of(c), name, s);
  if (!o) return;
  if (!PyBool_Check(o)) {
    h_SetStatus(s, OPM_INVALID_ARGUMENT, "attr is not a bool");
    return;
  }
  *v = o == Py_True;
}
static void d_attr_string(OPMB_KernelConstruction* c, const char* name, char* v,
                          size_t max_length, size_t* length, OPM_Status* s) {
  PyObject* o = get_attr(attrs_of(c), name, s);
  if (!o) return;
  Py_ssize_t n = 0;
  const char* text = NULL;
  if (PyUnicode_Check(o)) {
    text = PyUnicode_AsUTF8AndSize(o, &n);
  } else if (PyBytes_Check(o)) {
    text = PyBytes_AsString(o);
    n = PyBytes_Size(o);
  }
  if (!text) {
    PyErr_Clear();
    h_SetStatus(s, OPM_INVALID_ARGUMENT, "attr is not a string");
    return;
  }
  if (length) *length = (size_t)n;
  if (v) memcpy(v, text, (size_t)n < max_length ? (size_t)n : max_length);
}

static const OPMB_KernelConstructionOps dict_construction_ops = {
    sizeof(OPMB_KernelConstructionOps), d_attr_type, d_attr_int64, d_attr_float,
    d_attr_bool, d_attr_string};

/* --- the Python path's context: numpy arrays in, numpy arrays out (the GIL is held) ---- */
typedef struct {
  OPMB_KernelContext base;
  int num_inputs;
  OPMB_Tensor* inputs;
  int num_outputs;
  PyObject** outputs;
  OPMB_Tensor* out_tensors;
} NumpyContext;

static int n_num_inputs(OPMB_KernelContext* c) { return ((NumpyContext*)c)->num_inputs; }
static int n_num_outputs(OPMB_KernelContext* c) { return ((NumpyContext*)c)->num_outputs; }
static const OPMB_Tensor* n_get_input(OPMB_KernelContext* c, int i, OPM_Status* s) {
  (void)s; /* the host checked i */
  return &((NumpyContext*)c)->inputs[i];
}

static void fill_tensor(OPMB_Tensor* t, OPM_DataType dtype, PyArrayObject* a) {
  t->dtype = dtype;
  t->ndim = PyArray_NDIM(a);
  t->dims = (const int64_t*)PyArray_DIMS(a);
  t->data = PyArray_DATA(a);
  t->nbytes = (size_t)PyArray_NBYTES(a);
}

static const OPMB_Tensor* n_allocate_output(OPMB_KernelContext* ctx, int i, OPM_DataType dtype,
                                            const int64_t* dims, int num_dims,
                                            OPM_Status* s) {
  NumpyContext* c = (NumpyContext*)ctx;
  char buf[160];
  if (num_dims > NPY_MAXDIMS) {
    snprintf(buf, sizeof buf, "cannot allocate an output of rank %d", num_dims);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  npy_intp* shape = (npy_intp*)dims; /* the same size (asserted above), checked >= 0 */
  PyObject* array;
  PyArray_Descr* builtin = dtype >= 0 && dtype < NUM_DTYPES ? builtin_descrs[dtype] : NULL;
  if (builtin) {
    Py_INCREF((PyObject*)builtin); /* PyArray_NewFromDescr steals it */
    array = PyArray_NewFromDescr(&PyArray_Type, builtin, num_dims, shape, NULL, NULL, 0, NULL);
  } else {
    PyObject* key = PyLong_FromLong(dtype);
    PyObject* descr = key && extra_descrs ? PyDict_GetItemWithError(extra_descrs, key) : NULL;
    Py_XDECREF(key);
    if (!descr) {
      PyErr_Clear();
      snprintf(buf, sizeof buf, "cannot allocate an output of dtype %d", (int)dtype);
      h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
      return NULL;
    }
    Py_INCREF(descr);
    array = PyArray_Empty(num_dims, shape, (PyArray_Descr*)descr, 0);
  }
  if (!array) {
    status_from_python(s, OPM_RESOURCE_EXHAUSTED, "AllocateOutput");
    return NULL;
  }
  SET_REF(c->outputs[i], array);
  OPMB_Tensor* t = &c->out_tensors[i];
  fill_tensor(t, dtype, (PyArrayObject*)array);
  return t;
}

static const OPMB_KernelContextOps numpy_context_ops = {
    sizeof(OPMB_KernelContextOps), n_num_inputs, n_num_outputs, n_get_input,
    n_allocate_output};

/* --- the Kernel type: one kernel instance for the dispatch wrapper --------------------- */
typedef struct {
  PyObject_HEAD
  const OPMB_Kernel* kernel;
  void* state;
  int live;
  int num_outputs;
  PyObject* name;
} KernelObject;

static PyObject* KernelType = NULL;

static void release(KernelObject* k) {
  if (k->live) b_kernel_delete(k->kernel, k->state);
  k->state = NULL;
  k->live = 0;
}

/* Raise the Python error for a failed status of the kernel. */
static void raise_kernel_status(const OPM_Status* s) { raise_status(s->code, h_Message(s)); }

static int Kernel_init(PyObject* op, PyObject* args, PyObject* kwargs) {
  KernelObject* self = (KernelObject*)op;
  (void)kwargs;
  PyObject *handle, *attrs;
  int num_outputs;
  if (!PyArg_ParseTuple(args, "OO!i", &handle, &PyDict_Type, &attrs, &num_outputs))
    return -1;
  release(self);
  const OPMB_Kernel* kernel = (const OPMB_Kernel*)PyLong_AsVoidPtr(handle);
  if (!kernel) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "no kernel handle");
    return -1;
  }
  PyObject* name = PyUnicode_FromString(kernel->name);
  if (!name) return -1;
  SET_REF(self->name, name);
  self->kernel = kernel;
  self->num_outputs = num_outputs;
  DictConstruction c = {{&dict_construction_ops}, attrs};
  OPM_Status status = {OPM_OK, NULL};
  void* state = b_kernel_create(kernel, &c.base, &status);
  if (status.code != OPM_OK) {
    raise_kernel_status(&status);
    free(status.message);
    return -1;
  }
  free(status.message);
  self->state = state;
  self->live = 1;
  return 0;
}

static void Kernel_dealloc(PyObject* op) {
  KernelObject* self = (KernelObject*)op;
  PyTypeObject* type = Py_TYPE(op);
  release(self);
  Py_XDECREF(self->name);
  freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
  tp_free(op);
  Py_DECREF(type);
}

static PyObject* Kernel_close(PyObject* op, PyObject* unused) {
  (void)unused;
  release((KernelObject*)op);
  Py_RETURN_NONE;
}

static PyObject* Kernel_prepare(PyObject* op, PyObject* const* args, Py_ssize_t n) {
  (void)op, (void)args, (void)n;
  Py_RETURN_NONE;
}

static int input_error(KernelObject* self, int i, PyObject* x) {
  PyObject* type_name = PyType_GetName(Py_TYPE(x));
  if (type_name) {
    PyErr_Format(PyExc_TypeError, "%U: input %d is a %U, not a numpy array", self->name, i,
                 type_name);
    Py_DECREF(type_name);
  }
  return -1;
}

#define SMALL 8

static PyObject* Kernel_compute(PyObject* op, PyObject* const* args, Py_ssize_t nargs) {
  KernelObject* self = (KernelObject*)op;
  if (!self->live) {
    PyErr_SetString(PyExc_RuntimeError, "the kernel was closed");
    return NULL;
  }
  OPMB_Tensor in_small[SMALL], out_small[SMALL];
  PyObject* out_obj_small[SMALL];
  PyObject* keep_small[SMALL];
  int nin = (int)nargs, nout = self->num_outputs;
  OPMB_Tensor* ins = nin <= SMALL ? in_small
      : (OPMB_Tensor*)malloc(sizeof(OPMB_Tensor) * (size_t)nin);
  PyObject** keep = nin <= SMALL ? keep_small
      : (PyObject**)malloc(sizeof(PyObject*) * (size_t)nin);
  OPMB_Tensor* outs = nout <= SMALL ? out_small
      : (OPMB_Tensor*)malloc(sizeof(OPMB_Tensor) * (size_t)nout);
  PyObject** out_objs = nout <= SMALL ? out_obj_small
      : (PyObject**)malloc(sizeof(PyObject*) * (size_t)nout);
  PyObject* result = NULL;
  NumpyContext c = {{&numpy_context_ops}, nin, ins, nout, out_objs, outs};
  OPM_Status status = {OPM_OK, NULL};
  int kept = 0;
  if (!ins || !keep || !outs || !out_objs) {
    PyErr_NoMemory();
    goto done;
  }
  for (int i = 0; i < nout; ++i) out_objs[i] = NULL;
  for (int i = 0; i < nin; ++i) {
    PyObject* x = args[i];
    if (!PyArray_Check(x)) {
      input_error(self, i, x);
      goto done;
    }
    PyArrayObject* a = (PyArrayObject*)x;
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) {
      a = (PyArrayObject*)PyArray_NewCopy(a, NPY_CORDER); /* contiguous and aligned */
      if (!a) goto done;
      keep[kept++] = (PyObject*)a;
    }
    OPM_DataType dtype = dtype_of_array(a);
    if (!dtype) {
      PyErr_Format(PyExc_TypeError, "%U: input %d has a dtype the C API has no number for",
                   self->name, i);
      goto done;
    }
    fill_tensor(&ins[i], dtype, a);
  }
  run_compute(self->kernel, self->state, &c.base, nin, nout, &status);
  if (status.code != OPM_OK) {
    raise_kernel_status(&status);
    goto done;
  }
  if (PyErr_Occurred()) goto done;
  for (int i = 64; i < nout; ++i) { /* b_kernel_compute checked the first 64 */
    if (!out_objs[i]) {
      PyErr_Format(PyExc_RuntimeError, "%U: the kernel allocated no output %d", self->name, i);
      goto done;
    }
  }
  if (nout == 1) {
    result = out_objs[0];
    out_objs[0] = NULL;
  } else {
    result = PyTuple_New(nout);
    for (int i = 0; result && i < nout; ++i) {
      PyObject* item = out_objs[i];
      out_objs[i] = NULL;
      if (PyTuple_SetItem(result, i, item) < 0) Py_CLEAR(result);
    }
  }
done:
  if (out_objs)
    for (int i = 0; i < nout; ++i) Py_XDECREF(out_objs[i]);
  for (int i = 0; i < kept; ++i) Py_DECREF(keep[i]);
  free(status.message);
  if (ins != in_small) free(ins);
  if (keep != keep_small) free(keep);
  if (outs != out_small) free(outs);
  if (out_objs != out_obj_small) free(out_objs);
  return result;
}

static PyMethodDef Kernel_methods[] = {
    {"compute", (PyCFunction)(void (*)(void))Kernel_compute, METH_FASTCALL,
     "Run the plugin's compute on numpy arrays; one output, or a tuple of them."},
    {"prepare", (PyCFunction)(void (*)(void))Kernel_prepare, METH_FASTCALL, "Nothing to do."},
    {"close", Kernel_close, METH_NOARGS, "Call the plugin's delete."},
    {NULL, NULL, 0, NULL}};

static PyType_Slot Kernel_slots[] = {
    {Py_tp_doc, (void*)"A C-ABI kernel instance: Kernel(handle, attrs, num_outputs)."},
    {Py_tp_init, (void*)Kernel_init},
    {Py_tp_new, (void*)PyType_GenericNew},
    {Py_tp_dealloc, (void*)Kernel_dealloc},
    {Py_tp_methods, (void*)Kernel_methods},
    {0, NULL}};

static PyType_Spec Kernel_spec = {"opmarket.registry._capi_host.Kernel", sizeof(KernelObject),
                                  0, Py_TPFLAGS_DEFAULT, Kernel_slots};

/* --- the tables ----------------------------------------------------------------------- */
static const OPM_Api host_api = {
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
};

static const OPMB_BridgeApi bridge_api = {
    sizeof(OPMB_BridgeApi), OPMB_BRIDGE_API_VERSION, &host_api,
    b_kernel_create, b_kernel_compute, b_kernel_delete, b_kernel_name,
};

/* load(path, check) -> dict: dlopen the library, run its entry point with the table. */
static PyObject* py_load(PyObject* self, PyObject* args) {
  (void)self;
  const char* path;
  PyObject* check;
  if (!PyArg_ParseTuple(args, "sO", &path, &check)) return NULL;
  if (session) {
    PyErr_SetString(PyExc_RuntimeError, "a plugin's init loaded another library");
    return NULL;
  }
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    return Py_BuildValue("{s:s,s:s}", "error", "dlopen", "message", err ? err : "dlopen failed");
  }
  OPM_InitPluginFn init;
  /* dlsym returns an object pointer; POSIX guarantees it converts to a function pointer. */
  *(void**)(&init) = dlsym(handle, OPM_PLUGIN_ENTRY_POINT);
  if (!init) {
    return Py_BuildValue("{s:s,s:s}", "error", "entry", "message",
                         "the library exports no " OPM_PLUGIN_ENTRY_POINT " (define it with "
                         "OPM_PLUGIN_INIT from opmarket/c_api.h)");
  }
  Session s = {check, PyList_New(0), PyList_New(0)};
  if (!s.ops || !s.kernels) {
    Py_XDECREF(s.ops);
    Py_XDECREF(s.kernels);
    return NULL;
  }
  OPM_Status status = {OPM_OK, NULL};
  OPM_PluginInit in = {sizeof(OPM_PluginInit), OPM_C_API_VERSION, &host_api, &status, 0};
  session = &s;
  init(&in);
  session = NULL;
  PyObject* result = Py_BuildValue(
      "{s:s,s:I,s:I,s:i,s:s,s:N,s:N,s:N}", "error", "", "plugin_api_version",
      in.plugin_api_version, "host_api_version", (unsigned)OPM_C_API_VERSION,
      "code", (int)status.code, "message", h_Message(&status), "ops", s.ops,
      "kernels", s.kernels, "handle", PyLong_FromVoidPtr(handle));
  free(status.message);
  return result;
}

/* configure(make_error, extra_descrs) */
static PyObject* py_configure(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *fn, *extra;
  if (!PyArg_ParseTuple(args, "OO!", &fn, &PyDict_Type, &extra)) return NULL;
  SET_REF(make_error, Py_NewRef(fn));
  SET_REF(extra_descrs, Py_NewRef(extra));
  Py_RETURN_NONE;
}

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
    KernelType = PyType_FromSpec(&Kernel_spec);
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
