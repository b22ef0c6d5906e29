/* Part of opmarket's C-ABI host (_capi_host.h): shape inference. The plugins' shape
 * context (handles that live until the function returns), run from Python (infer) or from a
 * bridge (shape_infer, no Python), the attrs coming from either side's interface. */
#include "_capi_host.h"

/* --- shape inference ------------------------------------------------------------------ */
struct OPM_ShapeHandle {
  struct OPM_ShapeHandle* next; /* the context's list, freed when it ends */
  int64_t rank;                 /* -1: unknown */
  int64_t dims[];
};

struct OPM_ShapeInferenceContext {
  OPMB_ShapeContext* impl; /* the attrs: a dict's (Python) or a bridge's */
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

int64_t h_SICNumInputs(OPM_ShapeInferenceContext* c) { return c->num_inputs; }
OPM_ShapeHandle* h_SICGetInput(OPM_ShapeInferenceContext* c, int i, OPM_Status* s) {
  if (i < 0 || i >= c->num_inputs) {
    char buf[128];
    snprintf(buf, sizeof buf, "input index %d out of range: %zd inputs", i, c->num_inputs);
    h_SetStatus(s, OPM_INVALID_ARGUMENT, buf);
    return NULL;
  }
  h_SetStatus(s, OPM_OK, "");
  return c->inputs[i];
}
int64_t h_SICRank(OPM_ShapeInferenceContext* c, const OPM_ShapeHandle* h) {
  (void)c;
  return h ? h->rank : -1;
}
int64_t h_SICDim(OPM_ShapeInferenceContext* c, const OPM_ShapeHandle* h, int64_t i) {
  (void)c;
  if (!h || h->rank < 0) return -1;
  if (i < 0) i += h->rank;
  if (i < 0 || i >= h->rank) return -1;
  return h->dims[i];
}
OPM_ShapeHandle* h_SICMakeShape(OPM_ShapeInferenceContext* c, const int64_t* dims,
                                       int64_t rank) {
  OPM_ShapeHandle* h = new_handle(c, rank);
  if (h && rank > 0) {
    for (int64_t i = 0; i < rank; ++i) h->dims[i] = dims && dims[i] >= 0 ? dims[i] : -1;
  }
  return h;
}
OPM_ShapeHandle* h_SICUnknownShape(OPM_ShapeInferenceContext* c) {
  return new_handle(c, -1);
}
OPM_ShapeHandle* h_SICWithRank(OPM_ShapeInferenceContext* c, const OPM_ShapeHandle* h,
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
OPM_ShapeHandle* h_SICWithRankAtLeast(OPM_ShapeInferenceContext* c,
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
void h_SICSetOutput(OPM_ShapeInferenceContext* c, int i, const OPM_ShapeHandle* h,
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
void h_SICGetAttrType(OPM_ShapeInferenceContext* c, const char* name, OPM_DataType* v,
                             OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_type) {
    unimplemented(s, "a type attr");
    return;
  }
  c->impl->ops->get_attr_type(c->impl, name, v, s);
}
void h_SICGetAttrInt64(OPM_ShapeInferenceContext* c, const char* name, int64_t* v,
                              OPM_Status* s) {
  clear_status(s);
  if (!c->impl->ops->get_attr_int64) {
    unimplemented(s, "an int attr");
    return;
  }
  c->impl->ops->get_attr_int64(c->impl, name, v, s);
}

/* The Python path's shape context: attrs from a dict; infer() brings the shapes. */
typedef struct {
  OPMB_ShapeContext base;
  PyObject* attrs;
} DictShapeContext;

static void ds_attr_type(OPMB_ShapeContext* c, const char* name, OPM_DataType* v,
                         OPM_Status* s) {
  int64_t x;
  if (attr_int64(((DictShapeContext*)c)->attrs, name, &x, s, "a type") == 0)
    *v = (OPM_DataType)x;
}
static void ds_attr_int64(OPMB_ShapeContext* c, const char* name, int64_t* v, OPM_Status* s) {
  attr_int64(((DictShapeContext*)c)->attrs, name, v, s, "an int");
}
static const OPMB_ShapeContextOps dict_shape_ops = {
    sizeof(OPMB_ShapeContextOps), NULL, NULL, NULL, NULL, NULL, ds_attr_type, ds_attr_int64};

static void free_handles(OPM_ShapeInferenceContext* c) {
  while (c->handles) {
    OPM_ShapeHandle* next = c->handles->next;
    free(c->handles);
    c->handles = next;
  }
  free(c->inputs);
  free((void*)c->outputs);
}

void b_shape_infer(const OPMB_ShapeFn* fn, OPMB_ShapeContext* impl,
                          OPM_Status* status) {
  const OPMB_ShapeContextOps* ops = impl->ops;
  int num_inputs = ops->num_inputs(impl), num_outputs = ops->num_outputs(impl);
  OPM_ShapeInferenceContext c = {impl, num_inputs, NULL, num_outputs, NULL, NULL};
  OPM_Status why = {OPM_OK, NULL};
  c.inputs = (OPM_ShapeHandle**)calloc((size_t)(num_inputs > 0 ? num_inputs : 0) + 1,
                                       sizeof(OPM_ShapeHandle*));
  c.outputs = (const OPM_ShapeHandle**)calloc((size_t)(num_outputs > 0 ? num_outputs : 0) + 1,
                                              sizeof(OPM_ShapeHandle*));
  if (!c.inputs || !c.outputs) {
    h_SetStatus(status, OPM_RESOURCE_EXHAUSTED, "out of memory in shape inference");
    free_handles(&c);
    return;
  }
  for (int i = 0; i < num_inputs; ++i) {
    int64_t rank = ops->input_rank(impl, i);
    OPM_ShapeHandle* h = new_handle(&c, rank < 0 ? -1 : rank);
    if (!h) {
      h_SetStatus(status, OPM_RESOURCE_EXHAUSTED, "out of memory in shape inference");
      free_handles(&c);
      return;
    }
    for (int64_t d = 0; d < rank; ++d) {
      int64_t dim = ops->input_dim(impl, i, d);
      h->dims[d] = dim < 0 ? -1 : dim;
    }
    c.inputs[i] = h;
  }
  fn->fn(&c, &why);
  if (why.code != OPM_OK) {
    fail_with_name(status, fn->name, &why);
  } else {
    clear_status(status);
    for (int i = 0; i < num_outputs && (!status || status->code == OPM_OK); ++i) {
      const OPM_ShapeHandle* h = c.outputs[i];
      if (h) ops->set_output(impl, i, h->rank, h->rank >= 0 ? h->dims : NULL, status);
    }
  }
  free(why.message);
  free_handles(&c);
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
PyObject* py_infer(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *fn_obj, *shapes, *attrs;
  Py_ssize_t num_outputs;
  if (!PyArg_ParseTuple(args, "OO!O!n", &fn_obj, &PyList_Type, &shapes, &PyDict_Type, &attrs,
                        &num_outputs))
    return NULL;
  OPM_ShapeInferenceFn fn = (OPM_ShapeInferenceFn)PyLong_AsVoidPtr(fn_obj);
  if (!fn) return NULL;
  DictShapeContext d = {{&dict_shape_ops}, attrs};
  OPM_ShapeInferenceContext c = {&d.base, PyList_Size(shapes), NULL, num_outputs, NULL,
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
  free_handles(&c);
  free(status.message);
  return result;
}
