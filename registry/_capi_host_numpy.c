/* Part of opmarket's C-ABI host (_capi_host.h): the Python path, with the GIL held. Attrs
 * from a dict, numpy arrays in and out (the implementations of the bridge interfaces that
 * dispatch uses) and the Kernel type whose compute method the dispatch wrapper calls. */
#include "_capi_host.h"

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

/* A list attr: a list or tuple of numbers; 0 and the status set otherwise. */
static PyObject* list_attr(OPMB_KernelConstruction* c, const char* name, size_t* length,
                           OPM_Status* s) {
  PyObject* o = get_attr(attrs_of(c), name, s);
  if (!o) return NULL;
  if (!PyList_Check(o) && !PyTuple_Check(o)) {
    char buf[512];
    snprintf(buf, sizeof buf, "attr '%s' is not a list", name);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  if (length) *length = (size_t)PySequence_Size(o);
  return o;
}
static void d_attr_int64_list(OPMB_KernelConstruction* c, const char* name, int64_t* v,
                              size_t max_values, size_t* length, OPM_Status* s) {
  size_t n = 0;
  PyObject* o = list_attr(c, name, &n, s);
  if (!o) return;
  if (length) *length = n;
  for (size_t i = 0; v && i < n && i < max_values; ++i) {
    PyObject* item = PySequence_GetItem(o, (Py_ssize_t)i);
    long long x = item && !PyFloat_Check(item) ? PyLong_AsLongLong(item) : -1;
    int bad = !item || PyFloat_Check(item) || (x == -1 && PyErr_Occurred());
    Py_XDECREF(item);
    if (bad) {
      status_from_python(s, OPM_INVALID_ARGUMENT, name);
      if (s && s->code == OPM_OK) h_SetStatus(s, OPM_INVALID_ARGUMENT, "not a list of ints");
      return;
    }
    v[i] = (int64_t)x;
  }
}
static void d_attr_float_list(OPMB_KernelConstruction* c, const char* name, float* v,
                              size_t max_values, size_t* length, OPM_Status* s) {
  size_t n = 0;
  PyObject* o = list_attr(c, name, &n, s);
  if (!o) return;
  if (length) *length = n;
  for (size_t i = 0; v && i < n && i < max_values; ++i) {
    PyObject* item = PySequence_GetItem(o, (Py_ssize_t)i);
    double x = item ? PyFloat_AsDouble(item) : -1.0;
    Py_XDECREF(item);
    if (x == -1.0 && PyErr_Occurred()) {
      status_from_python(s, OPM_INVALID_ARGUMENT, name);
      return;
    }
    v[i] = (float)x;
  }
}

static const OPMB_KernelConstructionOps dict_construction_ops = {
    sizeof(OPMB_KernelConstructionOps), d_attr_type, d_attr_int64, d_attr_float,
    d_attr_bool, d_attr_string, d_attr_int64_list, d_attr_float_list};

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

/* The OPM number of an array's dtype; 0 for none (a swapped byte order too). */
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

PyObject* new_kernel_type(void) { return PyType_FromSpec(&Kernel_spec); }
