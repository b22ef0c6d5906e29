/* The host side of opmarket/c_api.h: the function table a C-ABI plugin calls, and the
 * per-call trampoline from a Python call to the plugin's compute function.
 *
 * A CPython extension module, compiled on first use into opmarket's cache folder for the
 * running Python and numpy (registry/_capi.py; docs/c-api.md says why it is not ctypes).
 * Everything here runs with the GIL held: plugin init, shape functions, create, compute.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "opmarket/c_api.h"

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
  const char* msg = text ? PyUnicode_AsUTF8(text) : NULL;
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

static void register_decl(const char* kind, PyObject* decl, int is_op, OPM_Status* status) {
  if (!session) {
    h_SetStatus(status, OPM_FAILED_PRECONDITION,
                "ops and kernels can only be registered while opmarket loads the library");
    return;
  }
  PyObject* found = PyObject_CallFunction(session->check, "sO", kind, decl);
  if (!found) {
    status_from_python(status, OPM_INTERNAL, "registration");
    return;
  }
  if (found != Py_None) {
    const char* msg = PyUnicode_Check(found) ? PyUnicode_AsUTF8(found) : "refused";
    h_SetStatus(status, OPM_INVALID_ARGUMENT, msg ? msg : "refused");
    Py_DECREF(found);
    PyErr_Clear();
    return;
  }
  Py_DECREF(found);
  if (PyList_Append(is_op ? session->ops : session->kernels, decl) < 0) {
    status_from_python(status, OPM_INTERNAL, "registration");
    return;
  }
  h_SetStatus(status, OPM_OK, "");
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
static void h_RegisterKernelBuilder(const char* name, OPM_KernelBuilder* b,
                                    OPM_Status* status) {
  if (!b) {
    h_SetStatus(status, OPM_INVALID_ARGUMENT, "no kernel builder");
    return;
  }
  set_item(b->decl, "name", PyUnicode_FromString(name ? name : ""));
  register_decl("kernel", b->decl, 0, status);
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
    snprintf(buf, sizeof buf, "attr '%s' is a %s, not %s", name, Py_TYPE(v)->tp_name, want);
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
  PyObject* seq = PySequence_Fast(shape, "a shape is a tuple of dims or None");
  if (!seq) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  OPM_ShapeHandle* h = new_handle(c, n);
  for (Py_ssize_t i = 0; h && i < n; ++i) {
    PyObject* d = PySequence_Fast_GET_ITEM(seq, i);
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
    PyTuple_SET_ITEM(t, i, d);
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
  OPM_ShapeInferenceContext c = {attrs, PyList_GET_SIZE(shapes), NULL, num_outputs, NULL,
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
    c.inputs[i] = handle_from_python(&c, PyList_GET_ITEM(shapes, i));
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
    PyList_SET_ITEM(result, i, s);
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

/* --- kernels ------------------------------------------------------------------------- */
struct OPM_OpKernelConstruction {
  PyObject* attrs;
  OPM_Status status;
};

static void h_OKCGetAttrType(OPM_OpKernelConstruction* c, const char* name, OPM_DataType* v,
                             OPM_Status* s) {
  int64_t x;
  if (attr_int64(c->attrs, name, &x, s, "a type") == 0) *v = (OPM_DataType)x;
}
static void h_OKCGetAttrInt32(OPM_OpKernelConstruction* c, const char* name, int32_t* v,
                              OPM_Status* s) {
  int64_t x;
  if (attr_int64(c->attrs, name, &x, s, "an int") != 0) return;
  if (x < INT32_MIN || x > INT32_MAX) {
    h_SetStatus(s, OPM_INVALID_ARGUMENT, "attr value does not fit in int32");
    return;
  }
  *v = (int32_t)x;
}
static void h_OKCGetAttrInt64(OPM_OpKernelConstruction* c, const char* name, int64_t* v,
                              OPM_Status* s) {
  attr_int64(c->attrs, name, v, s, "an int");
}
static void h_OKCGetAttrFloat(OPM_OpKernelConstruction* c, const char* name, float* v,
                              OPM_Status* s) {
  PyObject* o = get_attr(c->attrs, name, s);
  if (!o) return;
  double x = PyFloat_AsDouble(o);
  if (x == -1.0 && PyErr_Occurred()) {
    status_from_python(s, OPM_INVALID_ARGUMENT, name);
    return;
  }
  *v = (float)x;
  h_SetStatus(s, OPM_OK, "");
}
static void h_OKCGetAttrBool(OPM_OpKernelConstruction* c, const char* name, uint8_t* v,
                             OPM_Status* s) {
  PyObject* o = get_attr(c->attrs, name, s);
  if (!o) return;
  if (!PyBool_Check(o)) {
    h_SetStatus(s, OPM_INVALID_ARGUMENT, "attr is not a bool");
    return;
  }
  *v = o == Py_True;
  h_SetStatus(s, OPM_OK, "");
}
static void h_OKCGetAttrString(OPM_OpKernelConstruction* c, const char* name, char* v,
                               size_t max_length, size_t* length, OPM_Status* s) {
  PyObject* o = get_attr(c->attrs, name, s);
  if (!o) return;
  Py_ssize_t n = 0;
  const char* text = NULL;
  if (PyUnicode_Check(o)) text = PyUnicode_AsUTF8AndSize(o, &n);
  else if (PyBytes_Check(o)) { text = PyBytes_AS_STRING(o); n = PyBytes_GET_SIZE(o); }
  if (!text) {
    PyErr_Clear();
    h_SetStatus(s, OPM_INVALID_ARGUMENT, "attr is not a string");
    return;
  }
  if (length) *length = (size_t)n;
  if (v) memcpy(v, text, (size_t)n < max_length ? (size_t)n : max_length);
  h_SetStatus(s, OPM_OK, "");
}
static void h_OKCFailure(OPM_OpKernelConstruction* c, OPM_Status* s) {
  if (c->status.code == OPM_OK) h_SetStatus(&c->status, s ? s->code : OPM_UNKNOWN,
                                            h_Message(s));
}

struct OPM_Tensor {
  OPM_DataType dtype;
  int ndim;
  const npy_intp* dims;
  void* data;
  size_t nbytes;
  int64_t count;
};

#define SMALL 8

struct OPM_OpKernelContext {
  int num_inputs;
  OPM_Tensor* inputs;
  int num_outputs;
  PyObject** outputs;
  OPM_Tensor* out_tensors;
  OPM_Status status;
};

static int h_NumInputs(OPM_OpKernelContext* c) { return c->num_inputs; }
static int h_NumOutputs(OPM_OpKernelContext* c) { return c->num_outputs; }
static OPM_Tensor* h_GetInput(OPM_OpKernelContext* c, int i, OPM_Status* s) {
  if (i < 0 || i >= c->num_inputs) {
    char buf[128];
    snprintf(buf, sizeof buf, "input index %d out of range: %d inputs", i, c->num_inputs);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  if (s && s->code != OPM_OK) h_SetStatus(s, OPM_OK, "");
  return &c->inputs[i];
}
static OPM_Tensor* h_AllocateOutput(OPM_OpKernelContext* c, int i, OPM_DataType dtype,
                                    const int64_t* dims, int num_dims, OPM_Status* s) {
  char buf[160];
  if (i < 0 || i >= c->num_outputs) {
    snprintf(buf, sizeof buf, "output index %d out of range: %d outputs", i, c->num_outputs);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  if (num_dims < 0 || num_dims > NPY_MAXDIMS) {
    snprintf(buf, sizeof buf, "cannot allocate an output of rank %d", num_dims);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  npy_intp shape[NPY_MAXDIMS];
  for (int d = 0; d < num_dims; ++d) {
    if (dims[d] < 0) {
      h_SetStatus(s, OPM_INVALID_ARGUMENT, "negative dimension in AllocateOutput");
      return NULL;
    }
    shape[d] = (npy_intp)dims[d];
  }
  PyObject* array;
  int npy = npy_of(dtype);
  if (npy >= 0) {
    array = PyArray_SimpleNew(num_dims, shape, npy);
  } else {
    PyObject* key = PyLong_FromLong(dtype);
    PyObject* descr = key && extra_descrs ? PyDict_GetItem(extra_descrs, key) : NULL;
    Py_XDECREF(key);
    if (!descr) {
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
  Py_XSETREF(c->outputs[i], array);
  PyArrayObject* a = (PyArrayObject*)array;
  OPM_Tensor* t = &c->out_tensors[i];
  t->dtype = dtype;
  t->ndim = num_dims;
  t->dims = PyArray_DIMS(a);
  t->data = PyArray_DATA(a);
  t->nbytes = (size_t)PyArray_NBYTES(a);
  t->count = (int64_t)PyArray_SIZE(a);
  if (s && s->code != OPM_OK) h_SetStatus(s, OPM_OK, "");
  return t;
}
static void h_OKCtxFailure(OPM_OpKernelContext* c, OPM_Status* s) {
  if (c->status.code == OPM_OK) h_SetStatus(&c->status, s ? s->code : OPM_UNKNOWN,
                                            h_Message(s));
}

/* NULL-safe: a failed GetInput or AllocateOutput returns NULL, and a kernel that goes on
 * reading it must not crash the process (its failure status is reported instead). */
static OPM_DataType h_TensorType(const OPM_Tensor* t) { return t ? t->dtype : 0; }
static int h_NumDims(const OPM_Tensor* t) { return t ? t->ndim : 0; }
static int64_t h_Dim(const OPM_Tensor* t, int i) {
  return t && i >= 0 && i < t->ndim ? (int64_t)t->dims[i] : -1;
}
static void* h_TensorData(const OPM_Tensor* t) { return t ? t->data : NULL; }
static size_t h_TensorByteSize(const OPM_Tensor* t) { return t ? t->nbytes : 0; }
static int64_t h_TensorElementCount(const OPM_Tensor* t) { return t ? t->count : 0; }

typedef struct {
  PyObject_HEAD
  OPM_KernelComputeFn compute;
  OPM_KernelDeleteFn del;
  void* state;
  int num_outputs;
  PyObject* name;
} KernelObject;

static void release(KernelObject* k) {
  if (k->state && k->del) k->del(k->state);
  k->state = NULL;
  k->del = NULL;
  k->compute = NULL;
}

static int Kernel_init(KernelObject* self, PyObject* args, PyObject* kwargs) {
  (void)kwargs;
  PyObject *create_obj, *compute_obj, *delete_obj, *attrs, *name;
  int num_outputs;
  if (!PyArg_ParseTuple(args, "OOOO!iU", &create_obj, &compute_obj, &delete_obj, &PyDict_Type,
                        &attrs, &num_outputs, &name))
    return -1;
  release(self);
  OPM_KernelCreateFn create = create_obj == Py_None ? NULL
      : (OPM_KernelCreateFn)PyLong_AsVoidPtr(create_obj);
  OPM_KernelComputeFn compute = (OPM_KernelComputeFn)PyLong_AsVoidPtr(compute_obj);
  OPM_KernelDeleteFn del = delete_obj == Py_None ? NULL
      : (OPM_KernelDeleteFn)PyLong_AsVoidPtr(delete_obj);
  if (PyErr_Occurred()) return -1;
  if (!compute) {
    PyErr_SetString(PyExc_ValueError, "a kernel needs a compute function");
    return -1;
  }
  Py_XSETREF(self->name, Py_NewRef(name));
  self->num_outputs = num_outputs;
  void* state = NULL;
  if (create) {
    OPM_OpKernelConstruction c = {attrs, {OPM_OK, NULL}};
    state = create(&c);
    if (c.status.code != OPM_OK) {
      if (state && del) del(state);
      PyObject* msg = PyUnicode_FromFormat("%U: %s", name, h_Message(&c.status));
      if (msg) {
        raise_status(c.status.code, PyUnicode_AsUTF8(msg));
        Py_DECREF(msg);
      }
      free(c.status.message);
      return -1;
    }
    free(c.status.message);
  }
  self->compute = compute;
  self->del = del;
  self->state = state;
  return 0;
}

static void Kernel_dealloc(KernelObject* self) {
  release(self);
  Py_XDECREF(self->name);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* Kernel_close(KernelObject* self, PyObject* unused) {
  (void)unused;
  release(self);
  Py_RETURN_NONE;
}

static PyObject* Kernel_prepare(KernelObject* self, PyObject* const* args, Py_ssize_t n) {
  (void)self, (void)args, (void)n;
  Py_RETURN_NONE;
}

static PyObject* Kernel_compute(KernelObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (!self->compute) {
    PyErr_SetString(PyExc_RuntimeError, "the kernel was closed");
    return NULL;
  }
  OPM_Tensor in_small[SMALL], out_small[SMALL];
  PyObject* out_obj_small[SMALL];
  PyObject* keep_small[SMALL];
  int nin = (int)nargs, nout = self->num_outputs;
  OPM_Tensor* ins = nin <= SMALL ? in_small : (OPM_Tensor*)malloc(sizeof(OPM_Tensor) * nin);
  PyObject** keep = nin <= SMALL ? keep_small : (PyObject**)malloc(sizeof(PyObject*) * nin);
  OPM_Tensor* outs = nout <= SMALL ? out_small
      : (OPM_Tensor*)malloc(sizeof(OPM_Tensor) * nout);
  PyObject** out_objs = nout <= SMALL ? out_obj_small
      : (PyObject**)malloc(sizeof(PyObject*) * nout);
  PyObject* result = NULL;
  OPM_OpKernelContext c = {nin, ins, nout, out_objs, outs, {OPM_OK, NULL}};
  int kept = 0;
  if (!ins || !keep || !outs || !out_objs) {
    PyErr_NoMemory();
    goto done;
  }
  for (int i = 0; i < nout; ++i) out_objs[i] = NULL;
  for (int i = 0; i < nin; ++i) {
    PyObject* x = args[i];
    if (!PyArray_Check(x)) {
      PyErr_Format(PyExc_TypeError, "%U: input %d is a %s, not a numpy array", self->name, i,
                   Py_TYPE(x)->tp_name);
      goto done;
    }
    PyArrayObject* a = (PyArrayObject*)x;
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) {
      a = PyArray_GETCONTIGUOUS(a);
      if (!a) goto done;
      keep[kept++] = (PyObject*)a;
    }
    OPM_Tensor* t = &ins[i];
    t->dtype = dtype_of_array(a);
    if (!t->dtype) {
      PyErr_Format(PyExc_TypeError, "%U: input %d has a dtype the C API has no number for",
                   self->name, i);
      goto done;
    }
    t->ndim = PyArray_NDIM(a);
    t->dims = PyArray_DIMS(a);
    t->data = PyArray_DATA(a);
    t->nbytes = (size_t)PyArray_NBYTES(a);
    t->count = (int64_t)PyArray_SIZE(a);
  }
  self->compute(self->state, &c);
  if (c.status.code != OPM_OK) {
    PyObject* msg = PyUnicode_FromFormat("%U: %s", self->name, h_Message(&c.status));
    if (msg) {
      raise_status(c.status.code, PyUnicode_AsUTF8(msg));
      Py_DECREF(msg);
    }
    goto done;
  }
  if (PyErr_Occurred()) goto done;
  for (int i = 0; i < nout; ++i) {
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
      PyTuple_SET_ITEM(result, i, out_objs[i]);
      out_objs[i] = NULL;
    }
  }
done:
  if (out_objs)
    for (int i = 0; i < nout; ++i) Py_XDECREF(out_objs[i]);
  for (int i = 0; i < kept; ++i) Py_DECREF(keep[i]);
  free(c.status.message);
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
    {"close", (PyCFunction)Kernel_close, METH_NOARGS, "Call the plugin's delete."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "opmarket_capi_host.Kernel",
    .tp_basicsize = sizeof(KernelObject),
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A C-ABI kernel instance: Kernel(create, compute, delete, attrs, outputs, name).",
    .tp_methods = Kernel_methods,
    .tp_init = (initproc)Kernel_init,
    .tp_new = PyType_GenericNew,
};

/* --- the table ------------------------------------------------------------------------ */
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
  OPM_InitPluginFn init = (OPM_InitPluginFn)dlsym(handle, OPM_PLUGIN_ENTRY_POINT);
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
  Py_XSETREF(make_error, Py_NewRef(fn));
  Py_XSETREF(extra_descrs, Py_NewRef(extra));
  Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"load", py_load, METH_VARARGS, "load(path, check) -> dict"},
    {"infer", py_infer, METH_VARARGS, "infer(fn, input_shapes, attrs, num_outputs) -> list"},
    {"configure", py_configure, METH_VARARGS, "configure(make_error, extra_descrs)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "opmarket_capi_host",
                                        "The host of opmarket/c_api.h.", -1, module_methods,
                                        NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_opmarket_capi_host(void) {
  import_array();
  if (PyType_Ready(&KernelType) < 0) return NULL;
  PyObject* m = PyModule_Create(&module_def);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "Kernel", (PyObject*)&KernelType) < 0 ||
      PyModule_AddIntConstant(m, "API_VERSION", OPM_C_API_VERSION) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
